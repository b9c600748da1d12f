# A task in TritonBench-G's layout (code, the separator, the test), written for the project's
# tests: an autograd.Function whose forward calls a helper of the file, as TritonBench-G's
# fifth_order_sph_harmonics does, so that the helper's calls are among the test's recorded calls.
import torch
import triton
import triton.language as tl


def lastdim_blocks(x: torch.Tensor, block: int) -> int:
    return triton.cdiv(x.numel(), block)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * factor, mask=m)


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, factor: float = 2.0, block: int = 64):
        out = torch.empty_like(x)
        scale_kernel[(lastdim_blocks(x, block),)](x, out, x.numel(), factor, BLOCK=block)
        return out


##################################################################################################################################################


def test_scale():
    x = torch.randn(300, 3, device="cuda")
    results = {}
    for i, (factor, block) in enumerate([(2.0, 64), (0.5, 128)]):
        results[f"case_{i}"] = Scale.apply(x, factor, block)
    return results


result_gold = test_scale()
