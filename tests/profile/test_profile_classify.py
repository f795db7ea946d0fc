"""The operator classifier: the name table kind by kind, and the split of a realistic GPU trace."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from exporter.profile.classify import KIND_PATTERNS, MAX_NAMES, OVERFLOW_NAME, CpuOpSplit, Split, kind_of
from exporter.schema import OPERATOR_KINDS
from tests.profile.traces import KERNELS, cpu_trace, gpu_trace

#: (name, category, kind): CUDA kernel names as the libraries name them, and CPU operator names
NAMES = [
    ("flash_fwd_splitkv_kernel", "kernel", "attention"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "kernel", "attention"),
    ("BatchPrefillWithPagedKVCacheKernel", "kernel", "attention"),
    ("void vllm::paged_attention_v2_kernel<__nv_bfloat16>", "kernel", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "kernel", "attention"),
    ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>", "kernel", "attention"),
    ("vllm::unified_attention_with_output", "cpu_op", "attention"),
    ("aten::scaled_dot_product_attention", "cpu_op", "attention"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "kernel", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", "kernel", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>", "kernel", "gemm"),
    ("cublasLt::splitKreduce_kernel<32, 16, int, float>", "kernel", "gemm"),
    ("aten::mm", "cpu_op", "gemm"),
    ("aten::addmm", "cpu_op", "gemm"),
    ("aten::linear", "cpu_op", "gemm"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", "communication"),
    ("ncclDevKernel_AllGather_RING_LL", "kernel", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>", "kernel", "communication"),
    ("c10d::allreduce_", "cpu_op", "communication"),
    ("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", "memory_copy"),
    ("Memset (Device)", "gpu_memset", "memory_copy"),
    ("anything the copy engine ran", "gpu_memcpy", "memory_copy"),
    ("aten::copy_", "cpu_op", "memory_copy"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>", "kernel", "sampling"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", "kernel", "sampling"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>", "kernel", "sampling"),
    ("aten::multinomial", "cpu_op", "sampling"),
    ("top_k_top_p_sampling_from_probs", "kernel", "sampling"),
    ("void vllm::rms_norm_kernel<c10::BFloat16>", "kernel", "other"),
    ("triton_poi_fused_mul_silu_0", "kernel", "other"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "kernel", "other"),
    ("", "kernel", "other"),
    # CPU operators as the CPU vLLM 0.32 of tests/integration/ records them (its real trace)
    ("_C::onednn_mm", "cpu_op", "gemm"),
    ("vllm::unified_kv_cache_update", "cpu_op", "attention"),
    ("_C::cpu_attention_with_kv_cache", "cpu_op", "attention"),
    ("_C::cpu_attn_reshape_and_cache", "cpu_op", "attention"),
    ("_C::fused_gumbel_argmax", "cpu_op", "sampling"),
    ("aten::_to_copy", "cpu_op", "memory_copy"),
    ("_C::rotary_embedding", "cpu_op", "other"),
]


@pytest.mark.parametrize(("name", "cat", "kind"), NAMES, ids=[f"{k}:{n[:40]}" for n, _, k in NAMES])
def test_each_name_of_the_table_gets_its_kind(name: str, cat: str, kind: str) -> None:
    assert kind_of(name, cat) == kind


def _split_of(events: Iterable[Mapping[str, Any]]) -> Split:
    """The split of a sequence of trace events, one ``add`` each, as the trace reader feeds it."""
    split = Split()
    for event in events:
        split.add(event)
    return split


def test_the_table_names_every_kind_and_only_those() -> None:
    assert {k for k, _ in KIND_PATTERNS} | {"other"} == set(OPERATOR_KINDS)
    assert {kind for _, _, kind in NAMES} == set(OPERATOR_KINDS)


def test_a_realistic_gpu_trace_splits_into_the_kernel_time_it_was_built_with() -> None:
    wanted = {"attention": 620.0, "gemm": 250.0, "communication": 60.0, "memory_copy": 40.0, "sampling": 20.0, "other": 10.0}
    split = _split_of(gpu_trace(wanted)["traceEvents"])
    total = sum(wanted.values())
    shares = split.shares()
    assert set(shares) == set(OPERATOR_KINDS)
    for kind, us in wanted.items():
        assert math.isclose(shares[kind], us / total, rel_tol=1e-9), (kind, shares)
    assert math.isclose(sum(shares.values()), 1.0, rel_tol=1e-12)
    assert math.isclose(split.time_us, total, rel_tol=1e-9)
    assert split.kernels == 3 * sum(len(v) for v in KERNELS.values())
    # the CPU operators, launches, flows, annotations and metadata are not kernel time
    assert split.other_events > split.kernels
    top = split.top()
    assert top["attention"][0]["name"].startswith("void flash_fwd_splitkv_kernel")
    assert top["attention"][0]["count"] == 3
    assert math.isclose(sum(t["seconds"] for t in top["gemm"]), 250e-6, rel_tol=1e-9)


def test_a_cpu_only_trace_has_no_kernels_and_no_shares() -> None:
    split = _split_of(cpu_trace()["traceEvents"])
    assert split.kernels == 0
    assert split.shares() == {}
    assert split.other_events == 51


@pytest.mark.parametrize(
    "event",
    [
        {"ph": "B", "cat": "kernel", "name": "gemm", "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "gemm"},
        {"ph": "X", "cat": "kernel", "name": "gemm", "dur": "5"},
        {"ph": "X", "cat": "kernel", "name": "gemm", "dur": -1},
        {"ph": "X", "cat": "kernel", "name": "gemm", "dur": True},
        {"ph": "X", "cat": "kernel", "name": "gemm", "dur": float("nan")},
        {"ph": "X", "cat": ["kernel"], "name": "gemm", "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 5},
    ],
)
def test_events_that_are_not_complete_gpu_activity_add_no_time(event: dict[str, Any]) -> None:
    split = Split()
    split.add(event)
    assert split.kernels == 0 and split.time_us == 0


def test_a_flood_of_kernel_names_is_tallied_within_bounds_and_still_counted_by_kind() -> None:
    split = Split()
    for i in range(MAX_NAMES + 500):
        split.add({"ph": "X", "cat": "kernel", "name": f"gemm_variant_{i}" + "x" * 500, "dur": 1.0})
    assert len(split.names) == MAX_NAMES + 1
    assert split.names[OVERFLOW_NAME].count == 500
    assert split.shares()["gemm"] == 1.0
    assert all(len(n) <= 200 for n in split.names)
    assert all(t["name"] != OVERFLOW_NAME for t in split.top()["gemm"])


def _op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def test_cpu_operators_split_by_self_time_not_by_nested_duration() -> None:
    cpu = CpuOpSplit()
    # aten::linear (100 us) holds aten::addmm (80 us), which holds aten::copy_ (10 us); then attention 50 us;
    # another thread runs a 20 us softmax at the same time (threads nest separately); events arrive unsorted
    for event in [
        _op("vllm::unified_attention_with_output", 200, 50),
        _op("aten::addmm", 110, 80),
        _op("aten::linear", 100, 100),
        _op("aten::copy_", 120, 10),
        _op("aten::softmax", 105, 20, tid=2),
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 999},  # not a CPU operator
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": "soon", "dur": 5},  # no usable time
    ]:
        cpu.add(event)
    assert cpu.events == 5
    assert cpu.self_time_us() == {
        "attention": 50,
        "gemm": 20 + 70,
        "communication": 0,
        "memory_copy": 10,
        "sampling": 20,
        "other": 0,
    }
    assert math.isclose(sum(cpu.shares().values()), 1.0)


def test_cpu_operators_past_the_cap_are_left_out_and_counted() -> None:
    cpu = CpuOpSplit(limit=10)
    for i in range(15):
        cpu.add(_op("aten::mm", i * 10, 5))
    assert cpu.events == 10 and cpu.truncated == 5
    assert cpu.shares()["gemm"] == 1.0
