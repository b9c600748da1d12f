"""The attack corpus (tests/attacks/: one real candidate file per technique, each a wrong kernel
for tests/attacks/reference.py plus a side effect that, if it worked, would make the verdict
"correct" or reach beyond the job) run against the local runner, the daemon (`geak-runner
serve` on loopback) and the Ray runner, on the CPU interpreter.

For each attack and each runner:

(a) the verdict is not correct;
(b) nothing outside the job's scratch changed: the installed `runner` package (mode, size,
    mtime, sha-256 of every file), the environment's site-packages (its listing, and every
    top-level file), the user's project the request came from (every file, and its modes),
    the daemon's state directory (its listing, the token, the job records), the pool's root
    (its mode; no file planted or marked in another worker's scratch or the compile layer),
    the host's /tmp, /dev/shm, home and working directories (nothing named after the attack),
    no process of the attack left alive, no secret of the runner in the result;
(c) a plain wrong kernel (tests/attacks/plain_wrong.py) evaluated afterwards is still judged
    wrong, in the same runner and in a new Python process (`geak eval` from the environment's
    bin/: after each attack aimed at the host, and once per runner after all of them), and (b)
    still holds after that (a new pool sweeps /tmp, for one).

The user's projects and the daemon's state directory live outside /tmp (under ~/.cache), as on
a user's machine: a job's /tmp is its own, so under /tmp they would be out of its sight for that
reason alone. The daemon's job database changes with every job; what is compared is its rows:
every earlier row unchanged, no row but the ones the test submitted.

The attacks that aim at the host beyond the pool (its Python, the user's files, /tmp) really
change it where the sandbox does not hold: every file they write carries the attack's marker
(``geak_attack_<random>`` in its name, or a ``GEAK_ATTACK`` block in its text), and every test
removes what it finds in a ``finally`` block, stripping the blocks it appended to the installed
`runner` package (other changes there, such as a colleague's edit, are left alone and only
reported when they carry the marker). Their payloads act only in processes whose environment
has GEAK_ATTACK_ARMED, which this module sets for its own runners and new processes alone.

The runners here run every candidate for real (GEAK_STATIC_REJECT_FIRST=0), so that an attack
the static check would reject before it runs still meets the sandbox and the runtime checks; a
separate test checks that, with the defaults, the in-process means are rejected before they run.

One runner of each kind serves the whole module; the attacks are parametrized over them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import site
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

import runner as runner_package
from conftest import ROOT
from runner.serve.local import LocalRunner
from runner.schema import EvalOptions, EvalResult, Limits, to_dict
from runner.source import build_request

ATTACKS_DIR = Path(__file__).resolve().parent / "attacks"
SUPPORT = ("reference.py", "plain_wrong.py")
PLACEHOLDER = '"@@GEAK_ATTACK_HINTS@@"'
MARK = "geak_attack_"  # every name an attack plants starts with this (then the test's own marker)
BLOCK = re.compile(r"\n?# GEAK_ATTACK_BEGIN[^\n]*\n.*?# GEAK_ATTACK_END[^\n]*\n?", re.S)
MEMORY_MB = 700  # the job's memory limit for the memory attack: a worker here holds ~450 MB at rest
BIN = Path(sys.executable).parent


# ----------------------------------------------------------------------------- the attacks


@dataclass
class Attack:
    host: bool = False  # aims at the host beyond the pool: the new process checks under every runner
    mb: int = 0  # memory it holds (HINTS["mb"]); the job then runs under MEMORY_MB
    static: bool = False  # uses an in-process means the static check rejects before anything runs
    check: Optional[Callable[["Case", EvalResult], list[str]]] = None  # its own assertions


def _userns_refused(case: "Case", result: EvalResult) -> list[str]:
    lines = [ln for ln in (result.log or "").splitlines() if "GEAK_ATTACK userns_remount: unshare" in ln]
    return [f"a user namespace was created inside the job: {ln.strip()[:300]}" for ln in lines
            if "USERNS_CREATED" in ln]


def _shmem_mb() -> float:
    with open("/proc/meminfo") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("Shmem:")) / 1024


def _memory_released(case: "Case", result: EvalResult) -> list[str]:
    grown = 0.0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        grown = _shmem_mb() - case.shmem_before
        if grown < case.attack.mb / 2:
            return []
        time.sleep(0.2)
    return [f"the host's shared memory is {grown:.0f} MB above what it was before the job: what the job held "
            "outlived it"]


ATTACKS: dict[str, Attack] = {
    "runner_package": Attack(host=True),
    "site_packages_pth": Attack(host=True),
    "user_project": Attack(host=True),
    "tmp_reach": Attack(host=True),
    "userns_remount": Attack(host=True, check=_userns_refused),
    "memory_shm": Attack(mb=300, check=_memory_released),
    "channel_send": Attack(static=True),
    "guard_breach": Attack(static=True),
    "thread_worker": Attack(static=True),
    "orphan_socket": Attack(static=True),
    "gc_reference": Attack(static=True),
    "exec_original": Attack(static=True),
}
NAMES = sorted(p.stem for p in ATTACKS_DIR.glob("*.py") if p.name not in SUPPORT and not p.name.startswith("_"))


def test_the_corpus_is_what_the_table_names():
    assert set(ATTACKS) <= set(NAMES), set(ATTACKS) - set(NAMES)
    assert len(NAMES) >= 16, NAMES
    for name in NAMES:
        text = (ATTACKS_DIR / f"{name}.py").read_text()
        assert text.startswith('"""Attack '), f"{name}.py: say what it does and what it proves first"
        assert "def add(x, y):" in text, name
        assert "HINTS" not in text or PLACEHOLDER in text, name


# ----------------------------------------------------------------------------- what is watched


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _state(path: Path) -> tuple:
    """What changes when a file is written, replaced or chmodded (a link: where it points)."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", stat.S_IMODE(st.st_mode))
    if not stat.S_ISREG(st.st_mode):
        return ("other", stat.S_IMODE(st.st_mode))
    return (stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns, _sha(path))


def _tree(root: Path, skip: tuple[str, ...] = ("__pycache__",)) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    out["."] = _state(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            with contextlib.suppress(OSError):
                out[str(p.relative_to(root))] = _state(p)
    return out


def _diff(before: dict, after: dict) -> list[str]:
    out = []
    for k in sorted(set(before) | set(after)):
        if k not in after:
            out.append(f"{k}: removed")
        elif k not in before:
            out.append(f"{k}: new")
        elif before[k] != after[k]:
            b, a = before[k], after[k]
            if b[0] != a[0] and "link" not in (b[0], a[0]):
                what = f"mode {oct(a[-1] if a[0] in ('dir', 'other') else a[0])}, was " \
                       f"{oct(b[-1] if b[0] in ('dir', 'other') else b[0])}"
            elif b[0] in ("dir", "other"):
                what = f"mode {oct(a[1])}, was {oct(b[1])}"
            else:
                what = "contents changed"
            out.append(f"{k}: {what}")
    return out


def _runner_packages() -> list[Path]:
    """The `runner` package this process imports, the checkout's, and the one an editable
    install maps (the workers, the daemon and Ray's actors may import any of them)."""
    dirs = [Path(runner_package.__file__).resolve().parent, (ROOT / "runner").resolve()]
    for finder in Path(sysconfig.get_paths()["purelib"]).glob("__editable__*finder.py"):
        m = re.search(r"'runner':\s*'([^']+)'", finder.read_text())
        if m:
            dirs.append(Path(m.group(1)).resolve())
    return [d for i, d in enumerate(dirs) if d.is_dir() and d not in dirs[:i]]


def _site_dirs() -> list[Path]:
    dirs = [Path(sysconfig.get_paths()["purelib"])]
    with contextlib.suppress(Exception):
        dirs += [Path(p) for p in site.getsitepackages()]
    return [d.resolve() for i, d in enumerate(dirs) if d.is_dir() and d not in dirs[:i]]


def _top(d: Path) -> dict[str, tuple]:
    """A directory's listing, with the state of each file in it (not below)."""
    out = {}
    with contextlib.suppress(OSError):
        for p in d.iterdir():
            with contextlib.suppress(OSError):
                out[p.name] = ("dir",) if p.is_dir() and not p.is_symlink() else _state(p)
    return out


def _named(d: Path, marker: str) -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(str(d / n) for n in os.listdir(d) if marker in n)
    return []


def _host_dirs() -> list[Path]:
    """Where the host's own files are that a job could guess: temp, shared memory, the user's
    home, the working directories this process was started from, the checkout."""
    dirs = [Path("/tmp"), Path(tempfile.gettempdir()), Path("/dev/shm"), Path(pwd.getpwuid(os.getuid()).pw_dir),
            Path.home(), ROOT, Path.cwd()]
    dirs += [Path(os.environ[v]) for v in ("PWD", "OLDPWD") if os.environ.get(v)]
    return [d for i, d in enumerate(dirs) if d.is_dir() and d not in dirs[:i]]


def _db_rows(state: Path) -> dict[str, tuple]:
    """Job id -> (state, a digest of its result, whether its request is one a client sent)."""
    db = sqlite3.connect(f"file:{state / 'jobs.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        return {jid: (st, hashlib.sha256((res or "").encode()).hexdigest()[:16], '"target"' in (req or ""))
                for jid, st, res, req in db.execute("SELECT id, state, result, request FROM jobs")}
    finally:
        db.close()


def _marked_processes(marker: str) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker.encode() in cmd and not zombie:
            out.append(int(name))
    return out


class Watch:
    """What a job must leave as it was: taken before the attack, compared after."""

    def __init__(self, target: "Target", project: Path, marker: str):
        self.target, self.project, self.marker = target, project, marker
        self.packages = {str(d): _tree(d) for d in _runner_packages()}
        self.site = {str(d): _top(d) for d in _site_dirs()}
        self.proj = _tree(project)
        self.roots = {str(r): _state(r) for r in target.pool_roots()}
        self.state = self._daemon_state()

    def _daemon_state(self) -> Optional[dict]:
        s = self.target.state
        if s is None:
            return None
        names = {n for n in os.listdir(s) if not n.endswith(("-wal", "-shm", "-journal"))}
        return {"names": names, "token": _state(s / "token"), "rows": _db_rows(s),
                "worker-python": _state(s / "worker-python") if (s / "worker-python").exists() else None}

    def changes(self, jobs: int) -> list[str]:
        """What changed; ``jobs``: how many evaluations the test asked for since the snapshot."""
        out = []
        for d, before in self.packages.items():
            after = _tree(Path(d))
            for line in _diff(before, after):
                rel = line.split(":")[0]
                p = Path(d) / rel
                marked = p.is_file() and b"GEAK_ATTACK" in p.read_bytes()
                if marked or MARK in rel or ": mode " in line or "removed" in line:
                    what = " (the attack's payload)" if marked else ""
                    out.append(f"the installed runner package: {d}/{line}{what}")
        for d, before in self.site.items():
            out += [f"site-packages: {d}/{ln}" for ln in _diff(before, _top(Path(d)))]
        out += [f"the user's project: {self.project}/{ln}" for ln in _diff(self.proj, _tree(self.project))]
        for r, mode in self.roots.items():
            if Path(r).exists() and _state(Path(r)) != mode:
                out.append(f"the pool's root {r}: mode {oct(_state(Path(r))[1])}, was {oct(mode[1])}")
        for r in self.target.pool_roots():
            for dirpath, dirnames, filenames in os.walk(r):
                for name in dirnames + filenames:
                    p = Path(dirpath) / name
                    if self.marker in name:
                        out.append(f"planted in the pool: {p}")
                    elif name in filenames and p.is_file() and not p.is_symlink():
                        with contextlib.suppress(OSError):
                            if p.stat().st_size < (1 << 20) and self.marker.encode() in p.read_bytes():
                                out.append(f"marked by the attack in the pool: {p}")
        for d in _host_dirs():
            out += [f"left on the host: {p}" for p in _named(d, self.marker)]
            for pool in d.glob("geak-pool-*") if d.name == "tmp" else ():
                out += [f"planted in another pool's root: {p}" for p in _named(pool, self.marker)]
        if self.state is not None:
            out += self._daemon_changes(jobs)
        return out

    def _daemon_changes(self, jobs: int) -> list[str]:
        s, before = self.target.state, self.state
        after = self._daemon_state()
        out = []
        if after["names"] != before["names"]:
            out.append(f"the daemon's state directory {s}: lists {sorted(after['names'])}, "
                       f"was {sorted(before['names'])}")
        for k in ("token", "worker-python"):
            if after[k] != before[k]:
                out.append(f"the daemon's state directory {s}: {k} changed")
        for jid, row in before["rows"].items():
            if after["rows"].get(jid) != row:
                out.append(f"the daemon's job record {jid} changed: {row} -> {after['rows'].get(jid)}")
        # The client names its jobs itself (fresh ids): the test knows how many it submitted.
        new = sorted(set(after["rows"]) - set(before["rows"]))
        forged = [j for j in new if not after["rows"][j][2] or MARK in j]
        if forged or len(new) > jobs:
            out.append(f"the daemon's job records: {new} added, {jobs} submitted" +
                       (f"; {forged} no client's" if forged else ""))
        return out


def _cleanup(marker: str) -> None:
    """Undo whatever an attack managed: strip its blocks from the runner package, delete what it
    planted (every name carries its marker). Runs whether the test passed or not."""
    for d in _runner_packages():
        for p in d.rglob("*"):
            if MARK in p.name:
                with contextlib.suppress(OSError):
                    p.unlink()
            elif p.suffix == ".py" and p.is_file():
                text = p.read_text(encoding="utf-8", errors="surrogateescape")
                if "# GEAK_ATTACK_BEGIN" in text:
                    p.write_text(BLOCK.sub("\n", text).rstrip("\n") + "\n", encoding="utf-8", errors="surrogateescape")
    for d in _site_dirs():
        for p in list(d.glob(f"{MARK}*")) + list(d.glob(f"__pycache__/{MARK}*")):
            with contextlib.suppress(OSError):
                p.unlink()
    for d in _host_dirs():
        for p in _named(d, marker):
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if Path(p).is_dir() and not Path(p).is_symlink() else os.unlink(p)
        if d.name == "tmp":
            for pool in d.glob("geak-pool-*"):
                for p in _named(pool, marker):
                    with contextlib.suppress(OSError):
                        os.unlink(p)
    for pid in _marked_processes(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _restore_mtimes(watch: Watch) -> None:
    """A package file whose text is as it was gets its old mtime back (stale bytecode then
    matches the source again)."""
    for d, before in watch.packages.items():
        for rel, st in before.items():
            p = Path(d) / rel
            if len(st) == 4 and p.is_file():
                with contextlib.suppress(OSError):
                    now = _state(p)
                    if now[3] == st[3] and now[2] != st[2]:
                        os.utime(p, ns=(st[2], st[2]))


# ----------------------------------------------------------------------------- the runners


@dataclass
class Target:
    name: str
    runner: object
    roots: Callable[[], list[Path]]
    state: Optional[Path] = None  # the daemon's state directory
    hidden: tuple[str, ...] = ()  # secrets of the runner a job must not see

    def pool_roots(self) -> list[Path]:
        return [r for r in self.roots() if r.is_dir()]


@pytest.fixture(scope="module")
def armed():
    """The attacks' payloads act only where GEAK_ATTACK_ARMED is set; a secret a job must not
    see; and the runners of this module (local, the daemon, Ray's actors: all read it from their
    environment) run every candidate for real, even one the static check would reject before it
    runs (GEAK_STATIC_REJECT_FIRST=0; its verdict is still `rejected` at the end): the sandbox and
    the runtime checks are what is tested here. `test_in_process_means_are_rejected_before_they_run`
    checks the default."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GEAK_ATTACK_ARMED", "1")
    mp.setenv("GEAK_STATIC_REJECT_FIRST", "0")
    mp.setenv("GEAK_ATTACK_SECRET_TOKEN", "geak-secret-" + secrets.token_hex(12))
    yield os.environ["GEAK_ATTACK_SECRET_TOKEN"]
    mp.undo()


@pytest.fixture(scope="module")
def outside_tmp():
    """Where the user's projects and the daemon's state directory live here: outside /tmp, as
    they do on a user's machine (a job's /tmp is its own, so under /tmp they would be out of a
    job's sight for that reason alone, which would prove nothing of the read-only host or of
    what the runner hides). Under the user's cache directory; removed at the end."""
    made = None
    for base in (Path.home() / ".cache", ROOT / ".pytest_cache"):
        with contextlib.suppress(OSError):
            base.mkdir(parents=True, exist_ok=True)
            made = Path(tempfile.mkdtemp(prefix="geak-attacks-", dir=base))
            break
    if made is None:
        pytest.skip("no writable directory outside /tmp for the attacked projects")
    yield made
    shutil.rmtree(made, ignore_errors=True)


def _tmpdir_of(pid: int) -> Path:
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/environ", "rb") as f:
            for kv in f.read().split(b"\0"):
                if kv.startswith(b"TMPDIR="):
                    return Path(kv[7:].decode())
    return Path("/tmp")


@pytest.fixture(scope="module", params=["local", "daemon", "ray"])
def target(request, armed, outside_tmp, tmp_path_factory):
    kind = request.param
    if kind == "local":
        r = LocalRunner(workers=2, device="auto")  # the GPU where there is one, else the interpreter
        t = Target("local", r, lambda: [Path(r.pool.root)], hidden=(armed,))
        close = r.close
    elif kind == "daemon":
        from test_daemon import Daemon
        d = Daemon(outside_tmp / "daemon" / "state", None, "--workers", "2").start()
        t = Target("daemon", d.client(), lambda: sorted((d.state / "scratch").glob("geak-pool-*")), d.state,
                   hidden=(armed, d.token))
        close = d.stop
    else:
        pytest.importorskip("ray", reason="the Ray runner's attacks need Ray: pip install -r requirements/ray.txt")
        from runner.serve.ray import RayRunner
        from test_ray import Cluster
        c = Cluster(slots=1)
        mp = pytest.MonkeyPatch()
        for k in ("RAY_AUTH_TOKEN", "RAY_DISABLE_USAGE_STATS"):
            mp.setenv(k, c.env[k])
        mp.setenv("RAY_ADDRESS", f"127.0.0.1:{c.gcs}")
        mp.delenv("RAY_AUTH_MODE", raising=False)
        try:
            # Through the Ray client (ray://): a driver's connection (ray:auto) would stay this
            # process's, and tests/test_ray.py, in the same test process after this module,
            # joins its own cluster as a driver.
            r = RayRunner.from_spec(c.url, device="interpreter", workers=1, actors=1, ship_code=False)
            r.settle(120)
        except BaseException:
            mp.undo()
            c.stop()
            raise

        def roots():  # each actor's pool, in the actor's temp directory
            return [p for a in r.actors() if a.get("pid")
                    for p in _tmpdir_of(a["pid"]).glob(f"geak-pool-{a['pid']}-*")]

        t = Target("ray", r, roots, hidden=(armed, c.env["RAY_AUTH_TOKEN"]))

        def close():
            r.close()
            import ray
            ray.shutdown()  # this process leaves the cluster: the next module here joins its own
            mp.undo()
            os.environ.pop("RAY_AUTH_MODE", None)
            c.stop()
    try:
        # The baseline: this runner judges the plain wrong kernel wrong before any attack.
        proj = _project(tmp_path_factory.mktemp("baseline"), None, {})
        res = t.runner.evaluate(_request(proj, None, f"baseline-{kind}-{secrets.token_hex(4)}"))
        assert res.status == "mismatch", f"{kind}: {res.status}: {res.message}"
        yield t
    finally:
        close()


# ----------------------------------------------------------------------------- one attack


def _project(root: Path, attack: Optional[str], hints: dict) -> Path:
    """The user's project on the host: the reference, the plain wrong kernel, the attack, a file
    of the user's own."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'attacked'\n")
    (root / "canary.txt").write_text("the user's own file\n")
    for name in SUPPORT:
        (root / name).write_text((ATTACKS_DIR / name).read_text())
    if attack is not None:
        text = (ATTACKS_DIR / f"{attack}.py").read_text()
        (root / f"{attack}.py").write_text(text.replace(PLACEHOLDER, repr(hints)))
    return root


def _request(project: Path, attack: Optional[str], job_id: str, memory_mb: Optional[int] = None):
    cand = f"{attack or 'plain_wrong'}.py::add"
    opts = EvalOptions(trials=1, limits=Limits(memory_mb=memory_mb) if memory_mb else Limits())
    req, _, _ = build_request("reference.py::add", cand, opts, root=project, cwd=project)
    req.id = job_id
    return req


def _verdict(r: EvalResult) -> str:
    log = "\n".join(ln for ln in (r.log or "").splitlines() if "GEAK_ATTACK" in ln)
    return f"{r.status} (correct={r.correct}): {r.message[:300]}" + (f"\n  its log:\n{log[:2000]}" if log else "")


def _new_process(project: Path) -> tuple[Optional[str], str]:
    """`geak eval` of the plain wrong kernel in a new Python process of this environment."""
    geak = BIN / "geak"
    cmd = [str(geak)] if geak.exists() else [sys.executable, "-m", "agent.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    p = subprocess.run(cmd + ["eval", "reference.py::add", "--candidate", "plain_wrong.py::add", "--trials", "1",
                              "--json"], cwd=project, env=env, capture_output=True, text=True, timeout=240)
    try:
        doc = json.loads(p.stdout)
        return doc.get("status"), f"{doc.get('status')}: {str(doc.get('message'))[:300]}"
    except ValueError:
        return None, f"exit {p.returncode}: {p.stderr[-1500:]}"


@dataclass
class Case:
    attack: Attack
    project: Path
    marker: str
    shmem_before: float = 0.0


@pytest.mark.parametrize("name", NAMES)
def test_attack(target: Target, name: str, outside_tmp: Path):
    attack = ATTACKS.get(name, Attack())
    marker = MARK + secrets.token_hex(5)
    where = outside_tmp / f"{target.name}-{name}"
    hints = {"marker": marker, "project": str(where), "mb": attack.mb}
    project = _project(where, name, hints)
    case = Case(attack, project, marker)
    watch = Watch(target, project, marker)
    problems: list[str] = []
    try:
        case.shmem_before = _shmem_mb()
        res = target.runner.evaluate(_request(project, name, f"atk-{marker}", MEMORY_MB if attack.mb else None))
        # (a) not correct
        if res.correct or res.status == "ok":
            problems.append(f"the attack's verdict is correct: {_verdict(res)}")
        # (b) nothing outside the job changed, nothing of it is left
        problems += [f"after the attack: {c}" for c in watch.changes(1)]
        text = json.dumps(to_dict(res))
        problems += [f"a secret of the runner is in the result ({s[:6]}...)" for s in target.hidden if s in text]
        deadline = time.monotonic() + 5
        while _marked_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        problems += [f"a process of the attack outlived the job: pid {p}" for p in _marked_processes(marker)]
        if attack.check is not None:
            problems += attack.check(case, res)
        # (c) the next wrong kernel is still wrong: in this runner, and in a new process
        again = target.runner.evaluate(_request(project, None, f"wrong-{marker}"))
        if again.status != "mismatch":
            problems.append(f"after the attack, the plain wrong kernel in the same {target.name} runner: "
                            f"{_verdict(again)}")
        if attack.host:
            status, what = _new_process(project)
            if status != "mismatch":
                problems.append(f"after the attack, the plain wrong kernel in a new process (geak eval): {what}")
        seen = {p.split(": ", 1)[-1] for p in problems}
        problems += [f"after the plain wrong kernels: {c}" for c in watch.changes(2) if c not in seen]
        assert not problems, (f"{name} on the {target.name} runner (verdict: {_verdict(res)}):\n  - "
                              + "\n  - ".join(dict.fromkeys(problems)))
    finally:
        _cleanup(marker)
        _restore_mtimes(watch)


def test_a_new_process_still_judges_after_every_attack(target: Target, tmp_path):
    """After all the attacks on this runner (those aimed at the host checked in a new process
    each, above): `geak eval` in a new process still calls the plain wrong kernel wrong, and the
    runner itself still tells right from wrong."""
    project = _project(tmp_path / "project", None, {})
    status, what = _new_process(project)
    assert status == "mismatch", what
    res = target.runner.evaluate(_request(project, None, f"last-wrong-{secrets.token_hex(4)}"))
    assert res.status == "mismatch", _verdict(res)
    req, _, _ = build_request("reference.py::add", None, EvalOptions(trials=1), root=project, cwd=project)
    req.id = f"last-right-{secrets.token_hex(4)}"
    res = target.runner.evaluate(req)
    assert res.status == "ok" and res.correct, _verdict(res)


@pytest.mark.parametrize("name", [n for n in NAMES if ATTACKS.get(n, Attack()).static])
def test_in_process_means_are_rejected_before_they_run(name, tmp_path, monkeypatch):
    """With the runner's defaults, an attack through an in-process means (the evaluator's package,
    the heap, a hidden thread, a fork, exec) is `rejected` by the static check before any worker
    is taken: none of its code runs."""
    monkeypatch.delenv("GEAK_STATIC_REJECT_FIRST", raising=False)
    marker = MARK + secrets.token_hex(5)
    project = _project(tmp_path / "project", name, {"marker": marker, "project": str(tmp_path / "project")})
    r = LocalRunner(workers=1, device="interpreter")
    try:
        res = r.evaluate(_request(project, name, f"static-{marker}"))
        rejects = [f"{f.code}: {f.message}" for f in res.flags if f.severity == "reject"]
        assert res.status == "rejected" and not res.correct and rejects, _verdict(res)
        assert "GEAK_ATTACK" not in (res.log or ""), "its code ran: " + _verdict(res)
        assert getattr(r.pool, "_server", None) is None, "a worker was started for it"
    finally:
        r.close()
        _cleanup(marker)
