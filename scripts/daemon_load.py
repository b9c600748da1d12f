"""Load test of the runner daemon on loopback: N concurrent clients x M evaluations each.

Runs the same work twice — on a LocalRunner in this process, then through `geak-runner serve`
(started here as a subprocess, with a token) by N RemoteRunner clients — and writes a JSON
summary: evaluations per minute both ways, completed, lost (must be 0), latency p50/p95, and the
daemon's overhead per evaluation. With --kill-restart the daemon is killed with SIGKILL halfway
through and restarted on the same state directory; the clients must still get every result.

  PYTHONPATH=$PWD python3 scripts/daemon_load.py --out OUT [--clients 4] [--evals 6]
      [--device interpreter|auto] [--workers 2] [--kill-restart]
      [--target examples/softmax.py::softmax] [--candidate examples/softmax_fast.py::softmax]

Needs: torch, triton, numpy (the workers), aiohttp (the daemon), httpx (the clients).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.serve.local import LocalRunner  # noqa: E402
from runner.serve.remote import RemoteRunner  # noqa: E402
from runner.schema import EvalOptions  # noqa: E402
from runner.source import build_request  # noqa: E402


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (k - lo), 3)


def make_request(args):
    opts = EvalOptions(device=args.device, trials=args.trials)
    if args.cases:
        opts.cases = [int(c) for c in args.cases.split(",")]
    req, _, _ = build_request(args.target, args.candidate, opts, root=ROOT, cwd=ROOT)
    return req


def run_load(make_runner, n_clients, m_evals, args, on_half=None):
    """N threads, each with its own runner (or a shared one), M evaluations in sequence."""
    lat, statuses, lost = [], [], []
    lock = threading.Lock()
    done = [0]
    half = (n_clients * m_evals) // 2
    fired = threading.Event()

    def client(k):
        runner = make_runner(k)
        try:
            for i in range(m_evals):
                req = make_request(args)
                t0 = time.monotonic()
                res = runner.evaluate(req)
                dt = time.monotonic() - t0
                with lock:
                    lat.append(dt)
                    statuses.append(res.status)
                    if res.error is not None and res.error.kind == "runner_unavailable":
                        lost.append(f"client {k} eval {i}: {res.message}")
                    done[0] += 1
                    if on_half and done[0] >= half and not fired.is_set():
                        fired.set()
                        threading.Thread(target=on_half, daemon=True).start()
        finally:
            if make_runner.__name__ != "shared":
                runner.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    n = len(statuses)
    return {"evaluations": n_clients * m_evals, "completed": n - len(lost), "lost": len(lost),
            "lost_detail": lost[:10], "statuses": {s: statuses.count(s) for s in sorted(set(statuses))},
            "wall_s": round(wall, 2), "evals_per_min": round(60 * (n - len(lost)) / wall, 1) if wall else None,
            "latency_p50_s": pct(lat, 0.5), "latency_p95_s": pct(lat, 0.95),
            "latency_mean_s": round(statistics.mean(lat), 3) if lat else None, "_lat": lat}


def merge(runs):
    """Several rounds of one phase as one: counts and wall times add, latencies pool."""
    lat = [x for r in runs for x in r["_lat"]]
    n = sum(r["completed"] for r in runs)
    wall = sum(r["wall_s"] for r in runs)
    statuses: dict = {}
    for r in runs:
        for k, v in r["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
    return {"rounds": len(runs), "evaluations": sum(r["evaluations"] for r in runs), "completed": n,
            "lost": sum(r["lost"] for r in runs), "lost_detail": [x for r in runs for x in r["lost_detail"]][:10],
            "statuses": statuses, "wall_s": round(wall, 2),
            "evals_per_min": round(60 * n / wall, 1) if wall else None,
            "evals_per_min_by_round": [r["evals_per_min"] for r in runs],
            "latency_p50_s": pct(lat, 0.5), "latency_p95_s": pct(lat, 0.95),
            "latency_mean_s": round(statistics.mean(lat), 3) if lat else None}


class Daemon:
    def __init__(self, args, state: Path, token_file: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.cmd = [sys.executable, "-m", "runner.serve.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                    "--state", str(state), "--token-file", str(token_file), "--device", args.device,
                    "--workers", str(args.workers), "--max-queue", "1024"]
        self.log_path = Path(args.out) / "daemon.log"
        self.proc = None

    def start(self):
        log = open(self.log_path, "a")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log, env=env, cwd=str(ROOT))
        t0 = time.monotonic()
        while "listening on" not in self.log_path.read_text().split("geak-runner: stopped")[-1] \
                or self.log_path.read_text().count("listening on") < self.starts + 1:
            if self.proc.poll() is not None:
                raise SystemExit("the daemon exited:\n" + self.log_path.read_text()[-3000:])
            if time.monotonic() - t0 > 300:
                raise SystemExit("the daemon did not start")
            time.sleep(0.1)
        self.starts += 1

    starts = 0

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def kill9_restart(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.killed_at = time.time()
        time.sleep(0.5)
        self.start()

    def cpu_s(self):
        """CPU seconds the daemon process itself has used (its workers not included)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.returncode if self.proc else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--evals", type=int, default=6, help="evaluations per client")
    p.add_argument("--device", default="interpreter", choices=["auto", "cuda", "interpreter"])
    p.add_argument("--workers", type=int, default=2, help="worker processes (per GPU on the daemon)")
    p.add_argument("--target", default="examples/softmax.py::softmax")
    p.add_argument("--candidate", default="examples/softmax_fast.py::softmax")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--cases", default=None, help="case indices, e.g. 0,1 (default: all)")
    p.add_argument("--rounds", type=int, default=2, help="alternating local/daemon rounds (default 2)")
    p.add_argument("--kill-restart", action="store_true",
                   help="also: SIGKILL the daemon halfway through a second load and restart it")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    N, M = args.clients, args.evals
    summary = {"what": f"{N} concurrent clients x {M} evaluations of {args.target} vs {args.candidate}, "
                       f"{args.rounds} alternating rounds of local and daemon",
               "device": args.device, "workers": args.workers, "trials": args.trials, "cases": args.cases,
               "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.node()}}

    # Both runners are up at once and the phases alternate (local, daemon, local, daemon, ...), so
    # that whatever else the machine does hits both alike. Same pool size on both sides; the
    # local runner is shared by the N client threads, as one editor process would share it.
    local = LocalRunner(workers=args.workers, device=args.device)
    tmp = Path(tempfile.mkdtemp(prefix="geak-load-"))
    tf = tmp / "token"
    tf.write_text(secrets.token_urlsafe(32))
    tf.chmod(0o600)
    token = tf.read_text()
    d = Daemon(args, tmp / "state", tf)
    t0 = time.monotonic()
    d.start()
    summary["daemon_start_s"] = round(time.monotonic() - t0, 2)

    def shared(k):
        return local

    def remote(k):
        return RemoteRunner(d.url, token, reconnect_s=300)

    try:
        first = local.evaluate(make_request(args))  # start the workers, compile once
        summary["device_info"] = {"name": first.device.name if first.device else None,
                                  "backend": first.device.backend if first.device else None}
        summary["single_result"] = {"status": first.status, "message": first.message,
                                    "speedup": first.timing.speedup if first.timing else None}
        warm = RemoteRunner(d.url, token)
        for _ in range(2):  # every worker on both sides started and warm (concurrent: one each)
            local.evaluate_many([make_request(args) for _ in range(args.workers)])
            warm.evaluate_many([make_request(args) for _ in range(args.workers)])
        warm.close()
        rounds: dict[str, list] = {k: [] for k in ("local_sequential", "daemon_sequential", "local", "daemon")}
        cpu = []
        for r in range(args.rounds):
            rounds["local_sequential"].append(run_load(shared, 1, M, args))
            rounds["daemon_sequential"].append(run_load(remote, 1, M, args))
            rounds["local"].append(run_load(shared, N, M, args))
            cpu0 = d.cpu_s()
            rounds["daemon"].append(run_load(remote, N, M, args))
            cpu1 = d.cpu_s()
            if cpu0 is not None and cpu1 is not None:
                cpu.append((cpu1 - cpu0) / (N * M))
            print(f"round {r + 1}: local {rounds['local'][-1]['evals_per_min']}/min, daemon "
                  f"{rounds['daemon'][-1]['evals_per_min']}/min", flush=True)
        for k, runs in rounds.items():
            summary[k] = merge(runs)
        summary["daemon"]["daemon_cpu_s_per_eval"] = round(statistics.mean(cpu), 4) if cpu else None
        print("local :", json.dumps(summary["local"]), flush=True)
        print("daemon:", json.dumps(summary["daemon"]), flush=True)
        if args.kill_restart:
            summary["daemon_kill9_restart"] = run_load(remote, N, M, args, on_half=d.kill9_restart)
            summary["daemon_kill9_restart"].pop("_lat")
            print("kill-9:", json.dumps(summary["daemon_kill9_restart"]), flush=True)
    finally:
        local.close()
        summary["daemon_exit_code_on_sigterm"] = d.stop()
    lo, dm = summary["local"], summary["daemon"]
    n = lo["evaluations"]
    # Latency added to one evaluation with nothing else queued (1 client, M in sequence), and
    # wall time added per evaluation under the concurrent load.
    summary["latency_overhead_p50_s"] = round(summary["daemon_sequential"]["latency_p50_s"]
                                              - summary["local_sequential"]["latency_p50_s"], 3)
    summary["wall_overhead_per_eval_s"] = round((dm["wall_s"] - lo["wall_s"]) / n, 3)
    summary["throughput_ratio_daemon_over_local"] = round(dm["evals_per_min"] / lo["evals_per_min"], 3) \
        if lo["evals_per_min"] else None
    summary["lost_total"] = dm["lost"] + summary.get("daemon_kill9_restart", {}).get("lost", 0)
    (out / "daemon_load.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("latency_overhead_p50_s", "wall_overhead_per_eval_s",
                                               "throughput_ratio_daemon_over_local", "lost_total")}))
    return 0 if summary["lost_total"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
