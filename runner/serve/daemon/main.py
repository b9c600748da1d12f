"""``geak-runner serve``: start the daemon, serve until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import asyncio
import errno
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


TOKEN_NAME = "token"
SCRATCH_NAME = "scratch"


def load_or_create_token(state: Path) -> tuple[str, bool]:
    """The daemon's own token, ``STATE/token``: read, or made on first start (0600) as Jupyter
    does. Returns ``(token, created)``."""
    path = state / TOKEN_NAME
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            os.chmod(path, 0o600)
        return read_token(str(path)), False
    except OSError as e:
        raise UsageError(f"cannot write the token file {path}: {e.strerror or e}") from None
    import secrets
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token, True


def prepare_state_dir(state: Path) -> None:
    """The state directory holds every request's source and the token: private to this user
    (0700). A new one is made so; an existing one of this user's is made so; another user's,
    or a shared one such as /tmp (sticky bit), is refused."""
    try:
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = state.stat()
    except OSError as e:
        raise UsageError(f"cannot make the state directory {state}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"the state directory {state} is not a directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UsageError(f"the state directory {state} belongs to another user (uid {st.st_uid}); give "
                         "--state a directory of your own")
    if st.st_mode & stat.S_ISVTX:
        raise UsageError(f"{state} is a shared directory (sticky bit, like /tmp); give --state a directory "
                         "of its own, e.g. ~/.local/state/geak-runner")
    if st.st_mode & 0o077:
        try:
            os.chmod(state, 0o700)
        except OSError as e:
            raise UsageError(f"cannot make the state directory {state} private: {e.strerror or e}") from None
        print(f"geak-runner: made the state directory {state} private (0700)", file=sys.stderr, flush=True)


def sweep_scratch(state: Path) -> tuple[Path, int]:
    """``STATE/scratch``: the workers' scratch directories (with each job's sources) live here,
    so that a daemon killed with ``kill -9`` leaves them where its next start finds them. Empties
    it (this daemon holds the state lock: nothing else uses it) and returns ``(path, how many
    leftovers were removed)``."""
    import shutil
    scratch = state / SCRATCH_NAME
    n = 0
    if scratch.is_dir() and not scratch.is_symlink():
        for p in scratch.iterdir():
            n += 1
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    elif scratch.exists() or scratch.is_symlink():
        scratch.unlink()
    scratch.mkdir(mode=0o700, exist_ok=True)
    return scratch, n


def limit_ceilings(args):
    """``Limits`` from the serve flags (``--import-s``, ``--run-s``, ...): the most any request
    may have."""
    import math
    from dataclasses import fields

    from runner.schema import Limits
    values = {f.name: getattr(args, f"ceiling_{f.name}") for f in fields(Limits)}
    for name, v in values.items():
        if not (math.isfinite(v) and v > 0):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number")
    return Limits(**values)


def check_args(args) -> tuple[Optional[str], Optional[ssl.SSLContext]]:
    token = read_token(args.token_file)
    if not (0 <= args.port <= 65535):
        raise UsageError(f"--port {args.port} is not a TCP port")
    for name in ("workers", "max_queue", "max_body_mb", "max_file_kb", "max_request_mb"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not args.keep_hours > 0:
        raise UsageError("--keep-hours must be more than 0")
    limit_ceilings(args)
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
    try:  # never through a link: the daemon would write its pid into the file it points to
        f = os.fdopen(os.open(state / "daemon.lock", os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600),
                      "a+")
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"refusing to start: {state / 'daemon.lock'} is a symbolic link; remove it") from None
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


class _Daemon:
    """What one ``serve`` holds: the state directory and its lock, the store, the scheduler, the
    HTTP site and the spool, from start to stop."""

    def __init__(self, args, token: Optional[str], ctx: Optional[ssl.SSLContext]):
        self.args, self.token, self.ctx = args, token, ctx
        self.spool = None
        self.purger: Optional[asyncio.Future] = None

    def open_state(self) -> None:
        """The private state directory, held by this daemon alone: the store, the token, an
        empty scratch directory for the workers."""
        import tempfile

        from .store import StateError, Store
        args = self.args
        state = self.state = (Path(args.state) if args.state else default_state_dir()).absolute()
        prepare_state_dir(state)
        self.lock = _lock_state(state)  # held open for the daemon's lifetime
        try:
            self.store = Store(state)
        except StateError as e:
            raise UsageError(f"refusing to start: {e}") from None
        except Exception as e:
            raise UsageError(f"cannot open the state directory {state}: {e}") from None
        if self.token is None:
            self.token, created = load_or_create_token(state)
            self.token_note = f"token {'made' if created else 'read'} in {state / TOKEN_NAME}"
        else:
            self.token_note = "token from " + (f"{args.token_file}" if args.token_file else "GEAK_RUNNER_TOKEN")
        scratch, self.swept = sweep_scratch(state)
        # The workers' scratch directories (made by this process, with each job's sources) go here.
        tempfile.tempdir = str(scratch)
        # What no job may see: this state directory (token, queue, every job's sources and
        # scratch, the workers' launcher), the token file and the spool.
        self.hide = tuple(str(Path(p).absolute()) for p in (state, args.token_file, args.spool) if p)
        self.check_sandbox(scratch)

    def check_sandbox(self, scratch: Path) -> None:
        """The sandbox's self-test, before anything listens: a token holder's code runs here,
        so a host that cannot confine it is refused unless ``--unsafe-no-sandbox`` says
        otherwise."""
        import shutil
        import tempfile

        from runner import sandbox
        root = tempfile.mkdtemp(prefix="probe-", dir=str(scratch))
        try:
            confined, facts = sandbox.self_test(root, hide=self.hide)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        self.sandbox_note = "sandbox: " + facts.get("filesystem", "?")
        if confined:
            return
        if not getattr(self.args, "unsafe_no_sandbox", False):
            raise UsageError(
                "refusing to serve: this host cannot confine evaluated code (" + facts.get("filesystem", "")
                + f"; runner state {facts.get('runner_state', '?')}; user namespaces "
                + f"{facts.get('user_namespaces', '?')}). Any token holder's code could change files here and "
                "forge verdicts. Allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0; see docs/runner-daemon.md), or start with --unsafe-no-sandbox on "
                "a machine you can throw away")
        log.warning("serving WITHOUT a sandbox (--unsafe-no-sandbox): %s", facts.get("filesystem", ""))
        self.sandbox_note = "sandbox: NONE (--unsafe-no-sandbox)"

    def build(self, loop: asyncio.AbstractEventLoop) -> None:
        """The lanes (one worker pool per GPU), the HTTP application and the spool."""
        from .scheduler import Scheduler, detect_gpus
        from .server import LOOPBACK_NAMES, host_name, make_app
        from .validate import Policy
        args = self.args
        try:
            self.gpus = detect_gpus(args.device, args.gpus)
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.ceilings = limit_ceilings(args)
        policy = Policy(ceilings=self.ceilings, max_file_bytes=args.max_file_kb << 10,
                        max_request_bytes=args.max_request_mb << 20)
        self.scheduler = Scheduler(self.store, self.gpus, args.workers, args.device, max_queue=args.max_queue,
                                   ceilings=self.ceilings, hide=self.hide)
        max_body = args.max_body_mb << 20
        allowed = frozenset(host_name(h) for h in (args.allow_host or []))
        hosts = (LOOPBACK_NAMES | {host_name(args.host)} | allowed) if is_loopback(args.host) else \
            ((allowed | {host_name(args.host)} | LOOPBACK_NAMES) if allowed else None)
        self.app = make_app(self.store, self.scheduler, self.token, max_body, loop, policy, hosts)
        if args.spool:
            try:
                import watchdog  # noqa: F401
            except ImportError:
                raise UsageError("--spool needs the watchdog package (pip install watchdog)") from None
            from .spool import Spool
            self.spool = Spool(Path(args.spool), self.store, self.scheduler, max_body, poll_s=args.spool_poll,
                               policy=policy)

    async def listen(self) -> None:
        from aiohttp import web
        args = self.args
        try:
            self.site_runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        except TypeError:  # aiohttp before 3.9 takes the shutdown timeout elsewhere
            self.site_runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.site_runner.setup()
        site = web.TCPSite(self.site_runner, args.host, args.port, ssl_context=self.ctx)
        try:
            await site.start()
        except OSError as e:
            await self.site_runner.cleanup()
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None

    def start(self) -> None:
        """Jobs a stop interrupted go back in the queue; the lanes, the purge and the spool start."""
        keep_s = self.args.keep_hours * 3600

        async def purge_forever():
            while True:
                n = await asyncio.to_thread(self.store.purge, keep_s)
                if n:
                    log.info("forgot %d finished job(s) older than %g hours", n, self.args.keep_hours)
                await asyncio.sleep(min(3600.0, max(60.0, keep_s / 10)))

        self.interrupted = self.scheduler.recover()
        self.purger = asyncio.ensure_future(purge_forever())
        self.counts = self.store.counts()
        self.scheduler.start()
        if self.spool is not None:
            self.spool.start()

    def announce(self) -> None:
        from runner.schema import LIMIT_UNITS
        args = self.args
        scheme = "https" if self.ctx else "http"
        addrs = ", ".join(f"{scheme}://{a[0] if ':' not in a[0] else '[' + a[0] + ']'}:{a[1]}"
                          for a in self.site_runner.addresses)
        lanes = ", ".join(f"GPU {g}" if g is not None else "default device" for g in self.gpus)
        limits = ", ".join(f"{name} {value:g} {LIMIT_UNITS.get(name, 's')}"
                           for name, value in vars(self.ceilings).items())
        print(f"geak-runner: listening on {addrs}; {len(self.gpus)} lane(s) ({lanes}) x {args.workers} workers; "
              f"state {self.state}; {self.counts['queued']} queued"
              + (f" ({self.interrupted} interrupted by a stop, run again)" if self.interrupted else "")
              + f", {self.counts['done']} results stored"
              + (f"; spool {args.spool}" if self.spool else "") + f"; {self.token_note}"
              + (f"; removed {self.swept} scratch dir(s) left by an earlier run" if self.swept else "")
              + f"; limits at most: {limits}; {self.sandbox_note}",
              file=sys.stderr, flush=True)

    async def drain(self, loop: asyncio.AbstractEventLoop) -> int:
        """After the first signal: no new jobs, the running ones finish (a second signal stops
        at once; they run again at the next start). Then everything closes."""
        args, scheduler, store = self.args, self.scheduler, self.store
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
        if not drain.result():
            print(f"geak-runner: jobs still running after {args.drain_timeout:g} s; they will run again at the "
                  "next start", file=sys.stderr, flush=True)
        self.purger.cancel()
        if self.spool is not None:
            self.spool.stop()
        await self.site_runner.cleanup()
        scheduler.close()
        store.close()
        print("geak-runner: stopped", file=sys.stderr, flush=True)
        return 0


async def _serve(args, token: Optional[str], ctx: Optional[ssl.SSLContext]) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before anything starts: a stop is never lost
        loop.add_signal_handler(sig, stop.set)
    daemon = _Daemon(args, token, ctx)
    daemon.open_state()
    daemon.build(loop)
    await daemon.listen()
    daemon.start()
    daemon.announce()
    await stop.wait()
    return await daemon.drain(loop)


def serve(args) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="geak-runner: %(message)s", stream=sys.stderr)
    try:
        token, ctx = check_args(args)
        return asyncio.run(_serve(args, token, ctx))
    except UsageError as e:
        print(f"geak-runner: {e}", file=sys.stderr)
        return 2
