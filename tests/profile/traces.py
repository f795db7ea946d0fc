"""A small GPU-style torch.profiler (Kineto) Chrome trace, generated: what vLLM's workers write.

Why generated and not a copied file: a real trace is tens of MB and carries a
machine's paths; the structure here follows what torch.profiler's Kineto export
writes (``schemaVersion``, ``deviceProperties``, then ``traceEvents`` with ``M``
metadata, ``cpu_op`` / ``cuda_runtime`` CPU events, ``kernel`` / ``gpu_memcpy`` /
``gpu_memset`` GPU events and ``s``/``f`` flow arrows), with kernel names as
CUDA, cuBLAS, FlashAttention, NCCL and PyTorch name them. Each kind's kernel time
is given, so a test knows the split it must find.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

#: kind -> kernels of that kind: (category, name) as the CUDA libraries name them
KERNELS: dict[str, list[tuple[str, str]]] = {
    "attention": [
        (
            "kernel",
            "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
            "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
            "(flash::Flash_fwd_params)",
        ),
        ("kernel", "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"),
    ],
    "gemm": [
        (
            "kernel",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        ),
        ("kernel", "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn"),
    ],
    "communication": [
        ("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ],
    "memory_copy": [
        ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)"),
        ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)"),
        ("gpu_memset", "Memset (Device)"),
    ],
    "sampling": [
        (
            "kernel",
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
            "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
        ),
        (
            "kernel",
            "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, unsigned int>)",
        ),
    ],
    "other": [
        ("kernel", "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, float, int, int)"),
        ("kernel", "triton_poi_fused_mul_silu_0"),
    ],
}

#: CPU operators the profiler records around the kernels (they must not count as kernel time)
CPU_OPS = ("aten::linear", "aten::addmm", "vllm::unified_attention_with_output", "aten::copy_", "aten::softmax")


def gpu_trace(kernel_us: dict[str, float], repeats: int = 3, pid: int = 4242) -> dict[str, Any]:
    """A trace whose GPU kernels of each kind take ``kernel_us[kind]`` microseconds in all.

    Each kind's time is spread over its kernels and ``repeats`` decode steps, with a
    CPU operator and a launch event before every kernel and a flow arrow between them.
    """
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
    ts = 1_700_000_000_000.0
    corr = 1
    for step in range(repeats):
        for kind, kernels in KERNELS.items():
            each = kernel_us.get(kind, 0.0) / (len(kernels) * repeats)
            if each <= 0:
                continue
            for cat, name in kernels:
                cpu = CPU_OPS[corr % len(CPU_OPS)]
                events.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": cpu,
                        "pid": pid,
                        "tid": pid,
                        "ts": ts,
                        "dur": 30.0,
                        "args": {"External id": corr},
                    }
                )
                launch = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
                events.append(
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": launch,
                        "pid": pid,
                        "tid": pid,
                        "ts": ts + 2,
                        "dur": 5.0,
                        "args": {"correlation": corr},
                    }
                )
                events.append({"ph": "s", "id": corr, "pid": pid, "tid": pid, "ts": ts + 2, "cat": "ac2g", "name": "ac2g"})
                args = {"device": 0, "stream": 7, "correlation": corr, "grid": [132, 1, 1], "block": [128, 1, 1]}
                events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts + 10, "dur": each, "args": args})
                events.append(
                    {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": ts + 10, "cat": "ac2g", "name": "ac2g", "bp": "e"}
                )
                ts += each + 40
                corr += 1
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"execute_model_{step}", "pid": pid, "tid": pid, "ts": ts, "dur": 1.0}
        )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045051392, "computeMajor": 9}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
        "traceEvents": events,
        "traceName": "/profiles/rank0.pt.trace.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1700000000000000000,
    }


def cpu_trace(pid: int = 4242) -> dict[str, Any]:
    """What a CPU-only vLLM writes: CPU operators and annotations, no GPU activity."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}}]
    ts = 1_700_000_000_000.0
    for i in range(50):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": CPU_OPS[i % len(CPU_OPS)], "pid": pid, "tid": pid, "ts": ts, "dur": 120.0}
        )
        ts += 150
    return {"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: Path, trace: dict[str, Any]) -> Path:
    """``trace`` as JSON, gzipped when ``path`` ends in .gz (torch_profiler_use_gzip, vLLM's default)."""
    data = json.dumps(trace).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)
    return path
