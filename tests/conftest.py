"""Shared fixtures: a real local runner (worker subprocesses, CPU interpreter) and small
projects written to a temporary directory."""

from __future__ import annotations

import atexit
import os
import select
import shutil
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Optional

import pytest

from runner.serve.local import LocalRunner
from runner.schema import EvalOptions, EvalResult
from runner.source import build_request

ROOT = Path(__file__).resolve().parent.parent

# A small, correct Triton kernel with its wrapper and inputs: the reference of most tests.
ADD_RELU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0), mask=mask)


def add_relu(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_relu_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out


INPUT_CASES = [dict(n=300), dict(n=2048)]


def get_inputs(n=300):
    return [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")]
'''


VARIANT = '''
import torch
import triton
import triton.language as tl
{extra}


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, {value}, mask={store_mask})


def {name}(x, y):
    out = torch.empty_like(x)
    n = x.numel()
{pre}
    add_relu_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block})
{post}
    return {ret}
'''


def kernel_variant(*, pre: str = "", post: str = "", store_mask: str = "mask", block: int = 128,
                   extra: str = "", name: str = "add_relu", ret: str = "out",
                   value: str = "tl.maximum(x + y, 0.0)") -> str:
    """A candidate module built from the add_relu kernel with pieces swapped. ``pre``/``post``
    are statements (indented four spaces) before and after the launch."""
    return VARIANT.format(pre=pre, post=post, store_mask=store_mask, block=block,
                          extra=textwrap.dedent(extra), name=name, ret=ret, value=value)


@pytest.fixture(scope="session")
def runner():
    # static_reject_first=False: candidates that the static check rejects still run, so that the
    # tests of the runtime checks can use plain means (os.fork, import runner...); the verdict
    # still rejects them (tests/test_static_means.py tests the runner's front door).
    r = LocalRunner(workers=2, device="interpreter", static_reject_first=False)
    yield r
    r.close()


class Project:
    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "pyproject.toml").write_text("[project]\nname = 'userproj'\n")

    def write(self, rel: str, text: str) -> "Project":
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        return self

    def request(self, target: str, candidate: Optional[str] = None, **options):
        opts = EvalOptions(**options)
        req, _, _ = build_request(target, candidate, opts, root=self.root, cwd=self.root)
        return req

    def evaluate(self, runner, target: str, candidate: Optional[str] = None, **options) -> EvalResult:
        return runner.evaluate(self.request(target, candidate, **options))


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path).write("ref.py", ADD_RELU)


def flag_codes(result: EvalResult, severity: Optional[str] = None) -> set[str]:
    return {f.code for f in result.flags if severity is None or f.severity == severity}


_RELAYS: dict[Path, Path] = {}


def relay(mark: Path) -> Path:
    """A FIFO that a job can write to and whose lines this test appends to ``mark``. A job sees
    the host read-only and the host's /tmp not at all (the sandbox), so a mark file of the test's
    own is out of its reach; a FIFO outside /tmp can still be opened for writing on a read-only
    mount (opening it changes no file)."""
    if mark in _RELAYS:
        return _RELAYS[mark]
    d = Path(tempfile.mkdtemp(prefix="geak-test-marks-", dir="/var/tmp"))
    fifo = d / "mark"
    os.mkfifo(fifo, 0o666)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keep = os.open(fifo, os.O_WRONLY)  # never EOF while the test runs: writers come and go

    def pump():
        try:
            while True:
                select.select([rfd], [], [])
                data = os.read(rfd, 65536)
                with open(mark, "ab") as f:
                    f.write(data)
        except OSError:
            pass

    threading.Thread(target=pump, daemon=True).start()
    _RELAYS[mark] = fifo
    atexit.register(lambda: (os.close(keep), shutil.rmtree(d, ignore_errors=True)))
    return fifo


def pytest_terminal_summary(terminalreporter):
    """A module skipped as a whole (a missing optional part: Ray, Neovim) is said in one line
    even under ``-q``, with what to install: otherwise ``-q`` shows only a count of skips."""
    seen = set()
    for rep in terminalreporter.stats.get("skipped", []):
        if "::" in rep.nodeid or not isinstance(rep.longrepr, tuple):
            continue
        reason = str(rep.longrepr[2]).removeprefix("Skipped: ")
        if (rep.nodeid, reason) not in seen:
            seen.add((rep.nodeid, reason))
            terminalreporter.write_line(f"skipped as a whole: {rep.nodeid}: {reason}")


# How the test files are dealt out to the xdist processes (``--dist loadfile``): the two files
# that start a Ray cluster (tests/test_ray.py and the attack corpus's Ray runner) go to one
# process, one after the other. Only one test cluster runs on a machine at a time
# (``test_ray.Cluster`` holds a lock), so in two processes one of them waited, idle, for the
# other's module to end: the attack corpus's Ray runner took 54-66 s to set up on 2 cores, 19 s
# with the files together.
RAY_FILES = ("test_attacks.py", "test_ray.py")


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "the Ray cluster's files" if path.rsplit("/", 1)[-1] in RAY_FILES else path

    return RayFilesTogether(config, log)
