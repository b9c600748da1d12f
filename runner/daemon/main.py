"""``geak-runner serve``: start the daemon, serve until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import ssl
import stat
import sys
from pathlib import Path
from typing import Optional

log = logging.getLogger("geak-runner")


class UsageError(Exception):
    pass


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "geak-runner"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(token_file: Optional[str]) -> Optional[str]:
    if token_file:
        p = Path(token_file)
        try:
            text = p.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise UsageError(f"cannot read the token file {token_file}: {e.strerror}") from None
        if not text:
            raise UsageError(f"the token file {token_file} is empty")
        if len(text) < 16:
            raise UsageError(f"the token in {token_file} is too short (use 16 characters or more, e.g. "
                             "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
        mode = p.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("the token file %s is readable by other users (chmod 600 it)", token_file)
        return text
    env = os.environ.get("GEAK_RUNNER_TOKEN", "").strip()
    if env and len(env) < 16:
        raise UsageError("GEAK_RUNNER_TOKEN is too short (use 16 characters or more)")
    return env or None


def check_args(args) -> tuple[Optional[str], Optional[ssl.SSLContext]]:
    token = read_token(args.token_file)
    if token is None and not is_loopback(args.host):
        raise UsageError(f"refusing to listen on {args.host} without a token: anyone who can reach it could "
                         "run code on this host. Give --token-file FILE or GEAK_RUNNER_TOKEN, or listen on "
                         "127.0.0.1")
    if not (0 <= args.port <= 65535):
        raise UsageError(f"--port {args.port} is not a TCP port")
    for name in ("workers", "max_queue", "max_body_mb"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not args.keep_hours > 0:
        raise UsageError("--keep-hours must be more than 0")
    ctx = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise UsageError("--tls-cert and --tls-key go together")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"cannot load the TLS certificate/key: {e}") from None
    return token, ctx


def _lock_state(state: Path):
    """One daemon per state directory: a second one would re-run the first one's running jobs."""
    try:
        state.mkdir(parents=True, exist_ok=True)
        f = open(state / "daemon.lock", "a+")
    except OSError as e:
        raise UsageError(f"cannot open the state directory {state}: {e.strerror or e}") from None
    try:
        import fcntl
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:
        return f
    except OSError:
        f.seek(0)
        other = f.read().strip() or "?"
        f.close()
        raise UsageError(f"another geak-runner serve (pid {other}) is using the state directory {state}; "
                         "give each daemon its own --state") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


async def _serve(args, token: Optional[str], ctx: Optional[ssl.SSLContext]) -> int:
    from aiohttp import web

    from .scheduler import Scheduler, detect_gpus
    from .server import make_app
    from .store import Store

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before anything starts: a stop is never lost
        loop.add_signal_handler(sig, stop.set)
    state = Path(args.state) if args.state else default_state_dir()
    lock = _lock_state(state)  # noqa: F841 (held open for the daemon's lifetime)
    try:
        store = Store(state)
    except Exception as e:
        raise UsageError(f"cannot open the state directory {state}: {e}") from None
    try:
        gpus = detect_gpus(args.device, args.gpus)
    except ValueError as e:
        raise UsageError(str(e)) from None
    scheduler = Scheduler(store, gpus, args.workers, args.device, max_queue=args.max_queue)
    max_body = args.max_body_mb << 20
    app = make_app(store, scheduler, token, max_body, loop)
    spool = None
    if args.spool:
        try:
            import watchdog  # noqa: F401
        except ImportError:
            raise UsageError("--spool needs the watchdog package (pip install watchdog)") from None
        from .spool import Spool
        spool = Spool(Path(args.spool), store, scheduler, max_body, poll_s=args.spool_poll)
    try:
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    except TypeError:  # aiohttp before 3.9 takes the shutdown timeout elsewhere
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, ssl_context=ctx)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    keep_s = args.keep_hours * 3600

    async def purge_forever():
        while True:
            n = await asyncio.to_thread(store.purge, keep_s)
            if n:
                log.info("forgot %d finished job(s) older than %g hours", n, args.keep_hours)
            await asyncio.sleep(min(3600.0, max(60.0, keep_s / 10)))

    interrupted = scheduler.recover()
    purger = asyncio.ensure_future(purge_forever())
    counts = store.counts()
    scheduler.start()
    if spool is not None:
        spool.start()
    scheme = "https" if ctx else "http"
    addrs = ", ".join(f"{scheme}://{a[0] if ':' not in a[0] else '[' + a[0] + ']'}:{a[1]}"
                      for a in runner.addresses)
    lanes = ", ".join(f"GPU {g}" if g is not None else "default device" for g in gpus)
    print(f"geak-runner: listening on {addrs}; {len(gpus)} lane(s) ({lanes}) x {args.workers} workers; "
          f"state {state}; {counts['queued']} queued"
          + (f" ({interrupted} interrupted by a stop, run again)" if interrupted else "")
          + f", {counts['done']} results stored"
          + (f"; spool {args.spool}" if spool else "") + ("" if token else "; NO TOKEN (loopback only)"),
          file=sys.stderr, flush=True)

    await stop.wait()
    print(f"geak-runner: stopping; draining {scheduler.running} running job(s) (queued jobs stay queued "
          "for the next start; signal again to stop now)", file=sys.stderr, flush=True)
    force = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, force.set)
    drain = asyncio.ensure_future(asyncio.to_thread(scheduler.drain, args.drain_timeout))
    forced = asyncio.ensure_future(force.wait())
    await asyncio.wait([drain, forced], return_when=asyncio.FIRST_COMPLETED)
    if not drain.done():
        # Running jobs stay "running" in the store and run again at the next start; the workers
        # die with this process.
        print(f"geak-runner: stopped without waiting for {scheduler.running} running job(s); they run "
              "again at the next start", file=sys.stderr, flush=True)
        store.close()
        os._exit(1)
    forced.cancel()
    drained = drain.result()
    if not drained:
        print(f"geak-runner: jobs still running after {args.drain_timeout:g} s; they will run again at the "
              "next start", file=sys.stderr, flush=True)
    purger.cancel()
    if spool is not None:
        spool.stop()
    await runner.cleanup()
    scheduler.close()
    store.close()
    print("geak-runner: stopped", file=sys.stderr, flush=True)
    return 0


def serve(args) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="geak-runner: %(message)s", stream=sys.stderr)
    try:
        token, ctx = check_args(args)
        return asyncio.run(_serve(args, token, ctx))
    except UsageError as e:
        print(f"geak-runner: {e}", file=sys.stderr)
        return 2
