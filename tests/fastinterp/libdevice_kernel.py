"""A kernel calling libdevice (tanh, log1p, pow, round, isnan; the generic and the CUDA module) under
the interpreter with ``runner.worker.fastinterp.install_libdevice``; prints the largest differences from torch."""
import os; os.environ["TRITON_INTERPRET"]="1"
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from runner.worker import fastinterp
print(len(fastinterp.install_libdevice()))  # names installed
import torch, triton, triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cl
@triton.jit
def k(x_ptr, o_ptr, p_ptr, n, XBLOCK: tl.constexpr):
    i = tl.arange(0, XBLOCK)
    m = i < n
    x = tl.load(x_ptr + i, m)
    y = libdevice.tanh(x) + cl.log1p(tl.abs(x)) + libdevice.pow(tl.abs(x), 1.5) + libdevice.round(x)
    y = tl.where(libdevice.isnan(x), 0.0, y)
    tl.store(o_ptr + i, y, m)
    tl.store(p_ptr + i, libdevice.tanh(x.to(tl.float16)), m)
x = torch.randn(100); x[3] = float("nan"); o = torch.empty(100); p = torch.empty(100, dtype=torch.float16)
k[(1,)](x, o, p, 100, XBLOCK=128)
ref = torch.tanh(x) + torch.log1p(x.abs()) + x.abs().pow(1.5) + torch.where(x >= 0, torch.floor(x + 0.5), -torch.floor(-x + 0.5))
ref = torch.where(x.isnan(), 0.0, ref)
print((o - ref).abs().max(), (p.float() - torch.tanh(x.half()).float()).nan_to_num().abs().max())
