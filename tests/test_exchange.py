"""What crosses between the reference's and the candidate's processes (runner.worker.exchange) and the
shared compile layer (runner.tcache), as units."""

from __future__ import annotations

import fcntl
import json
import math
import os

import pytest
import torch

from runner.worker import channel

from runner.worker.exchange import (CANARY, PATTERN_A, PATTERN_B, SEALS, Allocations, clone_layout, guard_inputs,
                             hand_again, NotTransferable, from_transfer, input_breaches, leave_out, load, save, to_plain,
                             to_transfer, unwritten)
from runner.worker.exchange import given_copies, is_same_as_given, unchanged_inputs


def test_layout_and_sharing_survive_a_copy_and_shared_memory(tmp_path):
    base = torch.randn(10, 8)
    a, b = base[2:, ::2], base[2:, 1::2]
    for x, y in (clone_layout((a, b)), tuple(load(_saved(tmp_path, (a, b))))):
        assert x.stride() == a.stride() and y.storage_offset() - x.storage_offset() == 1
        assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
        assert torch.equal(x, a) and torch.equal(y, b)


def _saved(tmp_path, obj):
    """``obj`` handed over as the pool hands it on: sealed shared memory, then received."""
    path = str(tmp_path / "x.pt")
    save(path, obj)
    fd = channel._outbox["x.pt"]
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS  # nothing can change it any more
    with pytest.raises(OSError):
        os.write(fd, b"x")
    channel.loop_back()
    return path


def test_a_draw_s_inputs_are_written_once_and_handed_again_sealed(tmp_path):
    # The reference hands the same draw to every candidate: the sealed memfd is kept and handed
    # again (no second write); sealed, neither side can change what the next one gets.
    x = torch.randn(64, 32)
    kept = save(str(tmp_path / "in-0-0.pt"), {"args": [x]}, keep=True)
    first = channel._outbox["in-0-0.pt"]
    channel.loop_back()
    hand_again(str(tmp_path / "in-0-1.pt"), kept)
    again = channel._outbox["in-0-1.pt"]
    assert again != kept.fd and os.fstat(again).st_ino == os.fstat(kept.fd).st_ino == os.fstat(first).st_ino
    assert kept.storages == [] and kept.device_bytes == 0 and kept.host_bytes > 64 * 32 * 4
    assert fcntl.fcntl(again, fcntl.F_GET_SEALS) & SEALS == SEALS
    channel.loop_back()
    got = load("in-0-1.pt")["args"][0]
    got.add_(1.0)  # the reader's mapping is its own copy
    assert torch.equal(load("in-0-0.pt")["args"][0], x) and torch.equal(got, x + 1.0)
    kept.close()
    channel.forget_received()


def test_inputs_left_as_handed_are_not_written_out_again(tmp_path):
    # A candidate's record names the inputs its call left exactly as handed instead of holding
    # them (the judge holds those); one it changed, even by one element or to -NaN, is recorded.
    x, y, z = torch.randn(1000), torch.randn(1000), torch.arange(10)
    flat = [x, y, z, 3, "s"]
    copies = given_copies(flat)
    y[7] = y[7] + 1.0
    rec = unchanged_inputs(flat, copies)
    assert is_same_as_given(rec[0]) and is_same_as_given(rec[2])
    assert torch.equal(rec[1], y) and rec[1].data_ptr() != y.data_ptr() and rec[3:] == [3, "s"]
    nan = torch.full((4,), float("nan"))
    copies = given_copies([nan])
    nan.neg_()  # NaN to -NaN: the same value to the judge's comparison, so the same claim
    assert is_same_as_given(unchanged_inputs([nan], copies)[0])
    back = load(_saved(tmp_path, {"inputs_after": rec}))["inputs_after"]
    assert is_same_as_given(back[0]) and torch.equal(back[1], y)
    assert given_copies([3, "s"]) is None


def test_files_with_anything_but_tensors_and_plain_values_are_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))
    fd = os.memfd_create("evil.pt")
    with open(fd, "wb", closefd=False) as f:
        torch.save({"x": Evil()}, f)
    channel.hand("evil.pt", fd)
    channel.loop_back()
    try:
        load("evil.pt")
        raise AssertionError("loaded")
    except Exception as e:
        assert "tensors and plain" in str(e)
    channel.forget_received()
    with pytest.raises(Exception, match="was not written"):
        load("evil.pt")
    # Objects in outputs are described, without their addresses, alike on both sides.
    assert to_plain(object())["repr"] == to_plain(object())["repr"]


class Config:  # what a launching wrapper takes (TritonBench-G's int_scaled_matmul)
    def __init__(self, num_warps=4, **kwargs):
        self.num_warps, self.kwargs = num_warps, kwargs


def test_a_config_object_and_a_triton_dtype_cross_to_the_timing_process_as_plain_data(tmp_path):
    import sys
    import types

    import triton.language as tl
    x = torch.randn(4)
    call = [x, Config(num_warps=8, BLOCK_M=64, scale=x), {"dtypes": tl.float8e5}]
    data = to_transfer(call, __name__)
    back = from_transfer(load(_saved(tmp_path, data)), sys.modules[__name__])  # weights_only load
    assert torch.equal(back[0], x) and back[2]["dtypes"] == tl.float8e5
    assert type(back[1]) is Config and back[1].num_warps == 8 and back[1].kwargs["BLOCK_M"] == 64
    assert torch.equal(back[1].kwargs["scale"], x)
    # The other side's own class of that name, where it has one; a clear error where it has none.
    other = types.ModuleType("cand")
    exec("class Config:\n    pass", other.__dict__)
    assert type(from_transfer(data, other)[1]) is other.Config
    try:
        from_transfer(data, types.ModuleType("empty"))
        raise AssertionError("made")
    except Exception as e:
        assert "does not define" in str(e)
    # A class from elsewhere, or a function, does not cross: the call is not timed.
    for obj in (Config(), object(), len):
        try:
            to_transfer([obj], "somewhere_else")
            raise AssertionError(f"{obj!r} crossed")
        except NotTransferable:
            pass


def test_unwritten_elements_are_the_ones_holding_each_pattern():
    def run(byte):
        with Allocations(byte):
            out = torch.empty(10)
            out[:6] = torch.arange(6.0)
        return to_plain(out)
    a, b = run(PATTERN_A), run(PATTERN_B)
    assert math.isnan(a[7]) and not math.isnan(b[7])
    masks = unwritten(a, b)
    (m,) = masks.values()
    assert m.tolist() == [False] * 6 + [True] * 4
    other = torch.zeros(10)
    notes = leave_out(a, other, masks)
    assert "4 of 10 element(s) left out" in notes[0] and torch.equal(a[6:], other[6:])


def test_stores_past_the_end_of_an_allocation_or_an_input_land_in_guard_bands():
    with Allocations(PATTERN_A) as alloc:
        out = torch.empty(100)
    assert alloc.breaches() == []
    big = torch.empty(0).set_(out.untyped_storage(), out.storage_offset(), (101,), (1,))
    big[100] = 1.0  # one element past the end
    (b,) = alloc.breaches()
    assert "past its end" in b and "float32[100]" in b
    x, y = guard_inputs((torch.randn(50), torch.randn(50)))
    assert input_breaches([x, y]) == [] and x.untyped_storage().nbytes() > 50 * 4
    torch.empty(0).set_(x.untyped_storage(), x.storage_offset() - 1, (1,), (1,)).fill_(3.0)
    assert "before its start" in input_breaches([x, y])[0]
    assert int(torch.empty(0, dtype=torch.uint8).set_(y.untyped_storage())[0]) == CANARY
    # Beside an integer tensor the band is zero (see below), and a nonzero store there is seen.
    (i,) = guard_inputs((torch.arange(5),))
    torch.empty(0, dtype=torch.int64).set_(i.untyped_storage(), i.storage_offset(), (6,), (1,))[5] = 7
    assert "past its end" in input_breaches([i])[0]


def test_memory_nobody_wrote_reads_as_in_a_plain_run_where_it_could_become_an_address():
    # An index tensor from torch.empty and a read one block past a tensor's end: a plain run
    # reads fresh (zeroed) memory there; so must the evaluated code, or its next access is wild.
    with Allocations(PATTERN_A) as alloc:
        idx = torch.empty(8, dtype=torch.int32)
        flags = torch.empty(4, dtype=torch.bool)
        lengths = torch.zeros(2, dtype=torch.int64)
    assert idx.tolist() == [0] * 8 and flags.tolist() == [False] * 4
    past = torch.empty(0, dtype=torch.int64).set_(lengths.untyped_storage(), lengths.storage_offset(), (16,), (1,))
    assert past.tolist() == [0] * 16 and alloc.breaches() == []


def test_shared_compile_layer_entries_are_promoted_and_read(tmp_path, monkeypatch):
    from runner.tcache import WARM, LayeredCacheManager, promote
    private, shared, mine = tmp_path / "private", tmp_path / "shared", tmp_path / "mine"
    layer = shared / "DIGEST"  # the layer of one reference
    key = private / "KEY"
    key.mkdir(parents=True)
    shared.mkdir()
    (key / "k.cubin").write_bytes(b"bin")
    (key / "k.json").write_text("{}")
    (key / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": str(key / "k.cubin"),
                                                                   "k.json": str(key / "k.json")}}))
    (private / "LAUNCHER").mkdir()
    (private / "LAUNCHER" / "launcher.so").write_bytes(b"so")
    (private / "HALF").mkdir()
    (private / "HALF" / "h.json").write_text("{}")  # a kernel whose group file is not written yet
    (tmp_path / "token").write_text("the runner's secret")
    (private / "LINKED").mkdir()  # the user's code wrote this cache: a link could name any file
    (private / "LINKED" / "x.cubin").symlink_to(tmp_path / "token")
    assert promote(str(private), str(layer)) == 2
    assert sorted(os.listdir(layer)) == ["KEY", "LAUNCHER"]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(mine))
    monkeypatch.setenv("GEAK_TRITON_SHARED_CACHE", str(shared))
    monkeypatch.setenv("GEAK_TRITON_LAYER", "DIGEST")
    m = LayeredCacheManager("KEY")
    group = m.get_group("k.json")
    assert group == {"k.cubin": str(layer / "KEY" / "k.cubin"), "k.json": str(layer / "KEY" / "k.json")}
    assert m.get_file("k.cubin") == str(layer / "KEY" / "k.cubin")
    m.put(b"new", "n.bin")  # writes go to the job's own directory
    assert (mine / "KEY" / "n.bin").exists() and not (layer / "KEY" / "n.bin").exists()
    # An evaluation of another reference reads its own layer and the warm-up's, never this one.
    monkeypatch.setenv("GEAK_TRITON_LAYER", "OTHER")
    assert LayeredCacheManager("KEY").get_file("k.cubin") is None
    (shared / WARM / "KEY").mkdir(parents=True)
    (shared / WARM / "KEY" / "k.cubin").write_bytes(b"warm")
    assert LayeredCacheManager("KEY").get_file("k.cubin") == str(shared / WARM / "KEY" / "k.cubin")
    monkeypatch.setenv("GEAK_TRITON_LAYER", "../DIGEST")  # no way out of the layers by name
    assert LayeredCacheManager("KEY").get_file("k.cubin") == str(shared / WARM / "KEY" / "k.cubin")


def _hand_raw(name: str, obj) -> None:
    """``obj`` written with ``torch.save`` as it stands (no exchange.save), sealed, received."""
    fd = os.memfd_create(name, os.MFD_ALLOW_SEALING)
    with open(fd, "wb", closefd=False) as f:
        torch.save(obj, f)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    channel.hand(name, fd)
    channel.loop_back()


def test_a_structure_in_another_format_or_with_a_forged_device_part_is_refused():
    # What the other side wrote is read only in the exchange's own format, and its description
    # of the storages that crossed as GPU memory (runner.worker.devmem) is checked before any
    # is imported: a part that was not handed over, a tensor of a part that does not exist, a
    # negative stride, an unknown dtype. On this CPU-only process a well-formed part still
    # cannot be imported: the error says why, in the exchange's terms.
    from runner.worker.exchange import FORMAT, ExchangeError
    try:
        _hand_raw("plain.pt", {"x": torch.ones(3)})  # torch.save alone: not the exchange's format
        with pytest.raises(ExchangeError, match="not written by this exchange"):
            load("plain.pt")
        part = {"nbytes": 64, "size": 2 << 20, "device": "GPU-0"}
        good = [0, 0, "float32", 0, [16], [1]]
        for visits, parts, why in (
                ([[0, 1, "float32", 0, [16], [1]]], [part], "described wrongly"),
                ([[0, 0, "float32", 0, [16], [-1]]], [part], "described wrongly"),
                ([[0, 0, "object", 0, [16], [1]]], [part], "described wrongly"),
                ([good], [{"nbytes": 64, "device": "GPU-0"}], "described wrongly"),
                ([good], [part], "was not handed over")):
            _hand_raw("out-0-0.pt", (FORMAT, {"visits": visits, "parts": parts}, {"output": torch.empty(0)}))
            with pytest.raises(ExchangeError, match=why):
                load("out-0-0.pt")
        r, w = os.pipe()
        os.close(w)
        channel.hand("out-0-0.pt.dev0", r)
        _hand_raw("out-0-0.pt", (FORMAT, {"visits": [good], "parts": [part]}, {"output": torch.empty(0)}))
        with pytest.raises(ExchangeError, match="a GPU this process does not have"):
            load("out-0-0.pt")
    finally:
        channel.forget_received()


def test_a_device_part_s_tensors_are_put_back_as_views_of_one_storage_and_never_outside_it():
    # The tensors of a storage that crossed as GPU memory are rebuilt from the layout the
    # writer described, as views of the one copy the reader took (here a CPU storage stands in
    # for that copy: the rebuilding does not depend on the device); a layout that reaches past
    # the storage's end is refused, never read (``set_`` would grow the storage instead).
    from runner.worker.exchange import _restore
    base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    st = torch.empty(0, dtype=torch.uint8).set_(base.untyped_storage())
    parts = {"visits": [[1, 0, "float32", 8, [4, 8], [8, 1]], [2, 0, "float32", 1, [8], [5]]],
             "parts": [{"nbytes": 160, "size": 160, "device": "-"}]}
    obj = {"a": 3, "b": [torch.ones(2), torch.empty(0), torch.empty(0)]}
    got = _restore(obj, parts, [st])
    assert torch.equal(got["b"][0], torch.ones(2))
    assert torch.equal(got["b"][1], base[1:]) and got["b"][1].stride() == (8, 1)
    assert torch.equal(got["b"][2], base.flatten()[1::5][:8])
    assert got["b"][1].untyped_storage().data_ptr() == got["b"][2].untyped_storage().data_ptr()
    for offset, size, stride in ((0, [41], [1]), (39, [2], [1]), (0, [5, 9], [8, 1]), (0, [2, 2], [0, 40])):
        with pytest.raises(ValueError, match="reaching"):
            _restore([torch.empty(0)], {"visits": [[0, 0, "float32", offset, size, stride]], "parts": parts["parts"]},
                     [st])
    assert _restore([torch.empty(0)], {"visits": [[0, 0, "float32", 39, [1], [1]]], "parts": parts["parts"]},
                    [st])[0].item() == 39.0


def test_the_pool_passes_on_a_device_part_only_under_its_name_and_never_an_unsealed_file():
    # A handed descriptor that is not a sealed memfd passes the pool only as a device part:
    # named as one and neither a regular file nor a folder. An unsealed memfd named as a device
    # part is dropped like any unsealed memfd.
    from runner.judge.process import _device_part, sealed
    r, w = os.pipe()
    m = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    try:
        assert _device_part("out-0-0.pt.dev0", r) and _device_part("time-3.pt.dev12", r)
        assert not _device_part("out-0-0.pt", r) and not _device_part("out-0-0.pt.devx", r)
        assert not _device_part(".dev0", r)
        assert not _device_part("out-0-0.pt.dev0", m) and not sealed(m)
    finally:
        for fd in (r, w, m):
            os.close(fd)


def test_a_kept_draw_whose_device_parts_cannot_be_exported_again_is_written_out_instead(monkeypatch):
    # hand_again exports each device part of a kept draw afresh. Where the driver gives no
    # allocation (here: its export refused), the same draw is written through the host under the
    # same name instead, never left unhanded. A CPU tensor stands in for the kept device copy.
    from runner.worker import devmem, exchange
    x = torch.arange(64, dtype=torch.float32)
    save("in-0-0.pt", {"args": [torch.empty(0)]})  # a structure with one placeholder
    fd = channel._outbox.pop("in-0-0.pt")
    data = torch.load(f"/proc/self/fd/{fd}", weights_only=True)
    os.close(fd)
    parts = {"visits": [[0, 0, "float32", 0, [64], [1]]], "parts": [{"nbytes": 256, "size": 256, "device": "-"}]}
    m = os.memfd_create("in.pt", os.MFD_ALLOW_SEALING)
    with open(m, "wb", closefd=False) as f:
        torch.save((data[0], parts, data[2]), f)
    kept = exchange.Kept(m, [torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage())])

    def refused(st, device):
        raise devmem.DeviceMemoryError("cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY")
    monkeypatch.setattr(devmem, "export", refused)
    try:
        hand_again("in-0-1.pt", kept)
        assert sorted(channel._outbox) == ["in-0-1.pt"]
        channel.loop_back()
        assert torch.equal(load("in-0-1.pt")["args"][0], x)
    finally:
        kept.close()
        channel.forget_received()
