"""What crosses between the reference's and the candidate's processes, and how it is made safe.

Inside the worker (needs torch).

* ``save`` / ``load``: structures of tensors and plain values in shared memory: a sealed memfd
  per item, handed through the pool (``runner.worker.channel``), mapped copy-on-write by the reader.
  Loading uses ``torch.load(weights_only=True)``, which builds tensors and plain containers
  only and never runs code, so what candidate code wrote cannot do anything in the process
  that judges it; the seals mean its writer cannot change it after handing it over. Inputs keep their exact layout (strides, storage
  offsets, views of one storage stay views of one storage).
* ``to_plain``: outputs as plain structures (tensors, tuples, lists, dicts, numbers, strings,
  ``None``); anything else becomes a tagged description, on both sides alike.
* ``clone_layout``: a deep copy that keeps every tensor's layout and the sharing between them.
* ``Allocations``: a ``TorchDispatchMode`` that fills every uninitialised allocation
  (``torch.empty`` and friends) with a byte pattern, so that an output element nothing wrote is
  the pattern, never a stale value. Run the reference under two patterns and the elements that
  hold each pattern are the ones it leaves unwritten (``unwritten``): they are no part of the
  answer and are left out of the comparison (``leave_out``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import channel, devmem
from .compare import compare, map_tensors, outside
from ..schema import UNWRITTEN, VARYING

PATTERN_A = 0xFF  # NaN for every float type, -1 for signed integers
PATTERN_B = 0x7F  # a different value of every type

_EMPTY_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
              "empty_permuted"}


# --------------------------------------------------------------------------- structures


def to_plain(obj: Any, clone: bool = True) -> Any:
    """Outputs as plain data. Tensors are detached (and copied, so that later writes by the
    code under test cannot change what was recorded). An object of another class is what it
    holds (``_object``), never the name of the file its class was defined in: the same
    computation under another file name gets the same record."""
    return _plain(obj, clone, set(), 0)


MAX_OBJECT_DEPTH = 6  # objects inside objects: deeper ones are compared by class name alone
MAX_OBJECT_FIELDS = 64


def _plain(obj: Any, clone: bool, seen: set, depth: int) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        return t.clone() if clone else t
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple: by field
        return {"<object>": type(obj).__qualname__,
                "fields": {f: _plain(v, clone, seen, depth + 1) for f, v in zip(obj._fields, obj)}}
    if isinstance(obj, tuple):
        return tuple(_plain(o, clone, seen, depth) for o in obj)
    if isinstance(obj, list):
        return [_plain(o, clone, seen, depth) for o in obj]
    if isinstance(obj, dict):
        return {(k if isinstance(k, (str, int)) else repr(k)): _plain(v, clone, seen, depth) for k, v in obj.items()}
    if obj is None or isinstance(obj, (bool, int, float, str, complex, bytes)):
        return obj
    if isinstance(obj, (torch.dtype, torch.device)):
        return str(obj)
    try:
        import numpy as np
        if isinstance(obj, np.ndarray):
            return torch.from_numpy(obj.copy())
        if isinstance(obj, np.generic):
            return obj.item()
    except ImportError:
        pass
    return _object(obj, clone, seen, depth)


_LIBRARY_PLACES: list[str] = []


def _users_class(cls: type) -> bool:
    """Whether ``cls`` was defined in the user's code (a file of the request's trees), not in
    the standard library or an installed package: only those are compared by attribute (a
    library object's attributes hold caches, handles and paths that differ run to run)."""
    import sys
    if not _LIBRARY_PLACES:
        import sysconfig
        places = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(__file__))}
        places |= {v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")}
        _LIBRARY_PLACES.extend(os.path.realpath(p).rstrip("/") + "/" for p in places if p)
    name = getattr(cls, "__module__", "") or ""
    if not name or name.split(".")[0] in sys.stdlib_module_names or name == "builtins":
        return False
    f = getattr(sys.modules.get(name), "__file__", None)
    if f is None:
        # The request's trees are imported by the worker under their own names and are not all
        # left in sys.modules; an installed package always is, with its file.
        return name.split(".")[0] not in sys.modules or getattr(sys.modules[name.split(".")[0]], "__file__", None) is None
    return not os.path.realpath(f).startswith(tuple(_LIBRARY_PLACES))


def _addresses(fields: dict) -> dict[str, str]:
    """The integer fields that are addresses inside the memory of a tensor the same object holds
    (a view object's ``data_ptr``, as TritonBench-G's ``StridedBuffer`` keeps one: its base
    tensor's ``data_ptr()`` plus an offset), each as that tensor's field and the offset, not the
    number: where an allocation lands differs between processes and between runs, the offset
    does not. Any other field is left out (compared as it is)."""
    ints = {k: v for k, v in fields.items() if type(v) is int and v >= 4096}
    if not ints:
        return {}
    spans = []
    for name, t in fields.items():
        if isinstance(t, torch.Tensor):
            try:
                storage = t.untyped_storage()
                spans.append((name, storage.data_ptr(), storage.nbytes()))
            except Exception:
                continue
    found = {}
    for k, v in ints.items():
        for name, base, size in spans:
            if base and base <= v <= base + size:
                found[k] = f"<address in {name}'s memory + {v - base} bytes>"
                break
    return found


def _object(obj: Any, clone: bool, seen: set, depth: int) -> dict:
    """An object as what it holds: its class's name within its module (``__qualname__``: the
    module's name is the file's, which a candidate's copy changes), and its state — an
    ``nn.Module`` by its parameters, buffers and training flag, a dataclass by its fields, any
    other object by its attributes (``vars``), recursively. An object with no attributes (a
    built-in's, a C extension's) is its ``repr`` without addresses and module paths."""
    cls = type(obj)
    out: dict[str, Any] = {"<object>": cls.__qualname__}
    if id(obj) in seen or depth >= MAX_OBJECT_DEPTH:
        return out  # a cycle, or deep enough: the class name alone
    seen = seen | {id(obj)}
    fields: Optional[dict] = None
    try:
        # A library's object (none of these) keeps fields None: its class name and repr, as it prints.
        if isinstance(obj, torch.nn.Module):
            fields = {"training": obj.training,
                      "parameters": {n: p.detach().clone() if clone else p.detach()
                                     for n, p in obj.named_parameters()},
                      "buffers": {n: b.detach().clone() if clone else b.detach() for n, b in obj.named_buffers()}}
        elif dataclasses.is_dataclass(obj):
            raw = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            where = _addresses(raw)
            fields = {k: where[k] if k in where else _plain(v, clone, seen, depth + 1) for k, v in raw.items()}
        elif _users_class(cls):
            state = getattr(obj, "__dict__", None)
            if isinstance(state, dict) and state:
                items = [(k, v) for k, v in state.items()
                         if isinstance(k, str) and not k.startswith("__") and not callable(v)][:MAX_OBJECT_FIELDS]
                where = _addresses(dict(items))
                fields = {k: where[k] if k in where else _plain(v, clone, seen, depth + 1) for k, v in sorted(items)}
    except Exception:
        fields = None
    if fields is not None:
        out["fields"] = fields
        return out
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))  # addresses differ between processes
    module = getattr(cls, "__module__", "") or ""
    if module and module not in ("builtins",):
        text = text.replace(module + "." + cls.__qualname__, cls.__qualname__)
    out["repr"] = text if len(text) <= 200 else text[:197] + "..."
    return out


def clone_layout(obj: Any, memo: Optional[dict] = None) -> Any:
    """Deep copy with every tensor's size, strides and storage offset kept, and tensors that
    share a storage still sharing one copy of it. ``requires_grad`` is kept on floating
    tensors (as fresh leaves)."""
    memo = {} if memo is None else memo

    def one(t: torch.Tensor) -> torch.Tensor:
        src = t.detach()
        try:
            storage = src.untyped_storage()
            key = (storage.data_ptr(), storage.nbytes(), src.device)
        except Exception:
            key = None
        if key is None or src.layout != torch.strided:
            out = src.clone()
        else:
            if key not in memo:
                memo[key] = storage.clone()
            out = torch.empty((0,), dtype=src.dtype, device=src.device)
            out.set_(memo[key], src.storage_offset(), src.size(), src.stride())
        if t.requires_grad and (out.is_floating_point() or out.is_complex()):
            out.requires_grad_(True)
        return out

    return map_tensors(obj, one)


def _walk(obj: Any, is_leaf, path: str = "") -> list[tuple[str, Any]]:
    """(path, value) for every value in a structure of lists, tuples and dicts for which
    ``is_leaf`` holds, in a fixed order."""
    if is_leaf(obj):
        return [(path, obj)]
    out: list[tuple[str, Any]] = []
    if isinstance(obj, (list, tuple)):
        for i, o in enumerate(obj):
            out += _walk(o, is_leaf, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k in obj:
            out += _walk(obj[k], is_leaf, f"{path}[{k!r}]")
    return out


def leaves(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, tensor) for every tensor in a structure, in a fixed order."""
    return _walk(obj, lambda o: isinstance(o, torch.Tensor), path)


# --------------------------------------------------------------------------- timed calls

TRANSFER_KEY = "__geak_transfer__"


class NotTransferable(Exception):
    """A call argument that cannot be handed to the other process (its type, in words)."""


def to_transfer(obj: Any, home: str) -> Any:
    """A call's arguments as data ``load`` accepts, for timing them in the candidate's process.

    Tensors, plain values and lists, tuples and dicts of them are kept. Two more kinds that
    launching wrappers take are written as tagged dicts: a Triton dtype (``tl.float8e5``) by its
    name, and an instance of a class defined in the file under test (``home``, its module's name:
    a ``Config`` holding block sizes) by its class's name and its attributes; an ``nn.Module`` of
    such a class or of ``torch.nn`` by its class, parameters, buffers, submodules and public
    attributes. Anything else raises ``NotTransferable``."""
    if obj is None or isinstance(obj, (bool, int, float, str, complex, torch.Tensor, torch.dtype, torch.device)):
        return obj
    if type(obj) in (list, tuple):
        return type(obj)(to_transfer(o, home) for o in obj)
    if type(obj) is dict:
        if TRANSFER_KEY in obj or not all(isinstance(k, (str, int)) for k in obj):
            raise NotTransferable("a dict with other keys than names and numbers")
        return {k: to_transfer(v, home) for k, v in obj.items()}
    cls = type(obj)
    if cls.__module__ == "triton.language.core" and cls.__name__ == "dtype":
        return {TRANSFER_KEY: "triton.dtype", "name": str(obj.name)}
    if isinstance(obj, torch.nn.Module):
        return _module_to_transfer(obj, home)
    state = getattr(obj, "__dict__", None)
    if cls.__module__ == home and "." not in cls.__qualname__ and type(state) is dict \
            and not hasattr(cls, "__slots__"):
        return {TRANSFER_KEY: "object", "class": cls.__qualname__, "state": to_transfer(dict(state), home)}
    raise NotTransferable(f"{cls.__module__}.{cls.__qualname__}")


def _module_to_transfer(obj: "torch.nn.Module", home: str) -> dict:
    """An ``nn.Module`` of a class defined in the file under test, or one of ``torch.nn``'s own
    (an ``nn.LayerNorm`` a wrapper is handed), as its class's name, its parameters, buffers and
    submodules, and its other public attributes; ``from_transfer`` builds it again without
    running its ``__init__``."""
    cls = type(obj)
    if cls.__module__ == home and "." not in cls.__qualname__:
        where = "home"
    elif cls.__module__.startswith("torch.nn.") and getattr(torch.nn, cls.__name__, None) is cls:
        where = "torch.nn"
    else:
        raise NotTransferable(f"{cls.__module__}.{cls.__qualname__}")
    attrs = {k: v for k, v in vars(obj).items() if not k.startswith("_") and k != "training"}
    try:
        attrs = to_transfer(attrs, home)
    except NotTransferable as e:
        raise NotTransferable(f"{cls.__module__}.{cls.__qualname__} (it holds a {e})") from None
    return {TRANSFER_KEY: "module", "class": cls.__qualname__ if where == "home" else cls.__name__, "from": where,
            "training": bool(obj.training), "attrs": attrs,
            "params": {k: None if v is None else (v.detach(), bool(v.requires_grad))
                       for k, v in obj._parameters.items()},
            "buffers": {k: None if v is None else v.detach() for k, v in obj._buffers.items()},
            "persistent": sorted(k for k in obj._buffers if k not in obj._non_persistent_buffers_set),
            "modules": {k: None if v is None else _module_to_transfer(v, home) for k, v in obj._modules.items()}}


def _class_named(name: str, modules) -> type:
    """The class ``name`` in the first of ``modules`` that defines one."""
    cls = next((c for c in (getattr(m, name, None) for m in modules) if isinstance(c, type)), None)
    if cls is None:
        raise ExchangeError(f"the timed call passes a {name}, which "
                            f"{' or '.join(m.__name__ for m in modules)} does not define")
    return cls


def _module_from_transfer(obj: dict, *modules) -> "torch.nn.Module":
    name = obj["class"]
    cls = getattr(torch.nn, name, None) if obj.get("from") == "torch.nn" else _class_named(name, modules)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ExchangeError(f"the timed call passes a {name}, which is not an nn.Module here")
    inst = cls.__new__(cls)
    torch.nn.Module.__init__(inst)
    for k, v in (obj.get("params") or {}).items():
        inst.register_parameter(k, None if v is None else torch.nn.Parameter(v[0], requires_grad=v[1]))
    keep = set(obj.get("persistent") or [])
    for k, v in (obj.get("buffers") or {}).items():
        inst.register_buffer(k, v, persistent=k in keep)
    for k, v in (obj.get("modules") or {}).items():
        inst.add_module(k, None if v is None else _module_from_transfer(v, *modules))
    for k, v in from_transfer(obj.get("attrs") or {}, *modules).items():
        setattr(inst, k, v)
    inst.training = bool(obj.get("training"))
    return inst


def from_transfer(obj: Any, *modules) -> Any:
    """``to_transfer``'s data as arguments again, in this process: a tagged object is made an
    instance of the class of that name in the first of ``modules`` that defines one, with the
    attributes it had."""
    if type(obj) in (list, tuple):
        return type(obj)(from_transfer(o, *modules) for o in obj)
    if type(obj) is not dict:
        return obj
    kind = obj.get(TRANSFER_KEY)
    if kind == "triton.dtype":
        import triton.language as tl
        return tl.dtype(obj["name"])
    if kind == "module":
        return _module_from_transfer(obj, *modules)
    if kind == "object":
        cls = _class_named(obj["class"], modules)
        inst = cls.__new__(cls)
        inst.__dict__.update(from_transfer(obj["state"], *modules))
        return inst
    return {k: from_transfer(v, *modules) for k, v in obj.items()}


# --------------------------------------------------------------------------- files


SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
"""What a memfd handed to the other side is sealed against: nothing, not even its writer, can
change it once sent (the pool refuses one that is not sealed so)."""


OFF_DEVICE_MIN_BYTES = 1 << 20
"""A device storage at least this large leaves the device through ``_off_device``."""

_AS_DEVICE: dict[int, str] = {}
"""During ``save``: a host copy's address -> the device its storage was copied from."""


def _tag_as_device(storage) -> Optional[str]:
    """``torch.save``'s location tag for a host copy made by ``_off_device``: the device it came
    from, so that the reader finds the tensor where the writer had it, as if saved from there."""
    if not _AS_DEVICE:
        return None
    try:
        return _AS_DEVICE.get(storage.data_ptr())
    except Exception:
        return None


torch.serialization.register_package(5, _tag_as_device, lambda obj, location: None)


def _off_device(obj: Any) -> Any:
    """``obj`` with each large device tensor replaced by a host copy of the same layout, views of
    one storage still views of one storage. ``torch.save`` copies a device storage into new host
    memory (``storage.cpu()``), which faults its pages in one at a time as the copy lands: about
    1.5 GB/s on an H100, against 14 GB/s into memory written before
    (``scripts/device_copy_probe.py``). Here the memory is written first by all of torch's
    threads, then copied into. Tagged with the device they came from (``_tag_as_device``)."""
    copies: dict[tuple, Any] = {}

    def one(t: torch.Tensor) -> torch.Tensor:
        if t.device.type in ("cpu", "meta") or type(t) is not torch.Tensor or t.layout != torch.strided \
                or t.is_quantized or t.requires_grad:
            return t
        st = t.untyped_storage()
        n = st.nbytes()
        if n < OFF_DEVICE_MIN_BYTES:
            return t
        key = (st.data_ptr(), n)
        host = copies.get(key)
        if host is None:
            buf = torch.empty(n, dtype=torch.uint8)
            buf.fill_(0)  # fault the pages in, in parallel
            buf.copy_(torch.empty(0, dtype=torch.uint8, device=t.device).set_(st))
            host = copies[key] = buf.untyped_storage()
            _AS_DEVICE[host.data_ptr()] = str(t.device)
        return torch.empty(0, dtype=t.dtype).set_(host, t.storage_offset(), t.size(), t.stride())

    return map_tensors(obj, one)


DEVICE_PART_MIN_BYTES = 8 << 20
"""A CUDA storage at least this large crosses as device memory (``runner.worker.devmem``), not
through the host. Below it the host copy costs less than making, exporting, importing and
mapping an allocation (about 2.5 ms for a pair of processes on an H100)."""

MAX_DEVICE_PARTS = 32
"""The most storages of one structure that cross as device memory (each is a descriptor, and a
message carries at most ``channel.MAX_FDS``); the others go through the host."""

FORMAT = "geak-exchange/2"
"""What ``save`` writes: ``(FORMAT, parts, obj)``, ``parts`` describing the storages that cross
as device memory and where in ``obj`` each tensor of them goes."""

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
    *(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                  "uint16", "uint32", "uint64") if hasattr(torch, n)))}


def part_name(name: str, k: int) -> str:
    """The name the ``k``-th device part of the structure handed as ``name`` crosses under."""
    return f"{name}.dev{k}"


def _device_parts(obj: Any) -> tuple[Any, dict, list]:
    """``obj`` with each tensor of a large CUDA storage replaced by an empty host tensor, and
    ``parts``: ``{"visits": [[visit, part, dtype, offset, size, stride], ...], "parts":
    [{"nbytes", "device"}, ...]}``, ``visit`` counting the tensors of ``obj`` in
    ``map_tensors``' order (views of one storage share a part). Also the storages, as uint8
    tensors. Nothing is replaced where device memory cannot be handed over."""
    visits: list = []
    parts: list = []
    storages: list = []
    index: dict[tuple, int] = {}
    count = [0]

    def one(t: torch.Tensor) -> torch.Tensor:
        i = count[0]
        count[0] += 1
        if t.device.type != "cuda" or type(t) is not torch.Tensor or t.layout != torch.strided \
                or t.is_quantized or t.requires_grad or str(t.dtype).removeprefix("torch.") not in _DTYPES:
            return t
        st = t.untyped_storage()
        n = st.nbytes()
        if n < DEVICE_PART_MIN_BYTES or not devmem.available(t.device):
            return t
        key = (st.data_ptr(), n, str(t.device))
        k = index.get(key)
        if k is None:
            if len(parts) >= MAX_DEVICE_PARTS:
                return t
            k = index[key] = len(parts)
            parts.append({"nbytes": n, "device": devmem.uuid(t.device)})
            storages.append(torch.empty(0, dtype=torch.uint8, device=t.device).set_(st))
        visits.append([i, k, str(t.dtype).removeprefix("torch."), t.storage_offset(), list(t.size()), list(t.stride())])
        return torch.empty(0, dtype=t.dtype)

    out = map_tensors(obj, one)
    return out, {"visits": visits, "parts": parts}, storages


class Kept:
    """A structure handed over and kept to be handed again (``save(..., keep=True)``): its
    sealed memfd, and a private copy of each storage that crosses as device memory. Each
    hand-over exports a fresh allocation from that copy: a reader can map what it is handed
    writable (the driver cannot forbid it), so no two readers ever share one."""

    def __init__(self, fd: int, storages: list):
        self.fd = fd
        self.storages = [s.clone() for s in storages]

    @property
    def host_bytes(self) -> int:
        return os.fstat(self.fd).st_size

    @property
    def device_bytes(self) -> int:
        return sum(int(s.numel()) for s in self.storages)

    def close(self) -> None:
        self.storages = []
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


def _hand_parts(name: str, storages: list, parts: dict) -> None:
    for k, (st, part) in enumerate(zip(storages, parts["parts"])):
        fd, size = devmem.export(st, st.device)
        if part.setdefault("size", size) != size:
            os.close(fd)
            raise devmem.DeviceMemoryError(f"{name}: a device part exported as {size} bytes, not {part['size']}")
        channel.hand(part_name(name, k), fd)


def _drop_parts(name: str, n: int) -> None:
    """Take back the device parts of ``name`` not yet sent (an export failed part-way)."""
    for k in range(n):
        old = channel._outbox.pop(part_name(name, k), None)
        if old is not None:
            os.close(old)


def save(path: str, obj: Any, keep: bool = False) -> Optional[Kept]:
    """Hand ``obj`` to the other side as ``basename(path)``: written (``torch.save``) into a
    memfd, sealed, and sent with this side's next reply; the pool passes it on. Large CUDA
    storages cross as device memory beside it (``runner.worker.devmem``), each as
    ``part_name(name, k)``. With ``keep``, what is needed to hand the same again
    (``hand_again``) instead of writing the same data once more."""
    name = os.path.basename(path)
    obj, parts, storages = _device_parts(obj)
    if storages:
        try:
            _hand_parts(name, storages, parts)
        except devmem.DeviceMemoryError:  # through the host after all
            _drop_parts(name, len(storages))
            obj = _restore(obj, parts, storages)
            parts, storages = {"visits": [], "parts": []}, []
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    crc = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)  # a checksum of memory that nothing else can change
    try:
        with open(fd, "wb", closefd=False) as f:
            torch.save((FORMAT, parts, _off_device(obj)), f)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    finally:
        _AS_DEVICE.clear()
        torch.serialization.set_crc32_options(crc)
    kept = Kept(os.dup(fd), storages) if keep else None
    channel.hand(name, fd)
    return kept


def hand_again(path: str, kept: Kept) -> None:
    """Hand what ``kept`` holds (from ``save(..., keep=True)``) again, as ``basename(path)``:
    the same sealed memfd, and a fresh export of each device part."""
    name = os.path.basename(path)
    if kept.storages:
        try:
            _hand_parts(name, kept.storages, {"parts": [{} for _ in kept.storages]})
        except devmem.DeviceMemoryError:  # no allocation to be had now: written out again instead
            _drop_parts(name, len(kept.storages))
            data = torch.load(f"/proc/self/fd/{kept.fd}", weights_only=True, mmap=True)
            save(path, _restore(data[2], _checked_parts(data[1]), kept.storages))
            return
    channel.hand(name, os.dup(kept.fd))


class ExchangeError(Exception):
    pass


def _restore(obj: Any, parts: dict, storages: list) -> Any:
    """``obj`` with the tensors ``_device_parts`` replaced put back, each a view of its part's
    storage (``storages``: uint8 tensors) with the layout recorded. A layout that reaches past
    its storage is refused (ValueError): ``set_`` would grow the storage to fit."""
    at = {v[0]: v for v in parts["visits"]}
    count = [0]

    def one(t: torch.Tensor) -> torch.Tensor:
        i = count[0]
        count[0] += 1
        v = at.get(i)
        if v is None:
            return t
        _, k, dtype, offset, size, stride = v
        st = storages[k]
        dt = _DTYPES[dtype]
        ext = _extent(size, stride)
        end = (offset + ext) * dt.itemsize if ext else 0
        if end > st.numel() or len(size) != len(stride):  # set_ would grow the storage instead
            raise ValueError(f"a {dtype} tensor reaching {end} bytes into a part of {st.numel()}")
        return torch.empty(0, dtype=dt, device=st.device).set_(st.untyped_storage(), offset, size, stride)

    return map_tensors(obj, one)


def _checked_parts(parts: Any) -> dict:
    """``parts`` as the other side wrote it, every field of the expected type (else ValueError)."""
    if not isinstance(parts, dict) or not isinstance(parts.get("visits"), list) or not isinstance(parts.get("parts"), list):
        raise ValueError("no description of its device parts")
    n = len(parts["parts"])
    for p in parts["parts"]:
        if not (isinstance(p, dict) and isinstance(p.get("nbytes"), int) and isinstance(p.get("size"), int)
                and isinstance(p.get("device"), str)):
            raise ValueError("a device part described wrongly")
    for v in parts["visits"]:
        if not (isinstance(v, list) and len(v) == 6 and all(isinstance(x, int) for x in v[:2]) and 0 <= v[1] < n
                and v[2] in _DTYPES and isinstance(v[3], int) and v[3] >= 0
                and all(isinstance(x, list) and all(isinstance(y, int) and y >= 0 for y in x) for x in v[4:])
                and len(v[4]) == len(v[5])):
            raise ValueError("a tensor of a device part described wrongly")
    return parts


def _import_parts(name: str, parts: dict, device: Optional[str]) -> list:
    """Each device part described, copied into this process's own memory. A writer can hand
    over more than this side can hold: past half of the GPU memory free here, nothing is taken
    (the error is the writer's, not an out-of-memory failure of this side)."""
    storages = []
    total = sum(p["nbytes"] for p in parts["parts"])
    if devmem.available("cuda"):
        free, _ = torch.cuda.mem_get_info()
        if total > free // 2:
            raise ExchangeError(f"{name}: {total} bytes of device memory handed over, more than half of "
                                f"the {free} free here")
    for k, p in enumerate(parts["parts"]):
        fd = channel.received(part_name(name, k))
        if fd is None:
            raise ExchangeError(f"{part_name(name, k)} was not handed over")
        where = devmem.device_for(p["device"]) if devmem.available("cuda") else None
        if where is None:
            raise ExchangeError(f"{name}: device memory of a GPU this process does not have ({p['device']})")
        try:
            own = devmem.import_copy(fd, p["nbytes"], p["size"], where)
        except devmem.DeviceMemoryError as e:
            raise ExchangeError(f"{part_name(name, k)}: {e}") from None
        storages.append(own if device is None else own.to(device))
    return storages


def load(path: str, device: Optional[str] = None) -> Any:
    """What the other side handed as ``basename(path)``: tensors and plain data only
    (``weights_only``: nothing in it can run code), mapped rather than copied (copy-on-write:
    what this side changes in them stays its own); its device parts copied into this process's
    own memory as they arrive (``runner.worker.devmem``)."""
    name = os.path.basename(path)
    fd = channel.received(name)
    if fd is None:
        raise ExchangeError(f"{name} was not written")
    try:
        data = torch.load(f"/proc/self/fd/{fd}", map_location=device, weights_only=True, mmap=True)
        if not (isinstance(data, tuple) and len(data) == 3 and data[0] == FORMAT):
            raise ValueError(f"not written by this exchange ({FORMAT})")
        parts = _checked_parts(data[1])
    except Exception as e:
        raise ExchangeError(f"{name} holds something other than tensors and plain "
                            f"values ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    if not parts["parts"]:
        return data[2]
    storages = _import_parts(name, parts, device)
    try:
        return _restore(data[2], parts, storages)
    except Exception as e:
        raise ExchangeError(f"{name}: a tensor outside its device part ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None


SAME_AS_GIVEN = "<same as given>"


def same_as_given() -> dict:
    """What a candidate's record holds for an input it left exactly as it was handed (see
    ``unchanged_inputs``): the judge, who holds those inputs, compares them instead. It is a
    claim of the candidate's process like any value in its record, and no stronger: that
    process could as well write the handed bytes back."""
    return {SAME_AS_GIVEN: True}


def is_same_as_given(x: Any) -> bool:
    return isinstance(x, dict) and len(x) == 1 and x.get(SAME_AS_GIVEN) is True


GIVEN_COPY_SHARE = 4
"""``given_copies`` copies a call's tensors only while they take at most 1/this of the free device
memory (on the CPU, of ``GIVEN_COPY_MAX_BYTES``)."""
GIVEN_COPY_MAX_BYTES = 1 << 30


def given_copies(flat: list) -> Optional[list]:
    """Copies of a call's top-level tensor arguments as handed (None for the other arguments),
    so that ``unchanged_inputs`` can tell which the call left alone; None when copying them
    would take too much memory."""
    ts = [x for x in flat if isinstance(x, torch.Tensor)]
    if not ts:
        return None
    total = sum(t.numel() * t.element_size() for t in ts)
    dev = ts[0].device
    if dev.type == "cuda":
        try:
            free, _ = torch.cuda.mem_get_info(dev)
        except Exception:
            return None
        if total * GIVEN_COPY_SHARE > free:
            return None
    elif total > GIVEN_COPY_MAX_BYTES:
        return None
    with torch.no_grad():
        return [x.detach().clone() if isinstance(x, torch.Tensor) else None for x in flat]


def unchanged_inputs(flat: list, copies: Optional[list]) -> list:
    """A call's inputs after it ran, for the record: each tensor that still holds exactly what
    it was handed (``copies``) is ``same_as_given()`` instead of its values, so that it is not
    written out and read back for the judge (two thirds of an elementwise kernel's record)."""
    from .compare import bitwise_equal
    out = []
    for i, x in enumerate(flat):
        c = copies[i] if copies is not None else None
        if c is not None and isinstance(x, torch.Tensor) and bitwise_equal(c, x.detach()):
            out.append(same_as_given())
        else:
            out.append(to_plain(x))
    return out


# --------------------------------------------------------------------------- uninitialised memory


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> Optional[torch.Tensor]:
    """The tensor's elements as integers of the same width (a view), or None."""
    size = t.element_size()
    if t.is_complex():
        t = torch.view_as_real(t)
        size //= 2
    dtype = _INT_OF_SIZE.get(size)
    if dtype is None:
        return None
    try:
        return t.view(dtype)
    except RuntimeError:
        return t.contiguous().view(dtype)


def _pattern_value(t: torch.Tensor, byte: int) -> int:
    size = t.element_size() // (2 if t.is_complex() else 1)
    value = int.from_bytes(bytes([byte]) * size, "little", signed=size > 1)
    return value


def holds_pattern(t: torch.Tensor, byte: int) -> Optional[torch.Tensor]:
    """Bool mask of elements whose bits are exactly the pattern (None: not checkable)."""
    if t.layout != torch.strided or t.numel() == 0:
        return None
    b = _bits(t)
    if b is None:
        return None
    m = b == _pattern_value(t, byte)
    if t.is_complex():
        m = m.all(dim=-1)
    return m


class TooLarge(Exception):
    """The code built a tensor larger than the CPU interpreter's limit."""


# --------------------------------------------------------------------------- guard bands

CANARY = 0xA5
PAD_BYTES = 65536
"""Bytes of canary before and after every tensor the code allocates and every input storage:
a store one element, or one block, past either end lands in them, and so does a read of a few
rows past a tensor's end (kernels seen reading up to 64 KB past). Beside integer and boolean
tensors the canary is zero, the value of fresh device memory: code that *reads* an index or a
length one block past such a tensor's end (a common bug that a plain run survives) reads what
it reads in a plain run, not a value that sends its next access out of bounds; a store of zeros
past their end goes unseen."""


RERUN_CANARIES = (0x5A, 0xC3, 0x3C)
"""The floating-point canary of the reference's reruns on a mismatch: elements of its results
that change with it were read from outside its tensors (they have no one right value)."""
_float_canary = [CANARY]


def canary_for(t: torch.Tensor) -> int:
    return _float_canary[0] if (t.is_floating_point() or t.is_complex()) else 0


@contextlib.contextmanager
def float_canary(byte: int):
    """Guard bands made (or refilled) inside hold ``byte`` beside floating-point tensors."""
    old = _float_canary[0]
    _float_canary[0] = byte
    try:
        yield
    finally:
        _float_canary[0] = old


def refill_bands(obj: Any, was: int = CANARY) -> None:
    """The guard bands of input storages (``guard_inputs``, or copies of them) take the current
    floating-point canary. A storage is touched only where both of its bands hold ``was``
    throughout and its tensors lie between them."""
    byte = _float_canary[0]
    for _, t, u8 in _band_storages(obj):
        if not (t.is_floating_point() or t.is_complex()):
            continue
        n = u8.numel()
        lo = t.storage_offset() * t.element_size()
        hi = lo + _extent(tuple(t.size()), tuple(t.stride())) * t.element_size()
        if lo < PAD_BYTES or hi > n - PAD_BYTES:
            continue
        if bool((u8[:PAD_BYTES] != was).any()) or bool((u8[n - PAD_BYTES:] != was).any()):
            continue
        u8[:PAD_BYTES].fill_(byte)
        u8[n - PAD_BYTES:].fill_(byte)


_LIKE_FACTORIES = {"zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like",
                   "new_zeros", "new_ones", "new_full", "scalar_tensor",
                   "lift_fresh", "lift_fresh_copy"}  # torch.tensor([...]): a fresh tensor from data


def _u8(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a tensor's whole storage."""
    return torch.empty((0,), dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _extent(size, stride) -> int:
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(size, stride))


class Guarded:
    """One allocation between guard bands: (whole storage as bytes, first and last byte of the
    tensor's region, a description)."""

    def __init__(self, u8: torch.Tensor, lo: int, hi: int, what: str, canary: int = CANARY):
        self.u8, self.lo, self.hi, self.what, self.canary = u8, lo, hi, what, canary

    def breach(self) -> Optional[str]:
        if self.u8.device.type == "cpu":
            # numpy, single-threaded: a torch reduction this small still enters its thread pool,
            # which on a busy machine (the other side's process beside it) waits tens of ms.
            import numpy as np
            a = self.u8.numpy()
            before = int(np.count_nonzero(a[:self.lo] != self.canary)) if self.lo else 0
            after = int(np.count_nonzero(a[self.hi:] != self.canary)) if self.hi < a.size else 0
        else:  # both bands counted in one reduction: one wait for the device, not two
            off = torch.cat((self.u8[:self.lo], self.u8[self.hi:])) != self.canary
            before, after = (int(v) for v in torch.stack((off[:self.lo].sum(), off[self.lo:].sum())).tolist())
        if not before and not after:
            return None
        where = " and ".join(x for x in (f"{after:,} byte(s) past its end" if after else "",
                                         f"{before:,} byte(s) before its start" if before else "") if x)
        return f"{self.what}: {where} written"


def guarded_empty(like: torch.Tensor, fill_byte: Optional[int]) -> tuple[torch.Tensor, Guarded]:
    """A tensor with ``like``'s size, strides, dtype and device, inside guard bands; its elements
    hold ``fill_byte`` (or ``like``'s values when None)."""
    size, stride, item = tuple(like.size()), tuple(like.stride()), like.element_size()
    n = _extent(size, stride)
    pad = PAD_BYTES // item
    big = torch.empty((n + 2 * pad,), dtype=like.dtype, device=like.device)
    u8 = _u8(big)
    canary = canary_for(like)
    u8.fill_(canary)
    lo, hi = pad * item, (pad + n) * item
    out = big.as_strided(size, stride, pad)
    if fill_byte is not None:
        u8[lo:hi].fill_(fill_byte)
    else:
        out.copy_(like)
    what = f"a {str(like.dtype).replace('torch.', '')}[{', '.join(map(str, size))}] tensor it allocated"
    return out, Guarded(u8, lo, hi, what, canary)


def guard_inputs(obj: Any) -> Any:
    """The same structure with every tensor's storage moved between guard bands (views of one
    storage stay views of one storage; sizes, strides and values are unchanged)."""
    memo: dict = {}

    def home(t: torch.Tensor) -> torch.Tensor:
        src = t.detach()
        if src.layout != torch.strided:
            return t
        st = src.untyped_storage()
        key = (st.data_ptr(), st.nbytes(), str(src.device))
        if key not in memo:
            nb = st.nbytes()
            u8 = torch.empty((nb + 2 * PAD_BYTES,), dtype=torch.uint8, device=src.device)
            u8.fill_(canary_for(src))
            u8[PAD_BYTES:PAD_BYTES + nb].copy_(_u8(src))
            memo[key] = u8
        u8 = memo[key]
        out = torch.empty((0,), dtype=src.dtype, device=src.device)
        out.set_(u8.untyped_storage(), src.storage_offset() + PAD_BYTES // src.element_size(), src.size(),
                 src.stride())
        if t.requires_grad and (out.is_floating_point() or out.is_complex()):
            out.requires_grad_(True)
        return out

    return map_tensors(obj, home)


def _band_storages(obj: Any) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(path, tensor, its storage as bytes) for the first tensor of each storage in a structure
    that is large enough to hold guard bands (``guard_inputs``)."""
    out, seen = [], set()
    for path, t in leaves(obj):
        if t.layout != torch.strided:
            continue
        u8 = _u8(t.detach())
        key = u8.untyped_storage().data_ptr()
        if key in seen or u8.numel() < 2 * PAD_BYTES:
            continue
        seen.add(key)
        out.append((path, t, u8))
    return out


def input_breaches(obj: Any) -> list[str]:
    """Guard bands of input storages (``guard_inputs``) that something wrote into."""
    out = []
    for path, t, u8 in _band_storages(obj):
        g = Guarded(u8, PAD_BYTES, u8.numel() - PAD_BYTES, f"input{path}", canary_for(t))
        b = g.breach()
        if b:
            out.append(b)
    return out


class Allocations(TorchDispatchMode):
    """Every tensor the code under test allocates (``torch.empty`` and friends, factories such as
    ``torch.randn`` and ``torch.zeros``) is placed between guard bands; uninitialised
    floating-point ones are filled with a byte pattern, so that an element nothing wrote is the
    pattern, never a stale value (integer and boolean ones with zeros, as fresh memory).
    ``breaches()`` lists allocations whose guard bands were written; under the CPU interpreter,
    ``outside_reads()`` the kernels that read outside the tensors they are given (guard bands
    included: they are no tensor's data). Allocations made inside a
    Triton launch (the CPU interpreter's own) are left alone. With ``max_elements``, a
    tensor larger than that stops the code (``TooLarge``): the CPU interpreter would take hours."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as guards.OpRecorder: no torch._dynamo import at the first allocation

    def __init__(self, byte: int, launches=None, max_elements: Optional[int] = None, guard: bool = True,
                 inputs: Any = None):
        super().__init__()
        self.byte = byte
        self.launches = launches
        self.max_elements = max_elements
        self.guard = guard
        self.guarded: list[Guarded] = []
        # storage address -> the bytes of it that are the tensor's own (between its guard bands):
        # the inputs' storages (``guard_inputs``) and what the code allocates here.
        self.own: dict[int, tuple[int, int]] = {}
        for _, t in leaves(inputs):
            if t.layout == torch.strided and t.untyped_storage().nbytes() >= 2 * PAD_BYTES:
                st = t.untyped_storage()
                self.own[st.data_ptr()] = (st.data_ptr() + PAD_BYTES, st.data_ptr() + st.nbytes() - PAD_BYTES)
        # storage address -> its guard bands, for the check right after each launch; what that
        # check found stays found (``latched``), even if the code later puts the bands back.
        self.bands: dict[int, Guarded] = {}
        if guard:
            for path, t, u8 in _band_storages(inputs):
                self.bands[u8.untyped_storage().data_ptr()] = Guarded(u8, PAD_BYTES, u8.numel() - PAD_BYTES,
                                                                     f"input{path}", canary_for(t))
        self.latched: list[str] = []
        self.reads_from = 0
        self.reads: list[str] = []

    def __enter__(self):
        if self.launches is not None:
            self.launches.own_bytes = self.own_bytes
            self.launches.after_launch = self.after_launch
            self.reads_from = len(self.launches.outside_reads)
        return super().__enter__()

    def after_launch(self, args: tuple, kwargs: dict, kernel: str) -> None:
        """Right after a launch: the guard bands of the tensors it was given. A kernel that
        wrote past a tensor is caught here even if the code then writes the bands back."""
        from .guards import launch_tensors
        tensors: list = []
        for a in list(args) + list(kwargs.values()):
            launch_tensors(a, tensors)
        seen = set()
        for t in tensors:
            try:
                base = t.untyped_storage().data_ptr()
            except Exception:
                continue
            g = self.bands.get(base)
            if g is None or base in seen:
                continue
            seen.add(base)
            b = g.breach()
            if b and b not in self.latched:
                self.latched.append(b)

    def __exit__(self, *exc):
        if self.launches is not None:
            self.launches.own_bytes = None
            self.launches.after_launch = None
            self.reads = self._summarize(self.launches.outside_reads[self.reads_from:])
            del self.launches.outside_reads[self.reads_from:]
        return super().__exit__(*exc)

    def own_bytes(self, base: int, nbytes: int) -> Optional[tuple[int, int]]:
        return self.own.get(base)

    def outside_reads(self) -> list[str]:
        """What the code's kernels read outside the tensors they were given (CPU interpreter only),
        one line per kernel."""
        return list(self.reads)

    @staticmethod
    def _summarize(reads: list) -> list[str]:
        per: dict[str, list[int]] = {}
        for kernel, n, past in reads:
            k = per.setdefault(kernel, [0, 0])
            k[0], k[1] = k[0] + n, max(k[1], past)
        return [f"{kernel} reads {n:,} element(s) outside the tensors it is given"
                + (f", up to {past:,} bytes past the end of one" if past else "")
                for kernel, (n, past) in per.items()]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.launches is not None and self.launches.depth:
            return out
        if not isinstance(out, torch.Tensor):
            return out
        if self.max_elements is not None and out.numel() > self.max_elements:
            raise TooLarge(f"builds a tensor of {out.numel():,} elements ({tuple(out.shape)}): too "
                           f"large for the CPU interpreter (limit {self.max_elements:,})")
        packet = getattr(func, "_overloadpacket", None)
        name = getattr(packet, "__name__", "")
        empty = name in _EMPTY_OPS
        factory = empty or name in _LIKE_FACTORIES or not any(
            isinstance(a, torch.Tensor) for a in list(args) + list((kwargs or {}).values()))
        if not factory or out.layout != torch.strided:
            return out
        # Integer and boolean memory nobody wrote reads as zero, as fresh device memory does in a
        # plain run: tests index with torch.empty(..., dtype=torch.int32) and get away with it;
        # a pattern there would turn those indices into wild addresses.
        fill = self.byte if (out.is_floating_point() or out.is_complex()) else 0
        with torch.no_grad():
            if self.guard and out.numel() > 0:
                new, g = guarded_empty(out, fill if empty else None)
                self.guarded.append(g)
                base = g.u8.untyped_storage().data_ptr()
                self.own[base] = (base + g.lo, base + g.hi)
                self.bands[base] = g
                return new
            if empty:
                try:
                    out.untyped_storage().fill_(fill)
                except Exception:
                    pass
        return out

    def breaches(self) -> list[str]:
        """Allocations (and, as seen right after a launch, inputs) whose guard bands were
        written."""
        now = [b for b in (g.breach() for g in self.guarded) if b]
        return list(dict.fromkeys(self.latched + now))


def unwritten(run_a: Any, run_b: Any) -> dict[str, torch.Tensor]:
    """Per tensor path: the elements that hold pattern A in run A and pattern B in run B (the
    same code on the same inputs): nothing wrote them. Paths without such elements are absent."""
    out = {}
    b_leaves = dict(leaves(run_b))
    for path, a in leaves(run_a):
        b = b_leaves.get(path)
        if b is None or b.shape != a.shape or b.dtype != a.dtype:
            continue
        ma, mb = holds_pattern(a, PATTERN_A), holds_pattern(b, PATTERN_B)
        if ma is None or mb is None:
            continue
        m = ma & mb.to(ma.device)
        if bool(m.any()):
            out[path] = m
    return out


def any_pattern(obj: Any, byte: int = PATTERN_A) -> bool:
    """Whether any tensor element in ``obj`` holds the pattern (only then can part of it be
    unwritten)."""
    for _, t in leaves(obj):
        m = holds_pattern(t, byte)
        if m is not None and bool(m.any()):
            return True
    return False


def varying(run_a: Any, run_b: Any, tols=None) -> dict[str, torch.Tensor]:
    """Per tensor path: the elements where two runs of the same code on the same inputs disagree
    by more than the tolerance (a race, atomics in another order, a read of memory nobody
    wrote). Paths without such elements are absent."""
    out = {}
    b_leaves = dict(leaves(run_b))
    for path, a in leaves(run_a):
        m = outside(a, b_leaves.get(path), tols)
        if m is not None and bool(m.any()):
            out[path] = m
    return out


def numbers(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, value) for every plain number (int, float, complex; not bool) in a structure, in
    a fixed order: what a test returns from ``.item()`` or ``.norm().item()``."""
    return _walk(obj, lambda o: isinstance(o, (int, float, complex)) and not isinstance(o, bool), path)


def varying_numbers(run_a: Any, run_b: Any, tols=None) -> list[tuple[str, Any, Any]]:
    """(path, value in run A, value in run B) for the plain numbers where two runs of the same
    code on the same inputs disagree beyond the tolerance. A number cannot be left out in part:
    one that varies has no right value at all."""
    b_numbers = dict(numbers(run_b))
    out = []
    for path, a in numbers(run_a):
        if path in b_numbers and not compare(a, b_numbers[path], tols).ok:
            out.append((path, a, b_numbers[path]))
    return out


def merge_masks(unwritten_masks: dict, varying_masks: dict) -> dict:
    """One mask dict (per path, nested one level as ``{key: {path: mask}}``) of what is left out,
    with each mask's reason: path -> (mask, reason)."""
    out: dict = {}
    for masks, why in ((unwritten_masks, UNWRITTEN), (varying_masks, VARYING)):
        for key, sub in (masks or {}).items():
            dst = out.setdefault(key, {})
            for path, m in sub.items():
                if path in dst:
                    old, reason = dst[path]
                    dst[path] = (old | m.to(old.device), reason if reason == why else f"{reason}, or {why}")
                else:
                    dst[path] = (m, why)
    return out


def leave_out(expected: Any, actual: Any, masks: dict, label: str = "output") -> list[str]:
    """Set the masked elements of both structures to zero (in place; both are the judge's own
    copies), where the tensors are comparable. ``masks``: path -> mask, or path -> (mask,
    reason). Returns a description per path."""
    notes = []
    if not masks:
        return notes
    act = dict(leaves(actual))
    for path, e in leaves(expected):
        m = masks.get(path)
        if m is None:
            continue
        m, why = m if isinstance(m, tuple) else (m, UNWRITTEN)
        a = act.get(path)
        n = int(m.sum())
        notes.append(f"{label}{path}: {n:,} of {e.numel():,} element(s) left out ({why})")
        with torch.no_grad():
            _zero(e, m)
            if isinstance(a, torch.Tensor) and a.shape == e.shape and a.dtype == e.dtype:
                _zero(a, m.to(a.device))
    return notes


def _zero(t: torch.Tensor, mask: torch.Tensor) -> None:
    if t.is_complex():
        torch.view_as_real(t)[mask] = 0
    else:
        t[mask] = 0
