"""How often each static rule (``runner.source.static_flags``, the means of in-process forgery
included) hits real kernel code: TritonBench, Liger-Kernel, KernelBench, and this project's
examples and benchmarks. No rule of "reject" severity may hit a file of the kernel corpora.

The third-party code is read from bare git mirrors (``git --git-dir DIR show HEAD:PATH``), never
copied here:

    .venv/bin/python scripts/static_means_corpus.py --mirror /work/.mirror [--show-hits]

where ``/work/.mirror/<owner>+<name>/repo`` holds thunlp/TritonBench, linkedin/Liger-Kernel and
ScalingIntelligence/KernelBench (and, when present, FlagOpen/FlagGems and
fla-org/flash-linear-attention). Prints, per corpus, the number of files, the files each
(code, severity) hits, and every file hit by a "reject" rule, read as a new file and as an edit
of itself (``static_flags``' ``excused``: a candidate keeps what the user's original already
does); exits 1 if a file of TritonBench, Liger-Kernel, KernelBench or this project has one.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.source import means_patterns, static_flags  # noqa: E402

REQUIRED = ("TritonBench", "Liger-Kernel", "KernelBench", "this project")
"""Corpora on which no rule of "reject" severity may hit a file (the exit status); the others
(more Triton libraries, the harnesses) are measured for information."""


def git_files(git_dir: Path, prefix: str, suffix: str = ".py") -> list[str]:
    out = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", "HEAD", "--", prefix],
                         capture_output=True, text=True, check=True).stdout
    return sorted(p for p in out.splitlines() if p.endswith(suffix))


def git_show(git_dir: Path, path: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), "show", f"HEAD:{path}"], capture_output=True,
                          check=True).stdout.decode("utf-8", "replace")


def corpora(mirror: Path) -> list[tuple[str, bool, list[tuple[str, str]]]]:
    """(name, kernel code?, [(label, text)]): kernel corpora must get no reject flag; the
    harnesses (benchmark runners, not candidates) are measured for information."""
    tb = mirror / "thunlp+TritonBench" / "repo"
    liger = mirror / "linkedin+Liger-Kernel" / "repo"
    kb = mirror / "ScalingIntelligence+KernelBench" / "repo"
    out = []

    def from_git(name, kernel, git_dir, prefixes, keep=lambda p: True):
        files = [p for pre in prefixes for p in git_files(git_dir, pre) if keep(p)]
        out.append((name, kernel, [(p, git_show(git_dir, p)) for p in files]))

    from_git("TritonBench-G (data/TritonBench_G_v1/*.py)", True, tb, ["data/TritonBench_G_v1/"])
    alpac = json.loads(git_show(tb, "data/TritonBench_G_comp_alpac_v1.json"))
    out.append(("TritonBench-G comp_alpac (data/TritonBench_G_comp_alpac_v1.json, 'output')", True,
                [(f"TritonBench_G_comp_alpac_v1.json[{i}]", e.get("output") or "") for i, e in enumerate(alpac)]))
    from_git("TritonBench-T (data/TritonBench_T_v1/*.py)", True, tb, ["data/TritonBench_T_v1/"])
    from_git("Liger-Kernel (src/liger_kernel/ops/*.py)", True, liger, ["src/liger_kernel/ops/"],
             keep=lambda p: p.count("/") == 3)
    from_git("Liger-Kernel (src/liger_kernel/ops/**, backends)", True, liger, ["src/liger_kernel/ops/"],
             keep=lambda p: p.count("/") > 3)
    from_git("KernelBench (KernelBench/level*/*.py)", True, kb, ["KernelBench/"])
    from_git("KernelBench example candidates (src/kernelbench/prompts/**.py)", True, kb, ["src/kernelbench/prompts/"])
    # More real Triton libraries, where their mirrors are there (fetched like the ones above).
    gems = mirror / "FlagOpen+FlagGems" / "repo"
    if gems.exists():
        from_git("FlagGems (src/flag_gems/**.py)", True, gems, ["src/flag_gems/"])
    fla = mirror / "fla-org+flash-linear-attention" / "repo"
    if fla.exists():
        from_git("flash-linear-attention (fla/ops/**.py, fla/modules/**.py)", True, fla, ["fla/ops/", "fla/modules/"])
    local = sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    out.append(("this project (examples/*.py, benchmarks/*.py)", True,
                [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in local]))
    # Harnesses, not kernels: they time, spawn and compile; for information only.
    from_git("harness: TritonBench performance_metrics/**.py", False, tb, ["performance_metrics/"])
    from_git("harness: KernelBench src/kernelbench/*.py, scripts/*.py", False, kb, ["src/kernelbench/", "scripts/"],
             keep=lambda p: "/prompts/" not in p and "/unit_tests/" not in p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--show-hits", action="store_true", help="print every flag's message, not only rejects")
    args = ap.parse_args()
    bad = 0
    for name, kernel, files in corpora(args.mirror):
        per: dict[tuple[str, str], int] = collections.Counter()
        rejected = []
        as_edit = 0  # files with a reject flag when the candidate is an edit of that same file
        for label, text in files:
            flags = static_flags(text, label, "", "")
            if any(f.severity == "reject" for f in static_flags(text, label, "", "", means_patterns(text))):
                as_edit += 1
            for key in {(f.code, f.severity) for f in flags}:
                per[key] += 1
            rejects = [f for f in flags if f.severity == "reject"]
            if rejects:
                rejected.append((label, rejects))
            if args.show_hits:
                for f in flags:
                    if f.code not in ("torch_call_in_source",):
                        print(f"    [{f.severity}] {f.message}")
        print(f"\n{name}: {len(files)} files, {len(rejected)} with a reject flag "
              f"({as_edit} as an edit of the same file, whose own means are excused)")
        for (code, sev), n in sorted(per.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {code:22s} {sev:8s} {n:4d}")
        for label, rejects in rejected:
            for f in rejects:
                print(f"  REJECT {f.message}")
        if kernel and rejected and name.startswith(REQUIRED):
            bad += len(rejected)
    print(f"\nfiles of {', '.join(REQUIRED)} with a reject flag: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
