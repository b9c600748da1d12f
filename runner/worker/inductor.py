"""What PyTorch's compiler (Inductor) writes for the code under test: its Triton kernels and the
Python that calls them, captured before anything is compiled, with no GPU.

Worker side: it runs the user's function (Dynamo traces it), so it runs in the candidate's
worker of an evaluation whose ``options.inductor`` is set, after the function's own check, on
the inputs of the first case that ran. Inductor is asked for Triton on the CPU
(``cpu_backend = "triton"``) with a stand-in driver that names an sm_90 target, and the module it
writes is taken from the code cache's loader before it is loaded: no kernel is compiled or run
here. ``agent.compile.standalone`` turns what this returns into a standalone Triton file.

The reply (``generate``): ``code`` (Inductor's module), ``inputs`` (for each input of its
``call``, in order, where the function gets it: ``L['x']``, ``L['self']._modules['fc']._parameters['weight']``,
``L['x'].size()[0]``), ``returns`` (how the function's value is built from the graph's outputs),
``helpers`` (the source of each ``triton_helpers`` function the kernels use, with those they
use), ``externs`` (what each library call Inductor leaves in ``call`` is in ``torch``), or
``error`` (a graph break or another reason, with the user's line where there is one).
"""

from __future__ import annotations

import contextlib
import inspect
import re
from typing import Any, Optional

HELPERS_MODULE = "torch._inductor.runtime.triton_helpers"
SETUP_CALLS = {"set_driver_to_cpu", "set_driver_to_gpu"}
"""``triton_helpers`` calls at the top of a kernel's module that set Triton's driver for the
compile; the standalone file has none."""


class _Captured(Exception):
    pass


class _StubDriver:
    """What Inductor asks of Triton's driver while it writes code: the target it writes for."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0


@contextlib.contextmanager
def _writing_only(captured: list):
    import torch
    import torch._inductor.config as cfg
    from torch._inductor import codecache
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    saved_cfg = {k: getattr(cfg, k) for k in ("cpu_backend", "compile_threads", "fx_graph_cache")}
    saved_load = codecache.PyCodeCache.__dict__["load_by_key_path"]
    saved_driver = driver._active

    def load(cls, key, path, *a, **k):
        with open(path) as f:
            captured.append(f.read())
        raise _Captured()

    cfg.cpu_backend, cfg.compile_threads, cfg.fx_graph_cache = "triton", 1, False
    saved_mkldnn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False  # no channels-last copies for the CPU's convolutions
    codecache.PyCodeCache.load_by_key_path = classmethod(load)
    driver.set_active(_StubDriver(GPUTarget("cuda", 90, 32)))
    try:
        yield
    finally:
        for k, v in saved_cfg.items():
            setattr(cfg, k, v)
        codecache.PyCodeCache.load_by_key_path = saved_load
        driver._active = saved_driver
        torch.backends.mkldnn.enabled = saved_mkldnn


def _user_line(text: str, files: set[str]) -> Optional[str]:
    """The last 'File "...", line N' of the user's own files in a Dynamo message."""
    hits = [(f, n) for f, n in re.findall(r'File "([^"]+)", line (\d+)', text)
            if not files or any(f.endswith(u) for u in files)]
    if not hits:
        return None
    f, n = hits[-1]
    return f"{f.rsplit('/', 1)[-1]}:{n}"


def _break_message(e: BaseException, files: set[str]) -> str:
    text = str(e)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    first = re.sub(r"^(Unsupported|BackendCompilerFailed|InductorError):\s*", "", first)
    where = _user_line(text, files)
    return (f"PyTorch's compiler cannot take this function as one graph at {where}: {first}" if where
            else f"PyTorch's compiler cannot take this function as one graph: {first}")[:600]


def _returns(value: Any, n_outputs: int) -> Optional[dict]:
    """How the function's value is made of the graph's outputs: {"kind": tensor|tuple|list, "n": k}."""
    import torch
    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "n": 1} if n_outputs == 1 else None
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value) \
            and len(value) == n_outputs and not hasattr(value, "_fields"):
        return {"kind": type(value).__name__, "n": len(value)}
    return None


def _helper_sources(code: str) -> tuple[dict[str, str], Optional[str]]:
    """The ``triton_helpers`` functions the kernels in ``code`` use, and those they use in turn."""
    import importlib

    helpers = importlib.import_module(HELPERS_MODULE)
    want = set(re.findall(r"\btriton_helpers\.(\w+)", code)) - SETUP_CALLS
    out: dict[str, str] = {}
    while want:
        name = want.pop()
        if name in out:
            continue
        obj = getattr(helpers, name, None)
        fn = getattr(obj, "fn", None)
        if fn is None or not callable(fn):
            return out, f"it uses triton_helpers.{name}, which is not a Triton function GEAK can copy"
        src = inspect.getsource(fn)
        out[name] = src
        for other in set(re.findall(r"\b([A-Za-z_]\w*)\b", src)):
            o = getattr(helpers, other, None)
            # A @triton.jit function of the module (a JITFunction, or an InterpretedFunction
            # under TRITON_INTERPRET=1), not one it imports from Triton.
            raw = getattr(o, "fn", None)
            if other != name and other not in out and callable(raw) and \
                    getattr(raw, "__module__", None) == HELPERS_MODULE:
                want.add(other)
    return out, None


def _externs(code: str) -> tuple[dict[str, str], Optional[str]]:
    import torch
    out = {}
    for name in sorted(set(re.findall(r"\bextern_kernels\.(\w+)", code))):
        if callable(getattr(torch, name, None)):
            out[name] = f"torch.{name}"
        elif hasattr(torch.ops.aten, name):
            out[name] = f"torch.ops.aten.{name}"
        else:
            return out, f"it calls the library kernel extern_kernels.{name}, which has no torch equivalent"
    return out, None


def dtype_key(args: tuple, kwargs: dict) -> tuple:
    """The dtypes of a call's tensor arguments, in order: Inductor writes one module per key."""
    import torch
    vals = list(args) + [kwargs[k] for k in sorted(kwargs)]
    return tuple(str(v.dtype) if isinstance(v, torch.Tensor) else "-" for v in vals)


def generate_all(fn: Any, calls: list, user_files: set[str]) -> dict:
    """``generate`` for each call (one per set of input dtypes): ``{"variants": [...]}``, or the
    first generation's ``error``."""
    variants = []
    for args, kwargs in calls:
        g = generate(fn, args, kwargs, user_files)
        if g.get("error"):
            return g
        variants.append(g)
    return {"variants": variants} if len(variants) > 1 else variants[0]


def generate(fn: Any, args: tuple, kwargs: dict, user_files: set[str]) -> dict:
    """Inductor's code for ``fn(*args, **kwargs)``, sizes dynamic (see the module's text)."""
    import torch
    import torch._dynamo
    from torch._inductor.compile_fx import compile_fx

    captured: list[str] = []
    graphs: list[dict] = []

    def backend(gm, example_inputs):
        inputs, dtypes = [], {}
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                arg = node.meta.get("grapharg")
                src = getattr(arg, "source", None)
                name = (src.name if isinstance(getattr(src, "name", None), str)
                        else (src.name() if src is not None else None))
                inputs.append(name)
                ex = node.meta.get("example_value")
                if name and re.fullmatch(r"L\['\w+'\]", name) and isinstance(ex, torch.Tensor):
                    dtypes[name] = str(ex.dtype)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        n_out = len(out.args[0]) if isinstance(out.args[0], (tuple, list)) else 1
        graphs.append({"inputs": inputs, "outputs": n_out, "dtypes": dtypes})
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    saved_duck = None
    try:
        import torch.fx.experimental._config as fx_config
        saved_duck, fx_config.use_duck_shape = fx_config.use_duck_shape, False  # equal sizes stay apart
    except Exception:
        fx_config = None
    try:
        with torch.no_grad():
            value = fn(*args, **kwargs)
        # Python floats as constants, not 0-d tensor inputs read back with .item()
        with _writing_only(captured), torch.no_grad(), torch._dynamo.config.patch(specialize_float=True):
            torch.compile(fn, backend=backend, fullgraph=True, dynamic=True)(*args, **kwargs)
    except BaseException as e:
        if not captured:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            return {"error": _break_message(e, user_files)}
    finally:
        if fx_config is not None and saved_duck is not None:
            fx_config.use_duck_shape = saved_duck
        torch._dynamo.reset()
    if not captured or not graphs:
        return {"error": "PyTorch's compiler made no graph of this function (it computes nothing on tensors)"}
    if len(graphs) > 1 or len(captured) > 1:
        return {"error": "PyTorch's compiler split this function into several graphs"}
    code, graph = captured[-1], graphs[-1]
    if None in graph["inputs"]:
        return {"error": "an input of the compiled graph has no place in the function's arguments"}
    bad = [s for s in graph["inputs"] if not s.startswith("L[")]
    if bad:
        return {"error": f"the function reads {bad[0]} from outside its arguments (a global): "
                         "pass it as an argument or make it a module attribute"}
    returns = _returns(value, graph["outputs"])
    if returns is None:
        return {"error": "the function returns something other than a tensor or a tuple or list of "
                         f"tensors made by the graph ({type(value).__name__})"}
    if "async_compile.cpp" in code or "cpp_fused" in code:
        return {"error": "PyTorch's compiler wrote C++ rather than Triton for part of this function"}
    helpers, why = _helper_sources(code)
    if why:
        return {"error": why}
    externs, why = _externs(code)
    if why:
        return {"error": why}
    import triton.language as tl
    return {"code": code, "inputs": graph["inputs"], "dtypes": graph["dtypes"], "returns": returns, "helpers": helpers,
            "externs": externs, "torch": torch.__version__,
            "tl_math": sorted(n for n in dir(tl.math) if not n.startswith("_") and callable(getattr(tl.math, n)))}
