"""GPU memory handed between the two workers without a copy through the host (CUDA only).

Inside the worker (needs torch). The workers run in PID namespaces of their own
(``runner.sandbox``), across which CUDA's legacy IPC handles (``cudaIpcGetMemHandle``, what
``torch.multiprocessing`` uses) do not open. The driver's virtual memory API exports an
allocation as a file descriptor instead (``cuMemExportToShareableHandle``, a POSIX fd), which
crosses the pool's socket as the sealed memfds do (``runner.worker.channel``):

* the writer (``export``) makes an allocation of its own for each storage it hands over, copies
  the storage into it, exports it, and lets go of its mapping and handle at once: the
  descriptor alone keeps the memory alive, and nothing of the writer's own memory is reachable
  through it;
* the reader (``import_copy``) maps it **read-only** (a write through that mapping is an
  illegal address), copies it into memory of its own, and lets go of it. The writer could still
  change the memory it handed over (the memory has no seal), so the reader keeps only the copy
  it took when it received it, and reads nothing else from it.

Measured on an H100 by ``scripts/device_ipc_probe.py`` (two processes in PID namespaces of
their own): 4 MB there and copied in about 4 ms in all, 100 MB in about 2.5 ms; the memory stays
readable after the writer has exited. Inside the evaluator on an H100
(``scripts/gpu_device_handover_check.sh``): a 100 MB copy's run phase 0.029 s against 0.308 s
through the host, no check or evaluation slower, the GPU tests and the attack corpus passing
with it. On AMD GPUs (HIP), where the driver refuses, and where turned off
(``GEAK_DEVICE_HANDOVER=0``), ``available()`` is False and the storages cross through the host
(``runner.worker.exchange``).
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

_POSIX_FD = 1
_PINNED = 1
_ON_DEVICE = 1
_READ = 1
_READ_WRITE = 3


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class DeviceMemoryError(Exception):
    pass


_lib = None
_state: dict[str, object] = {}


def _driver():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
    return _lib


def _ok(what: str, rc: int) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        try:
            _driver().cuGetErrorName(rc, ctypes.byref(name))
        except Exception:
            pass
        raise DeviceMemoryError(f"{what}: {name.value.decode() if name.value else rc}")


def _prop(ordinal: int) -> _Prop:
    p = _Prop()
    p.type = _PINNED
    p.requestedHandleTypes = _POSIX_FD
    p.location = _Location(_ON_DEVICE, ordinal)
    return p


def _granularity(ordinal: int) -> int:
    key = f"granularity-{ordinal}"
    if key not in _state:
        g = ctypes.c_size_t()
        _ok("cuMemGetAllocationGranularity",
            _driver().cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(_prop(ordinal)), 0))
        _state[key] = g.value
    return int(_state[key])  # type: ignore[arg-type]


def _ordinal(device) -> int:
    """The driver's ordinal of a torch CUDA device (the same numbering: both follow
    ``CUDA_VISIBLE_DEVICES``)."""
    import torch
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def uuid(device) -> str:
    import torch
    return str(torch.cuda.get_device_properties(_ordinal(device)).uuid)


ON_BY_DEFAULT = True
"""Whether large CUDA storages cross as device memory unless ``GEAK_DEVICE_HANDOVER`` says
otherwise (``0``: through the host). On since the hand-over ran inside the evaluator on an H100
(docs/benchmarks.md, "Device memory between the workers")."""


def wanted() -> bool:
    v = os.environ.get("GEAK_DEVICE_HANDOVER")
    return ON_BY_DEFAULT if v is None else v == "1"


def available(device) -> bool:
    """Whether storages on ``device`` can be handed over as device memory: wanted
    (``ON_BY_DEFAULT`` unless ``GEAK_DEVICE_HANDOVER=0``), a CUDA device (not HIP), the driver's
    virtual memory API, and POSIX-fd handles. Decided once per process; otherwise the storages
    cross through the host."""
    if "available" in _state:
        return bool(_state["available"])
    ok = False
    try:
        import torch
        if wanted() and torch.device(device).type == "cuda" \
                and torch.version.cuda is not None and getattr(torch.version, "hip", None) is None:
            ordinal = _ordinal(device)
            supported = ctypes.c_int(0)
            # CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
            # CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102
            vmm = ctypes.c_int(0)
            dev = ctypes.c_int(0)
            _ok("cuDeviceGet", _driver().cuDeviceGet(ctypes.byref(dev), ordinal))
            _ok("cuDeviceGetAttribute", _driver().cuDeviceGetAttribute(ctypes.byref(vmm), 102, dev))
            _ok("cuDeviceGetAttribute", _driver().cuDeviceGetAttribute(ctypes.byref(supported), 103, dev))
            ok = bool(vmm.value and supported.value) and _granularity(ordinal) > 0
    except Exception:
        ok = False
    _state["available"] = ok
    return ok


def _map(handle: int, size: int, ordinal: int, flags: int) -> int:
    lib = _driver()
    ptr = ctypes.c_ulonglong()
    _ok("cuMemAddressReserve", lib.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                                       ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)))
    try:
        _ok("cuMemMap", lib.cuMemMap(ctypes.c_ulonglong(ptr.value), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                     ctypes.c_ulonglong(handle), ctypes.c_ulonglong(0)))
        try:
            acc = _Access(_Location(_ON_DEVICE, ordinal), flags)
            _ok("cuMemSetAccess", lib.cuMemSetAccess(ctypes.c_ulonglong(ptr.value), ctypes.c_size_t(size),
                                                     ctypes.byref(acc), ctypes.c_size_t(1)))
        except BaseException:
            lib.cuMemUnmap(ctypes.c_ulonglong(ptr.value), ctypes.c_size_t(size))
            raise
    except BaseException:
        lib.cuMemAddressFree(ctypes.c_ulonglong(ptr.value), ctypes.c_size_t(size))
        raise
    return ptr.value


def _unmap(ptr: int, size: int) -> None:
    lib = _driver()
    lib.cuMemUnmap(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
    lib.cuMemAddressFree(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))


def _bytes_at(ptr: int, nbytes: int, device):
    """A uint8 tensor over ``nbytes`` at device address ``ptr`` (not owning it)."""
    import torch

    class _Mem:
        __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                    "version": 3, "strides": None}
    return torch.as_tensor(_Mem(), device=device)


def export(data, device) -> tuple[int, int]:
    """A copy of ``data`` (a uint8 CUDA tensor) in an allocation of its own, as a descriptor the
    other process can import: (fd, the allocation's size). Nothing else of this process's memory
    is in that allocation; this side keeps no mapping of it."""
    import torch
    ordinal = _ordinal(device)
    nbytes = int(data.numel())
    g = _granularity(ordinal)
    size = max(g, -(-nbytes // g) * g)
    lib = _driver()
    handle = ctypes.c_ulonglong()
    _ok("cuMemCreate", lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(_prop(ordinal)),
                                       ctypes.c_ulonglong(0)))
    try:
        ptr = _map(handle.value, size, ordinal, _READ_WRITE)
        try:
            with torch.cuda.device(ordinal):
                _bytes_at(ptr, nbytes, torch.device("cuda", ordinal)).copy_(data)
                torch.cuda.current_stream().synchronize()
        finally:
            _unmap(ptr, size)
        fd = ctypes.c_int(-1)
        _ok("cuMemExportToShareableHandle", lib.cuMemExportToShareableHandle(
            ctypes.byref(fd), ctypes.c_ulonglong(handle.value), _POSIX_FD, ctypes.c_ulonglong(0)))
    finally:
        lib.cuMemRelease(ctypes.c_ulonglong(handle.value))
    os.set_inheritable(fd.value, False)
    return fd.value, size


def import_copy(fd: int, nbytes: int, size: int, device) -> "object":
    """The ``nbytes`` handed over as ``fd`` (an allocation of ``size`` bytes), mapped read-only
    and copied at once into a uint8 tensor of this process's own on ``device``. ``fd`` stays
    open (the caller's)."""
    import torch
    if not (0 <= nbytes <= size) or size <= 0 or size > 1 << 40:
        raise DeviceMemoryError(f"a device part of {nbytes} bytes in an allocation of {size}")
    ordinal = _ordinal(device)
    lib = _driver()
    handle = ctypes.c_ulonglong()
    _ok("cuMemImportFromShareableHandle", lib.cuMemImportFromShareableHandle(
        ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD))
    try:
        ptr = _map(handle.value, size, ordinal, _READ)  # fails if the allocation is smaller than said
        try:
            dev = torch.device("cuda", ordinal)
            with torch.cuda.device(ordinal):
                own = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                own.copy_(_bytes_at(ptr, nbytes, dev))
                torch.cuda.current_stream().synchronize()
        finally:
            _unmap(ptr, size)
    finally:
        lib.cuMemRelease(ctypes.c_ulonglong(handle.value))
    return own


def device_for(uuid_: str) -> Optional[str]:
    """The torch device of this process with that UUID, or None."""
    import torch
    for i in range(torch.cuda.device_count()):
        if str(torch.cuda.get_device_properties(i).uuid) == uuid_:
            return f"cuda:{i}"
    return None
