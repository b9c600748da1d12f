######################################## Imports ########################################
import pytest
import torch
import triton
import triton.language as tl

dtype_mapping = {'float16': torch.float16, 'float32': torch.float32}
######################################## Imports ########################################


@triton.jit
def row_scale_kernel(x_ptr, s_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    s = tl.load(s_ptr + row)
    tl.store(out_ptr + row * n_cols + cols, x * s, mask=mask)


def row_scale(x, s):
    out = torch.empty_like(x)
    M, N = x.shape
    row_scale_kernel[(M,)](x, s, out, N, BLOCK=triton.next_power_of_2(N))
    return out

##################################################################################################################################################

import os
import pytest
import torch
from torch.testing import assert_close
from tb_eval.perf.ROCm.performance_utils_pytest import PytestBenchmarker, do_bench_config

result_gold = {}


@pytest.mark.parametrize('M,N', [(4, 100), (16, 64)])
@pytest.mark.parametrize('dtype_str', ['float16', 'float32'])
def test_row_scale(M, N, dtype_str, request):
    torch.manual_seed(0)
    dtype = dtype_mapping[dtype_str]
    x = torch.randn(M, N, device='cuda', dtype=dtype)
    s = torch.randn(M, device='cuda', dtype=dtype)
    y = row_scale(x, s)
    result_gold['_CALL_SUCCESS_'] = torch.tensor([[1.0]])
    name = request.node.name.replace("[", "_").replace("]", "")
    result_gold[name] = y.clone().detach().cpu()
    assert_close(y, x * s[:, None], rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize('M,N', [(4096, 4096)])
def test_performance(M, N, request):
    x = torch.randn(M, N, device='cuda')
    s = torch.randn(M, device='cuda')
    bench = PytestBenchmarker(op_callable=lambda: row_scale(x, s), op_name="row_scale", config=do_bench_config())
    bench.run_benchmark(current_params_dict={"M": M, "N": N})


def test_save_results():
    torch.save(result_gold, __file__.replace('.', '_') + '.pt')
