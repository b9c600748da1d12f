"""Device knowledge that cannot be exercised here (ROCm) is pinned by unit tests."""

from runner.devices import KNOWN_GPUS, lookup, rocm_arch


def test_rocm_arch_name_parsing():
    assert rocm_arch("gfx942:sramecc+:xnack-") == "gfx942"
    assert rocm_arch("gfx90a") == "gfx90a"


def test_lookup_known_gpus():
    assert lookup("NVIDIA H200", "sm_90").bandwidth_gbs == 4800
    assert lookup("NVIDIA H100 80GB HBM3", "sm_90").name == "NVIDIA H100 SXM"
    assert lookup("NVIDIA H100 PCIe", "sm_90").bandwidth_gbs == 2000
    assert lookup("NVIDIA A100-SXM4-40GB", "sm_80").name == "NVIDIA A100 40GB"
    assert lookup("AMD Instinct MI300X", "gfx942").tflops["bfloat16"] == 1307
    # Some ROCm builds report a generic name: the arch decides.
    assert lookup("AMD Radeon Graphics", "gfx942").name == "AMD Instinct MI300X"
    assert lookup("AMD Instinct MI250X", "gfx90a").arch == "gfx90a"
    assert lookup("Some Other GPU", "sm_89") is None


def test_every_spec_is_complete():
    for spec in KNOWN_GPUS:
        assert spec.bandwidth_gbs > 0 and spec.l2_mb > 0
        assert {"float16", "bfloat16", "float32"} <= set(spec.tflops)
