"""``geak-runner``: the runner on its own.

  geak-runner info [--device auto|cuda|interpreter] [--json]   what a worker sees on this host
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .schema import to_json


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="geak-runner", description="The GEAK evaluation runner.")
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("info", help="start a worker and report the device it finds")
    i.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto")
    i.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.command == "info":
        from .pool import PoolError, WorkerPool
        pool = WorkerPool(size=1, device=args.device)
        try:
            d = pool.device_info()
        except PoolError as e:
            print(f"geak-runner: {e}", file=sys.stderr)
            return 2
        finally:
            pool.close()
        if args.json:
            print(to_json(d, indent=2))
        else:
            peak = f", peak {d.peak_bandwidth_gbs:g} GB/s" if d.peak_bandwidth_gbs else ""
            print(f"{d.name} ({d.backend}{', ' + d.arch if d.arch else ''}{peak}); torch {d.torch}, "
                  f"triton {d.triton}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
