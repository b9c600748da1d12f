"""Containment of a worker and everything it starts (Linux; standard library only).

Used on both sides of the fork server (``runner.worker.zygote``):

* in the job's keeper process, before the worker is forked: its own PID and network namespaces
  (``unshare``; as root directly, otherwise inside a new user namespace where the kernel allows
  one), and the child-subreaper bit, so that no descendant of the worker can leave the job's
  process tree;
* in the worker, before it touches user code: a session of its own, death with its keeper
  (``PR_SET_PDEATHSIG``), not dumpable (no ``ptrace`` of it, no ``/proc/PID/mem`` by another
  process of the same user), no new privileges, and no capabilities at all (so it cannot
  ``setns`` back into the host's namespaces, mount, or raise limits);
* in the pool: the process tree below a keeper (by parent links in ``/proc``), its memory, and
  killing all of it.

With PID namespaces, the worker is process 1 of its namespace: when it dies the kernel kills
every process left in the namespace, and nothing inside can see or signal a process outside.
Without them (no root, no user namespaces), the keeper is a subreaper, so orphans of the job
stay below it, and the pool kills the tree by walking ``/proc``.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import time
from typing import Optional

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _prctl(option: int, arg: int = 0) -> bool:
    try:
        return libc().prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                            ctypes.c_ulong(0)) == 0
    except Exception:
        return False


# --------------------------------------------------------------------------- namespaces


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18


def mount_own_proc() -> bool:
    """In the first process of a new PID namespace (with its own mount namespace): a /proc that
    shows this namespace. Without it the GPU driver looks up the wrong processes in the host's
    /proc and fails to start ("OS call failed")."""
    lib = libc()
    if lib.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        return False
    return lib.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None) == 0


MS_BIND, MS_REMOUNT, MS_RDONLY = 4096, 32, 1


def bind_read_only(path: str) -> bool:
    """Make ``path`` read-only in this mount namespace (a bind mount of itself)."""
    lib = libc()
    p = path.encode()
    if lib.mount(p, p, None, ctypes.c_ulong(MS_BIND | MS_REC), None) != 0:
        return False
    return lib.mount(None, p, None, ctypes.c_ulong(MS_REMOUNT | MS_BIND | MS_RDONLY), None) == 0


def pid_namespace_works() -> bool:
    """Whether this process can give a job its own PID namespace with a /proc of its own (tried in
    a throwaway child: root, or unprivileged user namespaces)."""
    pid = os.fork()
    if pid == 0:
        try:
            ok = _unshare(CLONE_NEWPID | CLONE_NEWNS) is not None
            if ok:
                child = os.fork()
                if child == 0:
                    os._exit(0 if mount_own_proc() else 1)
                _, st = os.waitpid(child, 0)
                ok = os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, st = os.waitpid(pid, 0)
    return os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0


def _unshare(flags: int) -> Optional[str]:
    """unshare(flags) inside a new user namespace that maps this user to itself, so that even a
    runner started as root is no one special outside the job (its capabilities there reach
    nothing of the host); plain ``unshare`` as root only where the kernel refuses user
    namespaces. Returns "user" | "root" (how it was done), or None."""
    uid, gid = os.getuid(), os.getgid()
    if libc().unshare(CLONE_NEWUSER | flags) == 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        return "user"
    if libc().unshare(flags) == 0:
        return "root"
    return None


def enter_namespaces(pid: bool = True, net: bool = True) -> dict[str, str]:
    """Give the calling process (the keeper) new user, mount (for the confined view of the
    files, ``confine``), PID (for its children, with their own /proc) and network namespaces.

    Returns what holds: ``{"pid": "own namespace" | "shared", "net": ..., "user": ...,
    "mount": ...}``. A user namespace that maps this user to itself comes first (see
    ``_unshare``)."""
    got = {"pid": "shared", "net": "shared", "user": "shared", "mount": "shared"}
    want = CLONE_NEWNS | (CLONE_NEWPID if pid else 0) | (CLONE_NEWNET if net else 0)
    how = _unshare(want)
    if how is None and pid:  # a PID namespace is the part that may be refused: try without it
        pid, want = False, want & ~CLONE_NEWPID
        how = _unshare(want)
    if how is not None:
        got.update(pid="own namespace" if pid else "shared", net="own namespace" if net else "shared",
                   user="own namespace" if how == "user" else "shared", mount="own namespace")
    return got


# --------------------------------------------------------------------------- the job's view of the files

AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (the unified syscall table)
O_PATH = getattr(os, "O_PATH", 0o10000000)
TMP_MB = 1024  # the private /tmp and /dev/shm of a job, when the pool gives no size


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount(source: Optional[str], target: str, fstype: Optional[str], flags: int, data: Optional[str] = None) -> None:
    lib = libc()
    if lib.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                 ctypes.c_ulong(flags), data.encode() if data else None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {source or ''} on {target}: {os.strerror(e)}")


def _set_read_only(path: str, read_only: bool, recursive: bool) -> None:
    """Set or clear the read-only flag of the mount at ``path`` (and every mount below it)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    if libc().syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(),
                      ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0:
        return
    if ctypes.get_errno() != errno.ENOSYS:  # kernels before 5.12: remount one mount at a time
        e = ctypes.get_errno()
        raise OSError(e, f"mount_setattr {path}: {os.strerror(e)}")
    for mp, kept in _mounts_below(path) if recursive else [(path, _mount_flags(path))]:
        try:
            _mount(None, mp, None, MS_REMOUNT | MS_BIND | kept | (MS_RDONLY if read_only else 0))
        except OSError:
            if mp == path:
                raise


_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024,
                 "nodiratime": 2048, "relatime": 1 << 21}


def _mountinfo() -> list[tuple[str, int]]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            mp = parts[4].encode().decode("unicode_escape")
            flags = 0
            for o in parts[5].split(","):
                flags |= _OPTION_FLAGS.get(o, 0)
            out.append((mp, flags))
    return out


def _mounts_below(path: str) -> list[tuple[str, int]]:
    root = path.rstrip("/") + "/"
    return [(mp, fl) for mp, fl in _mountinfo() if mp == path or (mp + "/").startswith(root)]


def _mount_flags(path: str) -> int:
    return next((fl for mp, fl in reversed(_mountinfo()) if mp == path), 0)


def python_paths() -> tuple[str, ...]:
    """Where this Python and its packages live (the interpreter's prefixes, ``sys.path``): a
    job must still see them, read-only, where they lie under ``/tmp`` (a checkout or a Ray
    package cache there) or under a hidden directory."""
    import sys
    out = []
    for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, *sys.path,
              os.path.dirname(os.path.dirname(os.path.abspath(__file__)))):
        if p and os.path.isdir(p):
            out.append(os.path.realpath(p))
    keep: list[str] = []
    for p in sorted(set(out), key=len):
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in keep):
            keep.append(p)
    return tuple(keep)


# The device nodes a job may open: the harmless ones every program uses, and the GPU's.
_PLAIN_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_GPU_DEVICES = ("nvidia", "kfd", "dri")  # prefixes: nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/; AMD's


def _open_devices() -> list[tuple[int, str, bool]]:
    """O_PATH descriptors of the device nodes (and GPU device folders) a job keeps: (fd, name,
    is a folder)."""
    out = []
    try:
        names = os.listdir("/dev")
    except OSError:
        return out
    for name in sorted(names):
        if name in _PLAIN_DEVICES or name.startswith(_GPU_DEVICES):
            path = os.path.join("/dev", name)
            if os.path.islink(path):
                continue
            try:
                out.append((os.open(path, os.O_RDONLY | O_PATH), name, os.path.isdir(path)))
            except OSError:
                pass
    return out


def _minimal_dev(devices: list[tuple[int, str, bool]]) -> None:
    """A /dev of the job's own (tmpfs) holding only ``devices`` (bound from the host's, so they
    stay usable although a tmpfs made in a user namespace allows no device nodes of its own),
    /dev/shm (the private one, added after) and the usual links. Without it, a runner started
    as root would leave its jobs the owner's rights on every disk and loop device."""
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for fd, name, is_dir in devices:
        path = os.path.join("/dev", name)
        if is_dir:
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join("/dev", name))
    os.mkdir("/dev/shm", 0o1777)
    os.mkdir("/dev/pts", 0o755)


# The parts of /proc that act on the whole machine, read-only as a container runtime keeps them
# (the OCI runtime spec's defaults): with them so, /proc itself can stay writable.
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


def _proc_writable() -> None:
    """/proc writable again, but for its machine-wide parts. A GPU driver writes there as it
    starts (on a read-only /proc, CUDA's cuInit fails with "OS call failed", error 304); what a
    process may write under /proc/PID the kernel decides by that process's own rights."""
    if not os.path.isdir("/proc/self"):
        return
    _set_read_only("/proc", False, recursive=False)
    for path in _PROC_READ_ONLY:
        if os.path.lexists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _set_read_only(path, True, recursive=True)


def confine(scratch: str, shared: Optional[str] = None, hide: tuple[str, ...] = (),
            tmp_mb: int = TMP_MB, own_user_namespace: bool = True,
            keep: Optional[tuple[str, ...]] = None) -> dict[str, str]:
    """Give this process (a job's init, in its own user and mount namespaces, before the worker
    is forked) the view of the files every worker gets:

    * the whole host read-only (every mount, recursively);
    * a private ``/tmp``, with ``/dev/shm`` on it (one tmpfs of ``tmp_mb`` MB): what is written
      there is gone with the job;
    * the directories in ``hide`` (the pool's root with every job's scratch, the daemon's state
      directory) covered by an empty read-only tmpfs, files in it by ``/dev/null``;
    * the job's own ``scratch`` the one writable directory of the host, at its own path;
    * the shared compile layer ``shared`` read-only, at its own path;
    * no new user namespaces (so no way to a set of capabilities that could remount).

    Raises OSError when a step is refused; the caller then runs no user code."""
    sfd = os.open(scratch, os.O_RDONLY | O_PATH | os.O_DIRECTORY)  # before anything hides it
    cfd = os.open(shared, os.O_RDONLY | O_PATH | os.O_DIRECTORY) if shared and os.path.isdir(shared) else None
    kept = []
    for path in (python_paths() if keep is None else keep):
        if path == "/" or path.startswith(tuple(h.rstrip("/") + "/" for h in hide if h)) or path in hide:
            continue  # never bring back what is hidden
        try:
            kept.append((os.open(path, os.O_RDONLY | O_PATH | os.O_DIRECTORY), path))
        except OSError:
            pass
    os.chdir("/")  # a working directory in a hidden place would be a way back to it
    # The limit is per user namespace: written in the job's own, it binds the job alone. (In
    # the host's namespace, as root without user namespaces, it would bind the whole machine:
    # there the copies of these read-only mounts that a new namespace would get are locked.)
    if own_user_namespace and not _write("/proc/sys/user/max_user_namespaces", "0"):
        raise OSError(errno.EPERM, "cannot forbid user namespaces inside the job")
    devices = _open_devices()  # before /dev is replaced
    _set_read_only("/", True, recursive=True)
    _proc_writable()
    facts = {"filesystem": "host read-only"}
    _minimal_dev(devices)
    # Sockets of the host's services (a container engine, D-Bus, a user's agents) can be
    # connected to on a read-only mount: their usual homes are not there at all.
    for path in ("/run", "/var/run"):
        if os.path.isdir(path) and not os.path.islink(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=0755")
    # The private /tmp and /dev/shm: one tmpfs, its size the bound on both.
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={max(16, int(tmp_mb))}m,mode=1777")
    os.mkdir("/tmp/.shm", 0o1777)
    os.chmod("/tmp/.shm", 0o1777)
    _mount("/tmp/.shm", "/dev/shm", None, MS_BIND)
    _mount(None, "/dev", None, MS_REMOUNT | MS_NOSUID | MS_NOEXEC | MS_RDONLY)  # the folder; its nodes stay usable
    covers = []
    hide = tuple(h for h in hide if h)
    # A hidden path under another hidden one is hidden with it (covering both would leave the
    # inner cover out of reach under the outer one).
    hide = tuple(h for h in hide if not any(o != h and h.startswith(o.rstrip("/") + "/") for o in hide))
    for path in hide:
        if not path or not os.path.lexists(path):
            continue  # under the new /tmp, or gone: not visible anyway
        if os.path.isdir(path) and not os.path.islink(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=0755")
            covers.append(path)
        elif os.path.isfile(path):
            _mount("/dev/null", path, None, MS_BIND)
    for fd, path in kept:  # Python's own files, where the new /tmp covered them
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            _set_read_only(path, True, recursive=True)
        os.close(fd)
    for fd, path, writable in ((sfd, scratch, True), (cfd, shared, False)):
        if fd is None:
            continue
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
        _set_read_only(path, not writable, recursive=False)
        os.close(fd)
    for path in covers:
        _set_read_only(path, True, recursive=False)
    facts["writable"] = f"own scratch; private /tmp and /dev/shm ({max(16, int(tmp_mb))} MB, gone with the job)"
    return facts



def set_subreaper() -> bool:
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


# --------------------------------------------------------------------------- the worker's own limits


def die_with_parent(parent_pid: int) -> bool:
    """SIGKILL when the parent dies (and if it already has, now)."""
    ok = _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid and parent_pid != 0:
        os._exit(1)
    return ok


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_privileges() -> dict[str, bool]:
    """No new privileges, no capabilities (bounding, ambient, effective, permitted, inheritable),
    not dumpable. Irreversible for this process and everything it starts."""
    out = {"no_new_privs": _prctl(PR_SET_NO_NEW_PRIVS, 1)}
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    for cap in range(64):
        _prctl(PR_CAPBSET_DROP, cap)
    try:
        hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        out["capabilities_dropped"] = libc().capset(ctypes.byref(hdr), ctypes.byref(data)) == 0
    except Exception:
        out["capabilities_dropped"] = False
    out["not_dumpable"] = _prctl(PR_SET_DUMPABLE, 0)
    return out


def capabilities(pid: int | str = "self") -> Optional[int]:
    """The effective capability mask of a process (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return None


def namespace(pid: int | str, kind: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return ""


def close_fds(keep: set[int]) -> None:
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


# --------------------------------------------------------------------------- process trees (pool side)


def _stat(pid: str) -> Optional[tuple[str, int]]:
    """(state, ppid) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    try:
        return rest[0].decode(), int(rest[1])
    except (IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    st = _stat(str(pid))
    return st is not None and st[0] not in ("Z", "X")


def process_table() -> dict[int, int]:
    """pid -> parent pid, for every live (not zombie) process this one can see."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            st = _stat(name)
            if st is not None and st[0] not in ("Z", "X"):
                table[int(name)] = st[1]
    return table


_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def children(pid: int) -> Optional[list[int]]:
    """The children of ``pid`` (zombies included) from ``/proc/PID/task/*/children``: a few small
    reads, where the whole process table is a read per process on the machine. The kernel
    does not hold the list still across reads, so a child that forks or exits meanwhile may be
    missed; a caller that must find every one reads ``process_table``. None where the kernel
    keeps no such file (``CONFIG_PROC_CHILDREN``) or ``pid`` is gone."""
    if not _CHILDREN_FILE:
        return None
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            pass  # that thread is gone
    return out


def descendants(root: int, table: Optional[dict[int, int]] = None) -> list[int]:
    """Every process below ``root`` (not ``root`` itself), parents before children."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in children.get(p, ()):
            out.append(c)
            todo.append(c)
    return out


def memory_mb(pids: list[int]) -> float:
    """Private resident memory (anonymous + shared-memory pages) of these processes, in MB.
    Pages shared with the fork server (torch's code) are not counted."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(("RssAnon:", "RssShmem:")):
                        total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total / 1024


def kill_tree(root: int, include_root: bool = True, rounds: int = 100, wait: bool = True) -> int:
    """SIGKILL every process below ``root`` until none is left, then ``root``. The root goes
    last: as a subreaper it keeps the orphans of killed processes below it, so a process forked
    while the sweep runs is found by the next round. Returns how many were signalled.

    ``wait=False``: stop once every live process below ``root`` has had its SIGKILL, without
    waiting for them to finish dying (a process with a CUDA context takes tens of milliseconds
    to). A process with a SIGKILL delivered runs no more of its code and can no longer fork (the
    kernel abandons a fork that a fatal signal interrupts), so the tree can do nothing more; a
    child forked just before its parent's signal is in ``/proc`` by the next round, and is
    signalled there. Processes are told apart by pid and start time, so a reused pid is new.
    Whoever reaps them (the keeper, or the fork server for the keeper's orphans) does so later."""
    signalled = 0
    seen: set[tuple[int, int]] = set()
    for _ in range(rounds):
        pids = descendants(root)
        if not wait:
            pids = [p for p in pids if (p, _started(p)) not in seen]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                signalled += 1
            except (ProcessLookupError, PermissionError):
                pass
            if not wait:
                seen.add((pid, _started(pid)))
        if wait:
            time.sleep(0.005)
    if include_root and alive(root):
        try:
            os.kill(root, signal.SIGKILL)
            signalled += 1
        except (ProcessLookupError, PermissionError):
            pass
    return signalled


def _started(pid: int) -> int:
    """A process's start time (clock ticks since boot; -1 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2:].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


# --------------------------------------------------------------------------- the self-test


def probe(scratch: str, isolate: bool, pidns: bool, hide: tuple[str, ...], tmp_mb: int,
          shared: Optional[str]) -> dict:
    """In a forked child of the fork server: become a job (the same namespaces, view of the
    files and dropped privileges as a worker) and try what a candidate must not manage. The
    facts, for ``judge_probe``. Runs no user code."""
    ns = enter_namespaces(pid=isolate and pidns, net=isolate) if isolate else {}
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        res: dict = {}
        try:
            if ns.get("pid") == "own namespace" and not mount_own_proc():
                res["confine_error"] = "cannot mount a /proc of the job's own"
            elif ns.get("mount") == "own namespace":
                try:
                    confine(scratch, shared, hide, tmp_mb, ns.get("user") == "own namespace")
                    res["confined"] = True
                except OSError as e:
                    res["confine_error"] = str(e)
            else:
                res["confine_error"] = "no mount namespace here (it needs root or unprivileged user namespaces)"
            drop_privileges()
            res.update(_attempts(scratch, hide, shared))
        except BaseException as e:  # noqa: BLE001 - reported
            res["error"] = f"{type(e).__name__}: {e}"
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    data = _read_all(r)
    os.waitpid(child, 0)
    try:
        res = json.loads(data or b"{}")
    except ValueError:
        res = {"error": "the probe gave no answer"}
    res["namespaces"] = ns
    return res


def _read_all(fd: int) -> bytes:
    """Everything a child writes on a pipe until it closes it; the read end is closed after."""
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    finally:
        os.close(fd)
    return data


def _attempts(scratch: str, hide: tuple[str, ...], shared: Optional[str] = None) -> dict:
    """What the probe could do, as a candidate would try it."""
    import sysconfig
    out: dict = {}
    name = ".geak-probe-" + os.urandom(6).hex()

    def can_create(d: str) -> bool:
        p = os.path.join(d, name)
        try:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:
            return False
        os.close(fd)
        try:
            os.unlink(p)
        except OSError:
            pass
        return True

    out["write_scratch"] = can_create(scratch)
    places = {os.path.dirname(os.path.abspath(__file__)), sysconfig.get_paths().get("purelib") or "",
              os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.expanduser("~")}
    out["write_outside"] = sorted(d for d in places if d and os.path.isdir(d) and can_create(d))
    mine = [p.rstrip("/").split("/") for p in (scratch, shared) if p]
    visible = []
    for h in hide:
        if not h or not os.path.lexists(h):
            continue
        if os.path.isdir(h):
            try:
                names = os.listdir(h)
            except OSError:
                continue
            # The paths down to the job's own scratch and the shared compile layer are there;
            # nothing else may be.
            top = h.rstrip("/").split("/")
            ours = {p[len(top)] for p in mine if p[:len(top)] == top and len(p) > len(top)}
            if [n for n in names if n not in ours]:
                visible.append(h)
        elif os.path.isfile(h) and os.path.getsize(h) > 0:
            visible.append(h)
    out["visible"] = visible
    try:
        out["devices"] = sorted(n for n in os.listdir("/dev") if n not in _PLAIN_DEVICES + (
            "fd", "stdin", "stdout", "stderr", "shm", "pts") and not n.startswith(_GPU_DEVICES))
        out["sockets_dirs"] = sorted(p for p in ("/run", "/var/run") if os.path.isdir(p) and os.listdir(p))
    except OSError as e:
        out["devices"] = [f"unreadable: {e}"]
    out["proc_writable"] = []  # the machine-wide parts of /proc (_PROC_READ_ONLY)
    for path in ("/proc/sys/kernel/hostname", "/proc/sysrq-trigger"):
        try:
            os.close(os.open(path, os.O_WRONLY))
            out["proc_writable"].append(path)
        except OSError:
            pass
    try:
        tmp_name = os.path.join("/tmp", name)
        with open(tmp_name, "w") as f:
            f.write("probe")
        out["tmp_file"] = tmp_name
    except OSError:
        out["tmp_file"] = None
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc().unshare(CLONE_NEWUSER) == 0 else 1)
    _, st = os.waitpid(pid, 0)
    out["user_namespace_inside"] = os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
    return out


def self_test(root: str, isolate: bool = True, pidns: Optional[bool] = None, hide: tuple[str, ...] = (),
              tmp_mb: int = TMP_MB, shared: Optional[str] = None) -> tuple[bool, dict[str, str]]:
    """A throwaway job, with the same namespaces and view of the files as every job, tries what
    a candidate must not manage (write outside its scratch, see what is hidden, create a user
    namespace); (whether jobs are confined, the facts in words). Standard library only: the
    fork server runs it before its first job, ``geak-runner serve`` before it listens. ``root``
    is hidden too, and holds the probe's scratch for the moment."""
    if pidns is None:
        pidns = isolate and pid_namespace_works()
    scratch = os.path.join(root, "probe-" + os.urandom(8).hex())
    os.mkdir(scratch, 0o700)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = probe(scratch, isolate, pidns, (root, *hide), tmp_mb, shared)
        except BaseException as e:  # noqa: BLE001 - reported, not raised
            out = {"error": f"{type(e).__name__}: {e}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = _read_all(r)
    os.waitpid(pid, 0)
    import shutil
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        got = json.loads(data or b"{}")
    except ValueError:
        got = {"error": "the self-test gave no answer"}
    return judge_probe(got)


def judge_probe(got: dict) -> tuple[bool, dict[str, str]]:
    """The self-test's answer in words, for the results' ``sandbox`` field and ``geak-runner
    info``: (whether jobs are confined, the facts). Only what the probe saw counts."""
    facts: dict[str, str] = {"checked": "by a self-test when the runner started"}
    outside = got.get("write_outside") or []
    visible = got.get("visible") or []
    tmp_file = got.get("tmp_file")
    tmp_private = bool(tmp_file) and not os.path.exists(tmp_file)
    if tmp_file and os.path.exists(tmp_file):
        try:
            os.unlink(tmp_file)
        except OSError:
            pass
    devices = got.get("devices") or []
    sockets = got.get("sockets_dirs") or []
    proc = got.get("proc_writable") or []
    confined = bool(got.get("confined")) and not outside and not visible and bool(got.get("write_scratch")) \
        and tmp_private and not devices and not sockets and not proc
    if confined:
        facts["filesystem"] = ("host read-only; writable: the job's own scratch and a private /tmp and "
                               "/dev/shm, gone with the job")
    else:
        why = got.get("confine_error") or got.get("error") or ""
        where = f"; it could write in {', '.join(outside)}" if outside else ""
        facts["filesystem"] = (f"NOT confined: candidate code can change files of this host"
                               f"{' (' + why + ')' if why else ''}{where}")
    facts["devices"] = ("null, zero, full, random, urandom, tty and the GPU's only" if not devices
                        else "the host's, with " + ", ".join(devices[:8]) + ("..." if len(devices) > 8 else ""))
    if sockets:
        facts["filesystem"] += "; the host's service sockets are reachable in " + ", ".join(sockets)
    if proc:
        facts["filesystem"] += "; machine-wide settings are writable: " + ", ".join(proc)
    facts["runner_state"] = ("hidden from the job" if not visible and got.get("confined")
                             else "VISIBLE to the job" + (f": {', '.join(visible)}" if visible else ""))
    facts["user_namespaces"] = ("cannot be created inside the job" if not got.get("user_namespace_inside")
                                else "CAN be created inside the job")
    return confined, facts


def job_memory_mb(keeper: int, pids: list[int]) -> float:
    """A job's host memory: the private resident memory of its processes (``memory_mb``), what
    its private /tmp and /dev/shm hold, and memory files (``memfd_create``) its processes hold
    open but have not mapped. Seen from outside the job: ``/proc/PID/root`` of its processes."""
    total = memory_mb(pids)
    seen_fs: set = set()
    for pid in pids[:1]:  # one process is enough: every process of the job sees the same /tmp
        try:
            st = os.statvfs(f"/proc/{pid}/root/tmp")
            dev = os.stat(f"/proc/{pid}/root/tmp").st_dev
        except OSError:
            continue
        if dev not in seen_fs and dev != _host_tmp_dev():
            seen_fs.add(dev)
            total += (st.f_blocks - st.f_bfree) * st.f_frsize / (1 << 20)
    inodes: set = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    continue
                st2 = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st2.st_dev, st2.st_ino) not in inodes:
                inodes.add((st2.st_dev, st2.st_ino))
                total += st2.st_blocks * 512 / (1 << 20)
    return total


_HOST_TMP: list = []


def _host_tmp_dev() -> int:
    if not _HOST_TMP:
        try:
            _HOST_TMP.append(os.stat("/tmp").st_dev)
        except OSError:
            _HOST_TMP.append(-1)
    return _HOST_TMP[0]
