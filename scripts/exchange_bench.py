"""What moving a call's tensors between the reference's and the candidate's processes costs.

    PYTHONPATH=<checkout> python scripts/exchange_bench.py [--mb 100] [--n 5] [--device cuda] [--mechanism]

Evaluates a PyTorch target that only copies its input (``x.clone()``), the target against
itself, once with an input of ``--mb`` MB and once with 4 KB, on the local runner (CPU; one
trial, no timing). Per trial the input crosses from the reference to the candidate, and the
candidate's output and its input after the call (2 x ``--mb`` MB) cross back to be judged. The
difference between the two sizes' ``run`` phase (median of ``--n``) is what that costs, the
comparison of the data included. Runs against any checkout of the project (``PYTHONPATH``), so
that two revisions can be compared on one machine.

``--mechanism``: the hand-over alone, with the project's own functions: ``--mb`` MB of inputs
written (``runner.worker.exchange.save``: a sealed memfd), checked as the pool checks it
(``runner.judge.process.sealed``), loaded by the reader (``runner.worker.exchange.load``: mapped) and every
byte read, then the same size of outputs back the same way. Passing a descriptor between
processes costs the same whatever its size, so one process shows the cost per byte.

``--device cuda``: the tensors live on the GPU. Storages of at least
``exchange.DEVICE_PART_MIN_BYTES`` then cross as GPU memory (``runner.worker.devmem``) with
``GEAK_DEVICE_HANDOVER=1``, and through the host with ``GEAK_DEVICE_HANDOVER=0``: run it both
ways to compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET = '''
import torch

N = {n}


def same(x):
    return x.clone()


def get_inputs():
    return [torch.randn(N, device={device!r})]
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--mechanism", action="store_true")
    ap.add_argument("--device", default="interpreter", help="interpreter (CPU) or cuda")
    args = ap.parse_args()
    if args.mechanism:
        return mechanism(args.mb, args.n, "cuda" if args.device == "cuda" else "cpu")
    from runner.serve.local import LocalRunner
    from runner.schema import EvalOptions
    from runner.source import build_request
    runner = LocalRunner(workers=1, device=args.device)
    out = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            for label, n in (("small", 1024), ("large", int(args.mb * 2 ** 20 / 4))):
                path = Path(d) / f"{label}.py"
                path.write_text(TARGET.format(n=n, device="cuda" if args.device == "cuda" else "cpu"))
                opts = EvalOptions(trials=1, timing=False, device=args.device,
                                   interpreter_max_elements=1 << 30)
                req, _, _ = build_request(f"{path}::same", None, opts, root=Path(d))
                runs = []
                for _ in range(args.n + 1):
                    t0 = time.monotonic()
                    r = runner.evaluate(req)
                    if not r.correct:
                        print(f"{label}: {r.status}: {r.message}", file=sys.stderr)
                        return 1
                    runs.append((r.phases.get("run", 0.0), time.monotonic() - t0))
                runs = runs[1:]  # the first loads the reference
                out[label] = (statistics.median(x for x, _ in runs), statistics.median(y for _, y in runs))
    finally:
        runner.close()
    (rs, ws), (rl, wl) = out["small"], out["large"]
    print(f"{args.mb:g} MB in, {2 * args.mb:g} MB back: run phase {rl:.3f} s against {rs:.3f} s for 4 KB "
          f"(+{rl - rs:.3f} s); whole evaluation {wl:.3f} s against {ws:.3f} s (+{wl - ws:.3f} s)")
    return 0


def mechanism(mb: float, n: int, device: str = "cpu") -> int:
    import torch

    from runner.worker import channel
    from runner.worker.exchange import load, save
    from runner.judge.process import sealed as _sealed
    half = int(mb * 2 ** 20 / 4 / 2)
    inputs = {"args": [torch.randn(half, device=device), torch.randn(half, device=device)], "kwargs": {}}
    times = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        save("in-0-0.pt", inputs)
        channel.loop_back()  # the pool's relay passes the descriptor on
        assert _sealed(channel.received("in-0-0.pt"))
        got = load("in-0-0.pt")
        parts = sum(1 for k in channel._inbox if ".dev" in k)
        outputs = {"output": [t.sum() + t for t in got["args"]]}  # reads every byte
        t1 = time.perf_counter()
        save("out-0-0.pt", outputs)
        channel.loop_back()
        assert _sealed(channel.received("out-0-0.pt"))
        back = load("out-0-0.pt")
        float(sum(t.sum() for t in back["output"]))
        if device != "cpu":
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        channel.forget_received()
        times.append((t1 - t0, t2 - t1))
    times = times[1:]
    there = statistics.median(a for a, _ in times)
    back = statistics.median(b for _, b in times)
    print(f"{mb:g} MB of inputs there and {mb:g} MB of outputs back ({device}; {parts} storages as device "
          f"memory): {there + back:.3f} s (median of {n}; "
          f"there {there:.3f} s, back {back:.3f} s, each with a pass over every byte that reads it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
