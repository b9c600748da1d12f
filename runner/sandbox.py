"""Containment of a worker and everything it starts (Linux; standard library only).

Used on both sides of the fork server (``runner.zygote``):

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
    """unshare(flags), as root or inside a new user namespace mapping this user to itself.
    Returns "root" | "user" (how it was done), or None."""
    uid, gid = os.getuid(), os.getgid()
    if libc().unshare(flags) == 0:
        return "root"
    if ctypes.get_errno() not in (errno.EPERM, errno.EINVAL, errno.ENOSPC, errno.EUSERS):
        return None
    if libc().unshare(CLONE_NEWUSER | flags) == 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        return "user"
    return None


def enter_namespaces(pid: bool = True, net: bool = True) -> dict[str, str]:
    """Give the calling process (the keeper) new PID (for its children, with a mount namespace
    for their own /proc) and network namespaces.

    Returns what holds: ``{"pid": "own namespace" | "shared", "net": ...}``. Tries plain
    ``unshare`` (root), then a user namespace that maps this user to itself (unprivileged, where
    the kernel allows it)."""
    got = {"pid": "shared", "net": "shared", "user": "shared"}
    want = (CLONE_NEWPID | CLONE_NEWNS if pid else 0) | (CLONE_NEWNET if net else 0)
    if not want:
        return got
    how = _unshare(want)
    if how is None and pid:  # a PID namespace is the part that may be refused: try without it
        pid, want = False, CLONE_NEWNET if net else 0
        how = _unshare(want) if want else None
    if how is not None:
        got.update(pid="own namespace" if pid else "shared", net="own namespace" if net else "shared",
                   user="own namespace" if how == "user" else "shared")
    return got



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


def kill_tree(root: int, include_root: bool = True, rounds: int = 100) -> int:
    """SIGKILL every process below ``root`` until none is left, then ``root``. The root goes
    last: as a subreaper it keeps the orphans of killed processes below it, so a process forked
    while the sweep runs is found by the next round. Returns how many were signalled."""
    signalled = 0
    for _ in range(rounds):
        pids = descendants(root)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                signalled += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    if include_root and alive(root):
        try:
            os.kill(root, signal.SIGKILL)
            signalled += 1
        except (ProcessLookupError, PermissionError):
            pass
    return signalled
