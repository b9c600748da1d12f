import dataclasses

import torch
import triton
import triton.language as tl


class Config:
    def __init__(self, block):
        self.block = block
        self.scale = 2.0


@dataclasses.dataclass
class Opts:
    shift: float
    bias: torch.Tensor


class Scaler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((1,), 3.0))


@triton.jit
def axpb_kernel(x_ptr, out_ptr, n, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * a + b, mask=m)


def axpb(x, cfg, opts, mod):
    out = torch.empty_like(x)
    n = x.numel()
    a = cfg.scale * float(mod.weight.detach()[0])
    axpb_kernel[(triton.cdiv(n, cfg.block),)](x, out, n, a, opts.shift, BLOCK=cfg.block)
    return out + opts.bias.sum() * 0



##################################################################################################################################################


def test_axpb():
    x = torch.randn(300, device="cuda")
    results = {}
    results["test_case_1"] = axpb(x, Config(128), Opts(0.5, torch.ones(2)), Scaler())
    return results


result_gold = test_axpb()
