"""The worker: one process, one job, forked by the fork server (``runner.worker.zygote``).

``prepare`` runs once in the fork server: it chooses the device (before triton is imported:
``TRITON_INTERPRET`` is read when a kernel is decorated), imports torch, triton and the runner's
worker-side modules, and installs the launch recorder. ``serve`` runs in each forked worker: it
locks the process down (``runner.sandbox``), creates the CUDA context, says hello, runs its
warm-up one part per ``warm`` op (``runner.worker.warmup.gpu_part``; the pool holds the device lock
for reading through each), then answers the pool's ops for one role until told to exit:

* ``reference`` (``runner.worker.reference``): imports only the reference tree, finds the input cases,
  runs the reference, and judges the candidate's outputs against it. It never imports candidate
  code, so what it says about correctness cannot be forged by a candidate.
* ``candidate`` (``runner.worker.candidate``): imports the candidate tree (and the reference's, to time
  both), runs the candidate on the inputs the reference wrote, writes its outputs for the
  reference to judge, reports what it observed, and times reference and candidate interleaved.

A candidate worker is used for one evaluation and then killed with everything it started. A
reference worker may serve further evaluations of the same reference (same files and options),
never after a failure. The worker imports only the standard library, torch, triton and numpy
(and the user's code).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import channel

_STATE: dict = {}


def _compile_outside_device_lock() -> None:
    """Announce Triton compiles inside an op as a "compile" phase (see runner.worker.channel): compiling
    is CPU work, and holding the device lock through it would keep another worker's timing
    waiting. Triton versions without ``JITFunction._do_compile`` keep the lock."""
    import functools

    try:
        from triton.runtime.jit import JITFunction
    except Exception:
        return
    orig = getattr(JITFunction, "_do_compile", None)
    if orig is None:
        return

    @functools.wraps(orig)
    def _do_compile(self, *args, **kwargs):
        if channel.current_phase() != "run":
            return orig(self, *args, **kwargs)
        channel.phase("compile")
        try:
            return orig(self, *args, **kwargs)
        finally:
            channel.phase("run")

    JITFunction._do_compile = _do_compile


def prepare(requested: str) -> bool:
    """In the fork server: choose the device and import everything a worker needs. Returns
    whether workers will use a GPU. Never initialises the GPU driver."""
    import torch

    from .. import devices
    if requested == "compile":  # a compile worker's fork server (runner.aot): triton as the GPU has it
        os.environ.pop("TRITON_INTERPRET", None)
        import numpy  # noqa: F401
        import triton  # noqa: F401

        from .. import aot  # noqa: F401
        from . import inputs, trees  # noqa: F401
        try:
            import triton.knobs as knobs
            knobs.runtime.interpret = False
        except Exception:
            pass
        from . import warmup
        threads = len(os.listdir("/proc/self/task"))
        warmup.compile_pipeline(both=True)  # each compile worker's first compile is then a usual one
        if len(os.listdir("/proc/self/task")) != threads:
            raise RuntimeError("warming up started a thread in the fork server; its workers would hang")
        _STATE.update(requested=requested, gpu=False, launches=None)
        return False
    if requested not in ("auto", "cuda", "rocm", "interpreter"):
        raise RuntimeError(f"unknown device '{requested}' (use auto, cuda, rocm or interpreter)")
    gpu = devices.gpu_present(requested)
    if requested in ("cuda", "rocm") and not gpu:
        raise RuntimeError(f"device '{requested}' was asked for, but torch sees no GPU "
                           f"(torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
                           f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    if gpu:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    # Not torch._dynamo (1.2 s): our TorchDispatchModes do not import it (guards.OpRecorder);
    # user code that does (torch.compile) rebinds torch.manual_seed, which the integrity
    # snapshot tells apart from a replacement (guards.IntegritySnapshot).
    import numpy  # noqa: F401
    import numpy.random  # noqa: F401  (each call's seed_all seeds it: 5-10 ms to import in every worker)
    import triton  # noqa: F401
    # What leaving the dispatch modes imports (torch's functional, schema-check and proxy modes),
    # which the launch recorder does at every launch: once here, not at each worker's first launch.
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        pass

    from . import candidate, compare, exchange, guards, inputs, reference, timing  # noqa: F401
    # The launch recorder describes every launch with runner.aot: imported here, once, not at
    # the first launch of every worker (15 ms of each single-use evaluation on the H200).
    from .. import aot  # noqa: F401
    try:
        import triton.knobs as knobs  # keep the interpreter flag consistent with our choice
        knobs.runtime.interpret = not gpu
    except Exception:
        pass
    if not gpu:
        guards.patch_cuda_for_interpreter()
        guards.patch_autotune_for_interpreter()
        from . import fastinterp
        fastinterp.install()  # before the warm-up's kernel: no builtin is patched yet
        fastinterp.install_libdevice()
    from . import warmup
    threads = len(os.listdir("/proc/self/task"))
    warmup.warm(interpreter=not gpu)  # before the launch recorder: this launch is nobody's
    if gpu:
        warmup.compile_pipeline()
    if len(os.listdir("/proc/self/task")) != threads:
        raise RuntimeError("warming up started a thread in the fork server; its workers would hang")
    launches = guards.LaunchRecorder()
    launches.install()
    if gpu:
        _compile_outside_device_lock()
    _STATE.update(requested=requested, gpu=gpu, launches=launches)
    return gpu


def _lock_down(scratch: str, keeper: int, ns: dict) -> dict:
    import resource

    from .. import sandbox
    os.setsid()
    sandbox.die_with_parent(keeper)
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    os.chdir(scratch)
    # Everything the code writes by default (temp files, caches, "~") stays in this job's scratch
    # directory, which the pool deletes: no state reaches the next job.
    for var, sub in (("HOME", ""), ("TMPDIR", "tmp"), ("TRITON_CACHE_DIR", ".triton"),
                     ("TORCHINDUCTOR_CACHE_DIR", ".inductor"), ("XDG_CACHE_HOME", ".cache")):
        path = os.path.join(scratch, sub) if sub else scratch
        os.makedirs(path, exist_ok=True)
        os.environ[var] = path
    tempfile.tempdir = os.path.join(scratch, "tmp")
    # Triton compiles into this job's own cache, and reads the runner's shared one only where it
    # is mounted read-only here (runner.tcache).
    os.environ["TRITON_CACHE_MANAGER"] = "runner.tcache:LayeredCacheManager"
    if ns.get("compile_cache") != "shared, read-only":
        os.environ.pop("GEAK_TRITON_SHARED_CACHE", None)
    privileges = sandbox.drop_privileges()
    return {"pid_namespace": ns.get("pid", "shared"), "network": ns.get("net", "shared"),
            "compile_cache": ns.get("compile_cache", "own"),
            "filesystem": ns.get("filesystem", "not confined"), "user_namespace": ns.get("user", "shared"),
            "capabilities": "none" if sandbox.capabilities() == 0 else "some",
            **{k: "yes" if v else "no" for k, v in privileges.items()}}


def serve(fd: int, scratch: str, ns: dict, keeper: int) -> int:
    """The forked worker's life. Returns its exit code."""
    channel.open_channel(fd)
    sys.stdout = sys.stderr  # fd 1 and 2 are the job's log pipe; the protocol is its own socket
    try:
        sandbox_facts = _lock_down(scratch, keeper, ns)
        from .. import devices, schema
        requested = _STATE["requested"]
        # The fork server counted GPUs through NVML so as not to start the driver before
        # forking; from here on torch asks the driver, as it does in a plain run (NVML may not
        # start inside the sandbox, and its count would then say no GPU).
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        if _STATE["gpu"]:
            import torch
            torch.cuda.init()
            torch.empty(1, device="cuda")  # the context, before any user code
            # Some PyTorch versions count devices through NVML even once CUDA is up; NVML may see
            # none inside the sandbox ("Invalid device id"). The driver's count is the true one.
            torch.cuda._cached_device_count = torch._C._cuda_getDeviceCount()
            # Its warm-up comes after the hello, one part per "warm" op (warmup.gpu_part).
        info = devices.detect("interpreter" if requested == "compile" else requested)
    except BaseException as e:
        why = f"{type(e).__name__}: {e}"
        if _STATE.get("gpu"):
            try:
                from .. import devices
                import torch
                where = traceback.extract_tb(e.__traceback__)[-3:]
                why += f" ({devices._why_no_gpu(torch)}; at " + " < ".join(
                    f"{Path(f.filename).name}:{f.lineno}" for f in reversed(where)) + ")"
            except Exception:
                pass
        channel.send({"event": "fatal", "message": why})
        return 1
    _STATE["device"] = info
    channel.send({"event": "hello", "device": schema.to_dict(info), "sandbox": sandbox_facts})
    role = None
    while True:
        msg = channel.recv()
        if msg is None or msg.get("op") == "exit":
            return 0
        op = msg.get("op")
        if not op:
            continue
        try:
            if op == "warm":  # a fresh worker's warm-up, before any job: one part per op
                if role is not None:
                    raise RuntimeError("op 'warm' after 'load'")
                more = False
                if _STATE["gpu"]:
                    from . import warmup
                    channel._current_phase[0] = "run"  # a compile in it gives the device lock back
                    try:
                        more = warmup.gpu_part(int(msg.get("part") or 0))
                    finally:
                        channel._current_phase[0] = None
                channel.send({"event": "reply", "op": op, "more": more, "nonce": msg.get("nonce")})
                continue
            if op in ("load", "attach"):  # this evaluation's layer of the shared compile cache
                os.environ["GEAK_TRITON_LAYER"] = str(msg.get("layer") or "")
                channel.forget_received()  # what the last evaluation's other side handed over
            if op == "load":
                role = _make_role(msg, Path(scratch))
            elif op == "compile" and role is None and _STATE["requested"] == "compile":
                role = _Compiles(scratch)
            if role is None:
                raise RuntimeError(f"op '{op}' before 'load'")
            channel._current_phase[0] = "run" if _STATE["gpu"] else None
            channel.take_steps()  # this op's steps only
            try:
                reply = role.handle(op, msg)
            finally:
                channel._current_phase[0] = None
            steps = channel.take_steps()
            channel.send({"event": "reply", "op": op, **reply, **({"steps_s": steps} if steps else {}),
                          "nonce": msg.get("nonce")})
        except BaseException as e:
            from .errors import Failure, out_of_device_memory
            if isinstance(e, Failure):
                failure = e.to_dict()
            elif out_of_device_memory(e):  # in the evaluator's own work on the task's tensors
                failure = {"status": "runtime_error", "kind": "out_of_memory", "side": "harness",
                           "message": f"GPU out of memory (while the evaluator handled the task's data, op '{op}')",
                           "hint": "use smaller inputs or free GPU memory on the runner", "retire": True}
            else:  # a bug of ours: say so plainly, and end this worker
                failure = {"status": "crashed", "kind": "internal", "side": "harness",
                           "message": f"internal error in the evaluator: {type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()[-4000:], "retire": True}
            channel.send({"event": "reply", "op": op, "failure": failure, "nonce": msg.get("nonce")})
            if failure.get("retire"):
                return 0


class _Compiles:
    """A compile worker's one role: the ahead-of-time compiles a CPU worker cannot make."""

    def __init__(self, scratch: str):
        self.scratch = scratch

    def handle(self, op: str, msg: dict) -> dict:
        if op != "compile":
            raise RuntimeError(f"unknown op '{op}' for a compile worker")
        files, jobs = msg.get("files"), msg.get("jobs")
        if not isinstance(files, dict) or not isinstance(jobs, list):
            raise RuntimeError("a compile request needs files and jobs")
        return {"resources": compile_tree(os.path.join(self.scratch, "tree"), files, jobs, int(msg.get("seed") or 0))}


def _make_role(msg: dict, scratch: Path):
    from .. import schema
    req = schema.from_dict(schema.EvalRequest, msg["request"])
    xdir = Path(msg["exchange"])
    if msg.get("role") == "reference":
        from .reference import ReferenceSide
        return ReferenceSide(req, _STATE["device"], _STATE["launches"], xdir, scratch)
    from .candidate import CandidateSide
    return CandidateSide(req, _STATE["device"], _STATE["launches"], xdir, scratch)


def now() -> float:
    return time.monotonic()


def compile_tree(scratch: str, files: dict[str, str], jobs: list[dict], seed: int = 0) -> list[dict]:
    """In a compile worker: write the tree into ``scratch``, import each job's module from it and
    compile the job's launch for its arch. One KernelResources dict per job, in order."""
    import importlib
    import sys
    from pathlib import Path

    from triton.runtime.jit import JITFunction

    from ..aot import LaunchSignature, compile_for, constexprs_from_wire, share_listings
    from ..schema import KernelResources, to_dict
    from .inputs import seed_all
    from .trees import Trees
    trees = Trees(Path(scratch), files, {}, set(), interp=False)
    trees.write("reference")
    root = trees.roots["reference"]
    out = []
    for j in jobs:
        try:
            name, paths = trees.module_name(root, j["rel"])
            sys.path[:0] = [p for p in paths if p not in sys.path]
            seed_all(seed)
            obj = getattr(importlib.import_module(name), j["kernel"])
            while not isinstance(obj, JITFunction) and hasattr(obj, "fn"):
                obj = obj.fn  # through @triton.autotune / @triton.heuristics
            sig = LaunchSignature(tuple(map(tuple, j["signature"])), constexprs_from_wire(j["constexprs"]),
                                  tuple(j["divisible"]), tuple(map(tuple, j["options"])),
                                  tuple(j.get("specialized", ())))
            stage = j.get("stage")
            r = compile_for(obj, j["kernel"], sig, j["arch"], stage if isinstance(stage, str) else None)
        except Exception as e:
            r = KernelResources(kernel=j["kernel"], arch=j["arch"], num_warps=0, num_stages=0, fits=False,
                                error=f"{type(e).__name__}: {e}"[:300])
        r.variant = j.get("variant")
        out.append(to_dict(r))
    share_listings(out)
    return out
