"""``geak-runner``: the runner on its own.

  geak-runner info [--device auto|cuda|interpreter] [--runner URL] [--json]
                                                               what a worker sees (here or on a daemon)
  geak-runner serve [--host 127.0.0.1] [--port 8765] [--token-file F] [--state DIR] [--spool DIR] ...
                                                               the runner daemon (docs/runner-daemon.md)
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Optional, Sequence

from ..schema import LIMIT_UNITS, Limits, to_json


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="geak-runner", description="The GEAK evaluation runner.")
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("info", help="start a worker and report the device it finds")
    i.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto")
    i.add_argument("--json", action="store_true")
    i.add_argument("--runner", metavar="URL", help="ask a geak-runner serve daemon (http[s]://HOST:PORT, "
                   "token from GEAK_RUNNER_TOKEN), spool (file:///DIR) or Ray cluster (ray://HOST:PORT, "
                   "ray:auto) instead of this host")
    s = sub.add_parser("serve", help="run the runner daemon: evaluations over HTTP (and a spool directory)",
                       description="Serve evaluations to editors and `geak --runner URL`. Whoever holds "
                                   "the token can run code on this host with this process's rights.")
    add_serve_arguments(s)
    return p


def add_serve_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0 picks a free one)")
    s.add_argument("--token-file", metavar="F", help="file holding the bearer token (default: "
                   "$GEAK_RUNNER_TOKEN, else STATE/token, made on first start)")
    s.add_argument("--allow-host", action="append", metavar="NAME",
                   help="also answer to this Host name (a loopback daemon answers only to localhost, "
                        "127.0.0.1 and ::1); repeatable")
    s.add_argument("--state", metavar="DIR", help="where the job queue and results persist (SQLite; "
                   "default $XDG_STATE_HOME/geak-runner)")
    s.add_argument("--spool", metavar="DIR", help="also take request files from DIR and write result "
                   "files beside them (shared file systems)")
    s.add_argument("--spool-poll", type=float, default=1.0, metavar="S",
                   help="poll the spool every S seconds (default 1; 0 = native file events, one host only)")
    s.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto")
    s.add_argument("--gpus", metavar="LIST", help="GPU indices to serve, one worker pool each (default: all)")
    s.add_argument("--workers", type=int, default=2, help="worker processes per GPU (default 2)")
    s.add_argument("--max-queue", type=int, default=256, help="queued jobs before submissions get "
                   "429 busy (default 256)")
    s.add_argument("--max-body-mb", type=int, default=32, help="largest request body in MiB (default 32)")
    s.add_argument("--max-file-kb", type=int, default=512,
                   help="largest source file in a request, in KiB (default 512)")
    s.add_argument("--max-request-mb", type=int, default=8,
                   help="all source files of one request together, in MiB (default 8)")
    for f in fields(Limits):  # ceilings: a request may ask for less, never more; null = this value
        default = getattr(Limits(), f.name)
        unit = LIMIT_UNITS.get(f.name, "s")
        s.add_argument(f"--{f.name.replace('_', '-')}", dest=f"ceiling_{f.name}", type=type(default),
                       default=default, metavar="MB" if unit == "MB" else "S",
                       help=f"most a request's limits.{f.name} may be (default {default:g} {unit}); "
                            "a request that asks for more gets this")
    s.add_argument("--keep-hours", type=float, default=168.0, metavar="H",
                   help="forget finished jobs and their results after H hours (default 168, a week)")
    s.add_argument("--drain-timeout", type=float, default=900.0, metavar="S",
                   help="on SIGTERM, wait this long for running jobs (default 900)")
    s.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain")
    s.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    s.add_argument("-v", "--verbose", action="store_true", help="log each job")
    s.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="serve even where the sandbox's self-test fails (no user or mount namespaces): "
                        "every token holder's code can then change this host's files; only on a machine "
                        "you can throw away")


def cmd_serve(args) -> int:
    try:
        from runner.serve.daemon.main import serve
    except ImportError as e:
        print(f"geak-runner: serve needs aiohttp ({e}); pip install aiohttp", file=sys.stderr)
        return 2
    return serve(args)


def cmd_info(args) -> int:
    """One worker here (or the daemon at ``--runner``): is it reachable, does it take the token,
    which device does it evaluate on."""
    from ..config import ConfigError
    from runner.judge.process import PoolError
    from .runners import open_runner
    try:
        runner = open_runner(args.runner or "local", args.device, 1)
    except ConfigError as e:
        print(f"geak-runner: {e}", file=sys.stderr)
        return 2
    try:
        d = runner.device_info()
        actors = []
        if hasattr(runner, "actors"):  # a Ray cluster: every actor's device, once they are up
            runner.settle(60.0)
            actors = runner.actors()
    except PoolError as e:
        print(f"geak-runner: {e}", file=sys.stderr)
        if getattr(e, "hint", None):
            print(f"  what to do: {e.hint}", file=sys.stderr)
        return 2
    finally:
        runner.close()
    if args.json:
        print(to_json(d, indent=2))
    else:
        peak = f", peak {d.peak_bandwidth_gbs:g} GB/s" if d.peak_bandwidth_gbs else ""
        print(f"{d}{peak}; torch {d.torch}, triton {d.triton}")
        for key in ("filesystem", "runner_state", "devices", "user_namespaces"):
            if d.sandbox.get(key):
                print(f"  sandbox {key.replace('_', ' ')}: {d.sandbox[key]}")
        if not d.sandbox:
            print("  sandbox: not reported (a runner older than its self-test)")
        for a in actors:  # a Ray cluster: one line per actor
            print(f"  actor {a['index']}: {a['state']}" + (f", {a['device'] or a['error']}"
                                                             if a['device'] or a['error'] else "")
                  + (f" on {a['host']} (pid {a['pid']}" + (f", GPU {a['gpus']})" if a['gpus'] else ")")
                     if a.get("host") else ""))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return {"serve": cmd_serve, "info": cmd_info}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
