"""Can two sandboxed GPU workers hand device memory to each other without a host copy?

    PYTHONPATH=$PWD python3 scripts/device_ipc_probe.py [--sizes-mb 4,100] [--json OUT.json]

The evaluator's workers each run in a PID namespace of their own (``runner.sandbox``). CUDA's
legacy IPC handles (``cudaIpcGetMemHandle``, what ``torch.multiprocessing`` uses) do not open
across PID namespaces. The driver's virtual memory API can instead export an allocation as a
file descriptor (``cuMemExportToShareableHandle``, POSIX fd), which crosses a Unix socket like
the sealed memfds the workers hand each other now, and the reader can map it read-only
(``cuMemSetAccess`` with ``PROT_READ``).

Two processes, each in a PID namespace of its own (as the workers are), on one GPU:

* the writer makes an allocation, fills it, exports it and sends the descriptor;
* the reader imports it, maps it read-only, checks every byte, copies it into memory of its own;
* then: does the reader see a change the writer makes after handing it over (so the reader must
  copy before it judges)? Does the memory stay readable after the writer has released its
  handle and exited? Does a write through the read-only mapping fail?

Each step is timed; the summary is one JSON object. Needs a CUDA GPU and ``libcuda.so.1``.
"""

from __future__ import annotations

import argparse
import array
import ctypes
import json
import os
import socket
import subprocess
import sys
import time

from runner.worker.devmem import _Access, _Location, _Prop  # the driver's structures, as the evaluator uses them

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READ = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


class Driver:
    def __init__(self, device: int = 0):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.device = device

    def ok(self, what: str, rc: int) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what}: {name.value.decode() if name.value else rc}")

    def prop(self) -> _Prop:
        p = _Prop()
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        p.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, self.device)
        return p

    def granularity(self) -> int:
        g = ctypes.c_size_t()
        self.ok("cuMemGetAllocationGranularity",
                self.lib.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(self.prop()), 0))
        return g.value

    def create(self, size: int) -> int:
        h = ctypes.c_ulonglong()
        self.ok("cuMemCreate", self.lib.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size),
                                                    ctypes.byref(self.prop()), ctypes.c_ulonglong(0)))
        return h.value

    def export(self, handle: int) -> int:
        fd = ctypes.c_int(-1)
        self.ok("cuMemExportToShareableHandle", self.lib.cuMemExportToShareableHandle(
            ctypes.byref(fd), ctypes.c_ulonglong(handle), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            ctypes.c_ulonglong(0)))
        return fd.value

    def import_fd(self, fd: int) -> int:
        h = ctypes.c_ulonglong()
        self.ok("cuMemImportFromShareableHandle", self.lib.cuMemImportFromShareableHandle(
            ctypes.byref(h), ctypes.c_void_p(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return h.value

    def map(self, handle: int, size: int, flags: int) -> int:
        ptr = ctypes.c_ulonglong()
        self.ok("cuMemAddressReserve", self.lib.cuMemAddressReserve(
            ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_ulonglong(0),
            ctypes.c_ulonglong(0)))
        self.ok("cuMemMap", self.lib.cuMemMap(ctypes.c_ulonglong(ptr.value), ctypes.c_size_t(size),
                                              ctypes.c_size_t(0), ctypes.c_ulonglong(handle),
                                              ctypes.c_ulonglong(0)))
        acc = _Access(_Location(CU_MEM_LOCATION_TYPE_DEVICE, self.device), flags)
        self.ok("cuMemSetAccess", self.lib.cuMemSetAccess(ctypes.c_ulonglong(ptr.value), ctypes.c_size_t(size),
                                                          ctypes.byref(acc), ctypes.c_size_t(1)))
        return ptr.value

    def unmap(self, ptr: int, size: int) -> None:
        self.ok("cuMemUnmap", self.lib.cuMemUnmap(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size)))
        self.ok("cuMemAddressFree", self.lib.cuMemAddressFree(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size)))

    def release(self, handle: int) -> None:
        self.ok("cuMemRelease", self.lib.cuMemRelease(ctypes.c_ulonglong(handle)))


def as_tensor(ptr: int, nbytes: int):
    import torch

    class _Mem:
        __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                    "version": 3, "strides": None}
    return torch.as_tensor(_Mem(), device="cuda")


def pattern(nbytes: int, salt: int):
    import torch
    return ((torch.arange(nbytes, device="cuda", dtype=torch.int64) * 7 + salt) % 251).to(torch.uint8)


def send(sock: socket.socket, msg: dict, fd: int | None = None) -> None:
    data = (json.dumps(msg) + "\n").encode()
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))] if fd is not None else []
    sock.sendmsg([data], anc)


def recv(sock: socket.socket) -> tuple[dict, int | None]:
    fds = array.array("i")
    data, anc, _, _ = sock.recvmsg(1 << 16, socket.CMSG_LEN(fds.itemsize))
    fd = None
    for level, typ, payload in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            fd = fds[0]
    return json.loads(data.decode()), fd


def own_pid_namespace() -> str:
    """Into namespaces of its own as the evaluator's workers are (``runner.sandbox``: user,
    mount, PID and network namespaces), then fork; the child, the first process of the new PID
    namespace, mounts a /proc of its own (the driver needs it) and goes on. Returns how."""
    from runner import sandbox
    got = sandbox.enter_namespaces(pid=True, net=True)
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status))
    if got.get("pid") == "own namespace" and not sandbox.mount_own_proc():
        got["proc"] = "not mounted"
    return ", ".join(f"{k}: {v}" for k, v in got.items())


def writer(sock: socket.socket, sizes: list[int]) -> None:
    import torch
    torch.zeros(1, device="cuda")
    drv = Driver(torch.cuda.current_device())
    gran = drv.granularity()
    for nbytes in sizes:
        size = -(-nbytes // gran) * gran
        t = {}
        t0 = time.perf_counter()
        h = drv.create(size)
        t["create"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ptr = drv.map(h, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        t["map"] = time.perf_counter() - t0
        src = pattern(nbytes, 1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        mem = as_tensor(ptr, nbytes)
        mem.copy_(src)
        torch.cuda.synchronize()
        t["copy_in"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        fd = drv.export(h)
        t["export"] = time.perf_counter() - t0
        send(sock, {"nbytes": nbytes, "size": size, "writer_s": t, "ns": os.readlink("/proc/self/ns/pid")}, fd)
        os.close(fd)
        recv(sock)  # the reader has its copy
        mem.fill_(9)  # a change after the handing over: does the reader's mapping see it?
        torch.cuda.synchronize()
        send(sock, {"changed": True})
        recv(sock)
        del mem
        drv.unmap(ptr, size)
        drv.release(h)
    # The lifetime case: hand one over, release everything, and exit before the reader reads it.
    nbytes = sizes[0]
    size = -(-nbytes // gran) * gran
    h = drv.create(size)
    ptr = drv.map(h, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    as_tensor(ptr, nbytes).copy_(pattern(nbytes, 3))
    torch.cuda.synchronize()
    fd = drv.export(h)
    drv.unmap(ptr, size)
    drv.release(h)
    send(sock, {"nbytes": nbytes, "size": size, "exiting": True}, fd)
    os.close(fd)
    recv(sock)


def reader(sock: socket.socket, sizes: list[int], out: dict) -> None:
    import torch
    torch.zeros(1, device="cuda")
    drv = Driver(torch.cuda.current_device())
    for _ in sizes:
        msg, fd = recv(sock)
        nbytes, size = msg["nbytes"], msg["size"]
        t = {}
        t0 = time.perf_counter()
        h = drv.import_fd(fd)
        os.close(fd)
        t["import"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ptr = drv.map(h, size, CU_MEM_ACCESS_FLAGS_PROT_READ)
        t["map_read_only"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        mapped = as_tensor(ptr, nbytes)
        own = mapped.clone()
        torch.cuda.synchronize()
        t["copy_out"] = time.perf_counter() - t0
        right = bool(torch.equal(own, pattern(nbytes, 1)))
        send(sock, {"copied": True})
        recv(sock)
        sees_change = bool((mapped[:4096] == 9).all())
        copy_kept = bool(torch.equal(own, pattern(nbytes, 1)))
        del mapped
        drv.unmap(ptr, size)
        drv.release(h)
        send(sock, {"done": True})
        out.setdefault("sizes", []).append({
            "mb": round(nbytes / 2 ** 20, 1), "writer_s": msg["writer_s"], "reader_s": t,
            "every_byte_right": right, "reader_sees_a_later_change": sees_change,
            "own_copy_unchanged": copy_kept,
            "other_pid_namespace": msg["ns"] != os.readlink("/proc/self/ns/pid")})
    msg, fd = recv(sock)
    send(sock, {"ok": True})
    time.sleep(0.5)  # the writer exits meanwhile
    nbytes, size = msg["nbytes"], msg["size"]
    h = drv.import_fd(fd)
    os.close(fd)
    ptr = drv.map(h, size, CU_MEM_ACCESS_FLAGS_PROT_READ)
    mapped = as_tensor(ptr, nbytes)
    out["readable_after_the_writer_exited"] = bool(torch.equal(mapped.clone(), pattern(nbytes, 3)))
    # Last, since a fault ends this process's CUDA context: a write through the read-only map.
    try:
        mapped.fill_(1)
        torch.cuda.synchronize()
        out["write_through_read_only_map"] = "did not fail"
    except Exception as e:
        out["write_through_read_only_map"] = f"failed: {str(e).splitlines()[0][:160]}"


def child(role: str, fd: int, sizes: list[int]) -> None:
    how = own_pid_namespace()
    sock = socket.socket(fileno=fd)
    out: dict = {"role": role, "namespace": how}
    try:
        if role == "writer":
            writer(sock, sizes)
        else:
            reader(sock, sizes, out)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out), flush=True)
    os._exit(0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mb", default="4,100")
    ap.add_argument("--json")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [int(float(s) * 2 ** 20) for s in a.sizes_mb.split(",")]
    if a.role:
        child(a.role, a.fd, sizes)
        return 0
    w, r = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    procs = [subprocess.Popen([sys.executable, __file__, "--role", role, "--fd", str(s.fileno()),
                               "--sizes-mb", a.sizes_mb], pass_fds=[s.fileno()], stdout=subprocess.PIPE, text=True)
             for role, s in (("writer", w), ("reader", r))]
    w.close()
    r.close()
    outs = {}
    for p in procs:
        try:
            text, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
        for line in text.splitlines():
            try:
                d = json.loads(line)
                outs[d.pop("role")] = d
            except (ValueError, KeyError):
                pass
    print(json.dumps(outs, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(outs, f, indent=1)
    return 0 if outs.get("reader", {}).get("sizes") and "error" not in outs.get("reader", {}) else 1


if __name__ == "__main__":
    sys.exit(main())
