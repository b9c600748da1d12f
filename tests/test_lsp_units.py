"""The language server's logic without the protocol: targets, edits, settings, the store."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import ADD_RELU, ROOT, kernel_variant
from geak_lsp import settings as S
from geak_lsp.edits import MergeError, line_range, merge
from geak_lsp.store import Record, Store
from geak_lsp.targets import TargetCache, find_targets

TORCH_FILE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Scale(nn.Module):
        def __init__(self, dim: int, eps: float = 1e-5):
            super().__init__()
            self.dim = dim

        def forward(self, x, w):
            return x * w


    def gelu_tanh(x):
        return torch.nn.functional.gelu(x, approximate="tanh")


    def helper(a, b):
        return a + b


    class Plain:
        pass


    def test_gelu():
        gelu_tanh(torch.ones(3))
''')


def test_targets_in_the_examples_and_in_torch_code():
    found = find_targets((ROOT / "examples" / "softmax.py").read_text())
    kinds = {t.name: t.kind for t in found.targets}
    assert kinds == {"softmax_kernel": "kernel", "softmax": "wrapper"}
    k = found.by_name("softmax_kernel")
    assert k.wrappers == ["softmax"] and k.evaluated == "softmax"
    assert found.by_name("softmax").kernels == ["softmax_kernel"]
    assert "cases" in found.conventions
    # The decorator belongs to the kernel's span and header; the header stops before the body.
    lines = found.lines
    assert lines[k.span.start].startswith("@triton.jit") and lines[k.name_line].startswith("def softmax_kernel")
    assert k.header.end > k.name_line and lines[k.header.end].rstrip().endswith("):")  # a two-line signature
    t = find_targets(TORCH_FILE)
    assert {x.name: x.kind for x in t.targets} == {"Scale": "module", "gelu_tanh": "function"}
    assert t.by_name("Scale").params == ["x", "w"] and t.by_name("Scale").init_params == ["dim", "eps"]
    assert t.conventions == ["tritonbench"]
    assert t.at_line(t.by_name("gelu_tanh").span.start + 1).name == "gelu_tanh"


def test_a_kernel_change_changes_the_hash_and_an_input_change_does_not():
    a = find_targets(ADD_RELU)
    b = find_targets(ADD_RELU.replace("get_inputs(n=300)", "get_inputs(n=301)"))
    c = find_targets(ADD_RELU.replace("tl.maximum(x + y, 0.0)", "tl.maximum(y + x, 0.0)"))
    h = lambda d, n: d.source_hash(d.by_name(n))  # noqa: E731
    assert h(a, "add_relu") == h(b, "add_relu") == h(a, "add_relu_kernel")
    assert h(a, "add_relu") != h(c, "add_relu")


def test_the_cache_keeps_the_last_good_tree_for_text_that_does_not_parse():
    cache = TargetCache()
    good = cache.get("file:///k.py", ADD_RELU)
    bad = cache.get("file:///k.py", ADD_RELU.replace("def add_relu(x, y):", "def add_relu(x, y)"))
    assert bad.syntax_error.startswith("line ") and bad.stale_tree
    assert [t.name for t in bad.targets] == [t.name for t in good.targets]
    never = cache.get("file:///new.py", "def f(:\n")
    assert never.targets == [] and never.syntax_error and not never.stale_tree
    assert cache.get("file:///nul.py", "x = 1\x00").targets == []


def test_merge_replaces_the_changed_definitions_and_keeps_the_users_inputs():
    result = kernel_variant(block=512)  # a module without the inputs
    m = merge(ADD_RELU, result)
    assert m.changed == ["add_relu"] and m.added == []
    assert "BLOCK=512" in m.text and "def get_inputs(n=300):" in m.text and m.text.count("def add_relu(") == 1
    # A helper kernel and an import that the result needs are added, before the wrapper.
    result = result.replace("import torch\n", "import math\nimport torch\n").replace(
        "def add_relu(x, y):", "@triton.jit\ndef _noop():\n    pass\n\n\ndef add_relu(x, y):")
    m = merge(ADD_RELU, result)
    assert m.added == ["_noop"] and "import math\n" in m.text
    assert m.text.index("def _noop") < m.text.index("def add_relu(")
    compile(m.text, "k.py", "exec")
    with pytest.raises(MergeError, match="the result does not parse"):
        merge(ADD_RELU, "def add_relu(:\n")
    with pytest.raises(MergeError, match="the document does not parse"):
        merge("def (", result)


def test_line_ranges_at_the_end_of_a_document_without_a_final_newline():
    lines = "a\nb\nlast".splitlines(keepends=True)
    assert line_range(lines, 0, 1) == ((0, 0), (1, 0))
    assert line_range(lines, 1, 3) == ((1, 0), (2, 4))
    assert line_range(lines, 3, 3) == ((2, 4), (2, 4))
    lines = "a\nb\n".splitlines(keepends=True)
    assert line_range(lines, 1, 2) == ((1, 0), (2, 0))


def test_settings_merge_validate_and_fall_back():
    s, problems = S.parse({"geak": {"iterations": 4, "runner": {"url": "http://gpu:8765"}}},
                          {"parallel": 2, "maxJobs": 3})
    assert (s.iterations, s.runner_url, s.parallel, s.max_jobs, problems) == (4, "http://gpu:8765", 2, 3, [])
    assert s.effective_strategy == "tune"
    s, problems = S.parse({"strategy": "llm", "iterations": True, "arch": "sm_99"})
    assert s.strategy == "tune" and s.iterations == 3 and s.arch is None
    assert any("geak.iterations: expected an integer" in p for p in problems)
    assert any("geak.arch: expected one of 'sm_80'" in p for p in problems)
    assert any("geak.strategy is 'llm' but geak.provider and geak.model" in p for p in problems)
    s, _ = S.parse({"provider": "anthropic", "model": "claude"})
    assert s.effective_strategy == "llm"
    s, problems = S.parse("nonsense", {"runner.url": "local"})
    assert s.runner_url is None and problems == ["geak settings: expected an object, got str; ignored"]


def test_the_store_persists_by_source_hash_and_device_and_survives_a_damaged_file(tmp_path):
    st = Store(tmp_path)
    rec = Record(path="k.py", symbol="add_relu", source_hash="abc", device="Triton CPU interpreter",
                 measured_at=1.0, kind="benchmark", status="ok", correct=True, message="ok")
    st.put(rec)
    st.put(Record(**{**rec.__dict__, "device": "NVIDIA H200 (cuda, sm_90)", "measured_at": 2.0}))
    st.put(Record(**{**rec.__dict__, "measured_at": 3.0}))  # same key: replaces the first
    again = Store(tmp_path)
    assert len(again.for_target("k.py", "add_relu")) == 2
    assert again.latest("k.py", "add_relu").measured_at == 3.0
    (tmp_path / ".geak" / "lsp-results.json").write_text("{not json")
    broken = Store(tmp_path)
    assert broken.latest("k.py", "add_relu") is None and "unreadable" in broken.problem
    assert (tmp_path / ".geak" / "lsp-results.json.bad").exists()
    broken.put(rec)
    assert json.loads((tmp_path / ".geak" / "lsp-results.json").read_text())["version"] == 1



def test_runs_are_kept_per_target_newest_first_and_a_file_without_them_still_loads(tmp_path):
    from geak_lsp.store import MAX_RUNS, CandidateRecord, CaseRecord, RunRecord
    st = Store(tmp_path)
    for i in range(MAX_RUNS + 3):
        st.put_run(RunRecord(path="k.py", symbol="add_relu", name="add_relu", source_hash=f"h{i}", kind="optimize",
                             strategy="tune", device="Triton CPU interpreter", started_at=i, finished_at=i + 0.5,
                             outcome="no-improvement", message=f"run {i}",
                             original=[CaseRecord(label="n=300", shapes="x: float32[300]", passed=True)],
                             candidates=[CandidateRecord(label="BLOCK=512", verdict="verified", correct=True,
                                                         cases=[CaseRecord(label="n=300", shapes="", passed=True)])]))
    st.put_run(RunRecord(path="k.py", symbol="other", name="other", source_hash="x", kind="benchmark",
                         strategy="benchmark", device="d", started_at=0, finished_at=1, outcome="benchmark", message=""))
    again = Store(tmp_path)
    runs = again.runs("k.py", "add_relu")
    assert len(runs) == MAX_RUNS and runs[0].message == f"run {MAX_RUNS + 2}"
    assert runs[0].candidates[0].cases[0].label == "n=300" and runs[0].original[0].shapes == "x: float32[300]"
    assert len(again.runs("k.py", "other")) == 1
    # A file written before runs were kept: its records load, with no runs.
    doc = json.loads((tmp_path / ".geak" / "lsp-results.json").read_text())
    doc.pop("runs")
    (tmp_path / ".geak" / "lsp-results.json").write_text(json.dumps(doc))
    old = Store(tmp_path)
    assert old.problem is None and old.runs("k.py", "add_relu") == []


TRICKY = '''"""Module docstring
def not_a_function():
    with a line at column 0
"""
import torch
import triton


@triton.jit
@other.decorator(
    x=1,
)
def k(x_ptr):
    s = """
def fake(x):
    torch.relu(x)
"""
    pass


def wrap(x):
    k[(1,)](x)
try:
    import numpy
except ImportError:
    numpy = None
else:
    pass
finally:
    pass
if True:
    def maybe(x): return torch.relu(x)
elif False:
    pass
value = foo(
"col-0 string in a call")
total = 1 + \\
2
def f(x):
    return torch.relu(x)
'''


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in
                                        list((ROOT / "examples").glob("*.py")) + list((ROOT / "runner").glob("*.py"))
                                        + list((ROOT / "tests").glob("*.py"))) + ["<tricky>"])
def test_block_wise_discovery_equals_one_parse_of_the_whole_file(path, monkeypatch):
    from geak_lsp import targets as T
    text = TRICKY if path == "<tricky>" else (ROOT / path).read_text()
    blockwise = T.find_targets(text)
    monkeypatch.setattr(T, "_block_starts", lambda lines: [0])
    whole = T.find_targets(text)
    assert blockwise == whole
    if path == "<tricky>":
        assert {t.name: t.kind for t in whole.targets} == {"k": "kernel", "wrap": "wrapper", "f": "function"}


def test_strings_over_many_column_0_lines_and_syntax_errors_cost_few_parses(monkeypatch):
    """A block that stops inside a string is joined with 1, 2, 4, ... following blocks (not one
    more at a time, which was quadratic: minutes on a 6.7 MB file with one typo), and a block
    that fails on its own mistake is the document's error, at the line a whole-file parse gives."""
    import ast

    from geak_lsp import targets as T
    body = "".join(f"line{i} = {i}\n" for i in range(400))
    text = 'import torch\nDOC = """\n' + body + '"""\n' + ADD_RELU
    calls = []
    real = T._summarize
    monkeypatch.setattr(T, "_summarize", lambda s: calls.append(len(s)) or real(s))
    T._BLOCKS.clear()
    T._BAD.clear()
    found = T.find_targets(text)
    assert {t.name for t in found.targets} == {"add_relu_kernel", "add_relu"}
    assert found.by_name("add_relu").name_line == text.splitlines().index("def add_relu(x, y):")
    assert len(calls) < 30, len(calls)
    many = "".join(ADD_RELU.replace("add_relu", f"add_relu{i}") for i in range(300))
    T.find_targets(many)  # every block parsed once; below, only what an edit breaks is parsed again
    broken = {
        "a name at column 0 inside a body": many.replace("    n = x.numel()", "x   n = x.numel()", 150),
        "an unclosed bracket": many.replace("def add_relu200(x, y):", "def add_relu200(x, y:"),
        "an unclosed triple-quoted string": many.replace("def add_relu7(x, y):", 'S = """\ndef add_relu7(x, y):'),
        "an unexpected indent": many.replace("def add_relu9(x, y):\n", "def add_relu9(x, y):\n  z = 1\n"),
        "at the end": many + "foo = = 1\n",
    }
    for what, src in broken.items():
        calls.clear()
        with pytest.raises(SyntaxError) as mine:
            T.find_targets(src)
        with pytest.raises(SyntaxError) as whole:
            ast.parse(src)
        assert (mine.value.lineno, mine.value.msg) == (whole.value.lineno, whole.value.msg), what
        assert len(calls) < 40, (what, len(calls))


def test_runner_advice_is_said_as_the_editor_setting():
    from geak_lsp.wording import editor_words
    cpu = ("CPU interpreter: correctness only, no timing; connect a GPU runner (--runner URL or "
           "GEAK_RUNNER_URL) to measure speed")
    assert editor_words(cpu) == ("CPU interpreter: correctness only, no timing; set geak.runner.url to a GPU "
                                 "runner to measure speed")
    tune = ("no timing here, so nothing is offered as faster: timing needs a GPU. Run the same command on a GPU "
            "box, or point it at a runner there: --runner http://HOST:8765 (geak-runner serve on that box)")
    assert editor_words(tune).endswith("Set geak.runner.url to a runner on a GPU box "
                                       "(http://HOST:8765: geak-runner serve there)")
    for text in (cpu, tune, "run where the original runs (a GPU runner: --runner URL), or", "use --runner URL"):
        assert "--runner" not in editor_words(text) and "GEAK_RUNNER_URL" not in editor_words(text)
    assert editor_words("the kernel mismatched") == "the kernel mismatched"
