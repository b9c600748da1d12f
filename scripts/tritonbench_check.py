"""The evaluator on public TritonBench-G tasks (thunlp/TritonBench, data/TritonBench_G_v1).

    python scripts/tritonbench_check.py mutate  TASKS MUTANTS       # CPU: one-line wrong variants
    python scripts/tritonbench_check.py plain   TASKS OUT [--mutants MUTANTS] [--jobs N]
    python scripts/tritonbench_check.py single  TASKS OUT [--jobs N] [--device auto]
    python scripts/tritonbench_check.py summary OUT [--bench BENCH.json] [--bench-mutants B.json]

``plain`` runs each task file as a plain script (``runpy``, its module-level
``result_gold = test_x()``) twice in one fresh process under one seed: whether the original
runs, and whether its results repeat. With ``--mutants`` it also runs each mutant once in a
process of its own and compares its ``result_gold`` with the original's: a mutant whose
results differ (or that fails) is *wrong* — the labelled set the evaluator must catch.
``single`` evaluates each original against itself (``--no-timing``) in a process of its own,
through the same loader ``geak bench`` uses, for comparison with one ``geak bench`` run over
all of them. ``summary`` joins the files into the tables of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLAIN = r'''
import contextlib, math, os, random, runpy, sys, traceback
if {interpreter!r}:
    os.environ["TRITON_INTERPRET"] = "1"
import numpy, torch
sys.path.insert(0, {root!r})
from runner.worker.compare import compare
from runner.worker.exchange import to_plain
MODE = contextlib.nullcontext
if {interpreter!r}:  # code written for "cuda" runs on the CPU, as the runner's interpreter workers do
    from runner import guards
    guards.patch_cuda_for_interpreter(); guards.patch_autotune_for_interpreter()
    MODE = guards.InterpreterDevice

def run(path):
    random.seed(0); numpy.random.seed(0); torch.manual_seed(0)
    with MODE():
        g = runpy.run_path(path, run_name="__geak_plain__")
    keys = sorted(k for k in g if k.startswith("result_gold"))
    return to_plain({{k: g[k] for k in keys}})

out = {{"path": {path!r}}}
try:
    a = run({path!r})
    out["ran"] = True
    if {twice!r}:
        b = run({path!r})
        c = compare(a, b)
        out["repeat"] = c.ok
        out["repeat_detail"] = c.detail
    torch.save(a, {save!r})
except BaseException as e:
    out["ran"] = False
    out["error"] = (type(e).__name__ + ": " + str(e).strip().splitlines()[0][:300]) if str(e).strip() else type(e).__name__
print("@@" + __import__("json").dumps(out))
'''

COMPARE = r'''
import sys, json, torch
sys.path.insert(0, {root!r})
from runner.worker.compare import compare
a = torch.load({a!r}, weights_only=True); b = torch.load({b!r}, weights_only=True)
c = compare(a, b)
print("@@" + json.dumps({{"same": c.ok, "detail": c.detail}}))
'''


def _sub(code: str, timeout: float = 300) -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                           cwd="/tmp")
    except subprocess.TimeoutExpired:
        return {"ran": False, "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("@@"):
            return json.loads(line[2:])
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    return {"ran": False, "error": f"exit {p.returncode}: " + " | ".join(tail)[:400]}


# --------------------------------------------------------------------------- mutants

def _mutations(line: str) -> list[tuple[str, str]]:
    """(kind, new line) one-line mutations of a kernel line."""
    out = []
    code, _, comment = line.partition("#")
    for old, new, kind in ((" < ", " <= ", "off_by_one_mask"), (" <= ", " < ", "off_by_one_mask"),
                           (" + ", " - ", "plus_minus"), (" * ", " + ", "times_plus"),
                           ("tl.maximum(", "tl.minimum(", "max_min"), ("tl.minimum(", "tl.maximum(", "max_min"),
                           ("tl.sum(", "tl.max(", "sum_max"), ("tl.exp(", "tl.exp2(", "exp_exp2"),
                           ("tl.program_id(0)", "(tl.program_id(0) + 1)", "program_id_shift"),
                           ("tl.program_id(axis=0)", "(tl.program_id(axis=0) + 1)", "program_id_shift"),
                           ("tl.sqrt(", "tl.rsqrt(", "sqrt_rsqrt")):
        if old in code:
            out.append((kind, code.replace(old, new, 1) + (("#" + comment) if comment else "")))
    return out


def mutate(tasks: Path, outdir: Path, per_task: int = 2) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    sep = "#" * 146
    made = 0
    for f in sorted(tasks.glob("*.py")):
        text = f.read_text()
        top = text.split(sep)[0]
        try:
            tree = ast.parse(top)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        spots = []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
                for i in range(node.body[0].lineno - 1, node.end_lineno):
                    if "tl.store" in lines[i] or "tl.load" in lines[i] or "=" in lines[i]:
                        for kind, new in _mutations(lines[i].rstrip("\n")):
                            spots.append((kind, i, new))
        rng = random.Random(f.stem)
        rng.shuffle(spots)
        chosen, kinds = [], set()
        for kind, i, new in spots:  # different kinds first
            if kind not in kinds:
                chosen.append((kind, i, new))
                kinds.add(kind)
            if len(chosen) == per_task:
                break
        for n, (kind, i, new) in enumerate(chosen):
            mut = list(lines)
            mut[i] = new + "\n"
            d = outdir / f.stem
            d.mkdir(exist_ok=True)
            (d / f"m{n}_{kind}.py").write_text("".join(mut))
            (d / f"m{n}_{kind}.json").write_text(json.dumps({"line": i + 1, "was": lines[i].rstrip(),
                                                             "now": new}))
            made += 1
    print(f"{made} mutants of {len(list(tasks.glob('*.py')))} task files in {outdir}")


# --------------------------------------------------------------------------- plain runs

def plain(tasks: Path, out: Path, mutants: Path | None, jobs: int, gold: Path | None = None,
          interpreter: bool = False, pattern: str | None = None, once: bool = False) -> None:
    import fnmatch
    out.mkdir(parents=True, exist_ok=True)
    gold = gold or out / "gold"
    gold.mkdir(parents=True, exist_ok=True)
    files = sorted(f for f in tasks.glob("*.py")
                   if not pattern or any(fnmatch.fnmatch(f.stem, p) for p in pattern.split(",")))
    t0 = time.time()

    def original(f: Path) -> dict:
        r = _sub(PLAIN.format(interpreter=interpreter, root=str(ROOT), path=str(f), twice=True, save=str(gold / f"{f.stem}.pt")), 120)
        r["task"] = f.stem
        if r.get("ran") and not once:  # and once more in a process of its own: repeat across processes?
            again = str(gold / f"{f.stem}.again.pt")
            x = _sub(PLAIN.format(interpreter=interpreter, root=str(ROOT), path=str(f), twice=False, save=again), 120)
            if x.get("ran"):
                c = _sub(COMPARE.format(root=str(ROOT), a=str(gold / f"{f.stem}.pt"), b=again), 120)
                r["repeat_process"] = bool(c.get("same"))
                r["repeat_process_detail"] = c.get("detail")
            else:
                r["repeat_process"] = False
                r["repeat_process_detail"] = x.get("error")
        return r

    originals: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:  # written as they finish: a run cut
        for fut in concurrent.futures.as_completed([ex.submit(original, f) for f in files]):  # short keeps
            originals.append(fut.result())                                                   # what it has
            (out / "plain.json").write_text(json.dumps(sorted(originals, key=lambda r: r["task"]), indent=1))
    originals.sort(key=lambda r: r["task"])
    print(f"originals: {sum(r['ran'] for r in originals)}/{len(files)} ran, "
          f"{sum(bool(r.get('repeat')) for r in originals)} repeat in one process, "
          f"{sum(bool(r.get('repeat_process')) for r in originals)} across processes, {time.time() - t0:.0f} s", flush=True)
    if mutants is None:
        return
    ok = {r["task"] for r in originals if r.get("ran") and r.get("repeat")}
    muts = [m for m in sorted(mutants.glob("*/*.py")) if m.parent.name in ok]

    def label(m: Path) -> dict:
        save = str(gold / f"{m.parent.name}__{m.stem}.pt")
        r = _sub(PLAIN.format(interpreter=interpreter, root=str(ROOT), path=str(m), twice=False, save=save), 120)
        r.update(task=m.parent.name, mutant=m.stem)
        if r.get("ran"):
            c = _sub(COMPARE.format(root=str(ROOT), a=str(gold / f"{m.parent.name}.pt"), b=save), 120)
            r["wrong"] = not c.get("same", True)
            r["detail"] = c.get("detail")
        else:
            r["wrong"] = True  # it fails where the original runs
        try:
            os.unlink(save)
        except OSError:
            pass
        return r

    labels: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        for fut in concurrent.futures.as_completed([ex.submit(label, m) for m in muts]):
            labels.append(fut.result())
            (out / "mutants.json").write_text(json.dumps(sorted(labels, key=lambda r: (r["task"], r["mutant"])),
                                                         indent=1))
    print(f"mutants: {len(labels)} run, {sum(r['wrong'] for r in labels)} wrong, {time.time() - t0:.0f} s")


# --------------------------------------------------------------------------- one process per task

SINGLE = r'''
import json, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from agent.bench.tasks import load_suite
from runner.serve.local import LocalRunner
from runner.schema import EvalOptions, to_dict
tasks, _ = load_suite(Path({tasks!r}), "tritonbench", pattern={name!r})
(t,) = tasks
r = LocalRunner(workers=1, device={device!r})
try:
    res = r.evaluate(t.request(EvalOptions(timing=False)))
finally:
    r.close()
print("@@" + json.dumps({{"task": t.name, "status": res.status, "correct": res.correct, "message": res.message,
                         "cases": [c.label for c in res.cases], "flags": [f.code for f in res.flags]}}))
'''


def single(tasks: Path, out: Path, jobs: int, device: str, pattern: str | None = None,
           order_from: Path | None = None) -> None:
    """Each task in a process of its own; written as they finish. ``order_from``: a bench JSON whose
    durations put the longest tasks first (a run cut short then misses the short ones, not a tail)."""
    import fnmatch
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    files = sorted(f for f in tasks.glob("*.py")
                   if not pattern or any(fnmatch.fnmatch(f.stem, p) for p in pattern.split(",")))
    if order_from is not None:
        took = {t["name"]: t.get("duration_s") or 0.0 for t in json.loads(order_from.read_text())["tasks"]}
        files.sort(key=lambda f: -took.get(f.stem, 1e9))

    def one(f: Path) -> dict:
        r = _sub(SINGLE.format(root=str(ROOT), tasks=str(tasks), name=f.stem, device=device), 600)
        r.setdefault("task", f.stem)
        return r

    rows: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        for fut in concurrent.futures.as_completed([ex.submit(one, f) for f in files]):
            rows.append(fut.result())
            (out / "single.json").write_text(json.dumps(sorted(rows, key=lambda r: r["task"]), indent=1))
    print(f"single: {sum(bool(r.get('correct')) for r in rows)}/{len(rows)} correct, {time.time() - t0:.0f} s")


# --------------------------------------------------------------------------- summary

def summary(out: Path, bench: Path | None, bench_mutants: Path | None) -> None:
    plain_rows = {r["task"]: r for r in json.loads((out / "plain.json").read_text())}
    det = {t for t, r in plain_rows.items() if r.get("ran") and r.get("repeat")}
    print(f"plain: {len(plain_rows)} files, {sum(r['ran'] for r in plain_rows.values())} run, {len(det)} deterministic")
    verdicts = {}
    if bench:
        doc = json.loads(bench.read_text())
        for t in doc["tasks"]:
            s = t["samples"][0] if t.get("samples") else {}
            verdicts[t["name"]] = (s.get("status") or t.get("error") or "harness_error", s.get("message", ""))
        passed = [t for t in det if verdicts.get(t, ("",))[0] == "ok"]
        print(f"bench self-check: {sum(v[0] == 'ok' for v in verdicts.values())}/{len(verdicts)} ok; "
              f"of the {len(det)} deterministic: {len(passed)} ok ({100 * len(passed) / max(len(det), 1):.1f}%)")
        for t in sorted(det - set(passed)):
            print(f"  not ok: {t}: {verdicts.get(t, ('missing', ''))[0]}: {verdicts.get(t, ('', ''))[1][:200]}")
    single_file = out / "single.json"
    if single_file.exists() and verdicts:
        rows = {r["task"]: r for r in json.loads(single_file.read_text())}
        diff = [t for t in rows if rows[t].get("status") != verdicts.get(t, ("",))[0]]
        print(f"one process per task vs one bench run: {len(rows) - len(diff)}/{len(rows)} same verdict")
        for t in diff:
            print(f"  differs: {t}: single {rows[t].get('status')} ({rows[t].get('message', rows[t].get('error', ''))[:150]}), "
                  f"bench {verdicts.get(t, ('missing',))[0]}")
    muts_file = out / "mutants.json"
    if muts_file.exists() and bench_mutants:
        labels = [m for m in json.loads(muts_file.read_text()) if m.get("wrong")]
        doc = json.loads(bench_mutants.read_text())
        got = {}
        for t in doc["tasks"]:
            for s in t.get("samples", []):
                got[(t["name"], Path(s.get("source") or s.get("candidate") or "").stem)] = (s.get("status"), s.get("correct"),
                                                                          s.get("message", ""))
        # "no input case can run here" (too large for the CPU interpreter) is no verdict on the kernel
        got = {k: v for k, v in got.items() if not (v[2] or "").startswith("no input case can run here")}
        caught = [m for m in labels if got.get((m["task"], m["mutant"]), (None, False))[1] is False
                  and (m["task"], m["mutant"]) in got]
        missing = [m for m in labels if (m["task"], m["mutant"]) not in got]
        print(f"labelled wrong mutants: {len(labels)}; evaluated {len(labels) - len(missing)}; caught {len(caught)} "
              f"({100 * len(caught) / max(len(labels) - len(missing), 1):.1f}%)")
        for m in labels:
            v = got.get((m["task"], m["mutant"]))
            if v and v[1]:
                print(f"  MISSED: {m['task']}/{m['mutant']}: {v[0]} ({(m.get('detail') or m.get('error') or '')[:150]})")


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("mutate")
    a.add_argument("tasks", type=Path)
    a.add_argument("mutants", type=Path)
    a.add_argument("--per-task", type=int, default=2)
    a = sub.add_parser("plain")
    a.add_argument("tasks", type=Path)
    a.add_argument("out", type=Path)
    a.add_argument("--mutants", type=Path)
    a.add_argument("--jobs", type=int, default=12)
    a.add_argument("--gold", type=Path, help="where the plain runs' results go (default OUT/gold)")
    a.add_argument("--device", choices=["auto", "interpreter"], default="auto",
                   help="interpreter: run on the CPU under the Triton interpreter")
    a.add_argument("--tasks", dest="tasks_", help="only these tasks (glob, comma-separated)")
    a.add_argument("--once", action="store_true",
                   help="originals: only the two runs in one process (no run in a process of its own)")
    a = sub.add_parser("single")
    a.add_argument("tasks", type=Path)
    a.add_argument("out", type=Path)
    a.add_argument("--jobs", type=int, default=8)
    a.add_argument("--device", default="auto")
    a.add_argument("--tasks", dest="tasks_", help="only these tasks (glob, comma-separated)")
    a.add_argument("--order-from", type=Path, help="a bench JSON: run the longest tasks first")
    a = sub.add_parser("summary")
    a.add_argument("out", type=Path)
    a.add_argument("--bench", type=Path)
    a.add_argument("--bench-mutants", type=Path)
    args = ap.parse_args()
    for k in ("tasks", "mutants", "out", "gold", "order_from", "bench", "bench_mutants"):  # the runs' cwd differs
        if isinstance(getattr(args, k, None), Path):
            setattr(args, k, getattr(args, k).resolve())
    if args.cmd == "mutate":
        mutate(args.tasks, args.mutants, args.per_task)
    elif args.cmd == "plain":
        plain(args.tasks, args.out, args.mutants, args.jobs, args.gold, args.device == "interpreter", args.tasks_,
              args.once)
    elif args.cmd == "single":
        single(args.tasks, args.out, args.jobs, args.device, args.tasks_, args.order_from)
    else:
        summary(args.out, args.bench, args.bench_mutants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
