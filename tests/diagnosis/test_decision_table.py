"""The single-engine decision table of issue 20: each row is a situation (inputs built from schema
names, the way the other diagnosis tests build theirs) and the primary or notice it must give.

The rows follow the issue's "Why" bullets and the cases found on the way: the pick follows the
evidence (a preallocated framebuffer does not beat the KV cache, a busy board at its power cap does
not beat the queue, one preemption is not pressure), what cannot be judged is said (SM activity
missing, no process sampler) and "add replicas" is not given then, capacity misjudged is judged
from the engine's own KV model (free blocks against the blocks the head of the queue needs) and
from the queue-time histogram with the window's maxima when the gauges read 0 / 0 between bursts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from exporter.diagnosis import signals as s
from exporter.diagnosis.causality import SYMPTOM_CAUSES
from exporter.diagnosis.engine import Verdict
from exporter.diagnosis.thresholds import Thresholds
from exporter.engines import batchsize
from exporter.gpu.fields import pcie_capacity
from exporter.samples import Point
from tests.diagnosis.diag_points import ENG, GIB, _s, engine, gpu, healthy_gpu, histogram, primary, process, run

Build = Callable[[int], list[Point]]


def capacity_wait(n: float) -> Point:
    return _s("llm_scheduler_requests_waiting_by_reason", {**ENG, "reason": "capacity"}, n)


def kv_model(capacity_tokens: float, block: float) -> list[Point]:
    """What vLLM's cache_config_info maps to: KV capacity and block size, in tokens."""
    return [
        _s("llm_kv_cache_capacity_tokens", ENG, capacity_tokens),
        _s("llm_kv_cache_block_size_tokens", ENG, block),
    ]


def tokens(i: int, per_cycle: int, prompt: float, output: float) -> list[Point]:
    """Token counters and finished requests after ``i`` cycles of ``per_cycle`` requests."""
    done = float(per_cycle * i)
    return [
        _s("llm_prompt_tokens_total", ENG, done * prompt),
        _s("llm_generation_tokens_total", ENG, done * output),
        _s("llm_requests_finished_total", {**ENG, "reason": "length"}, done),
    ]


def latency(
    i: int, *, ttft: float | None = None, itl: float | None = None, queue: float | None = None, n: int = 30
) -> list[Point]:
    out: list[Point] = []
    for name, value in (
        ("llm_request_ttft_seconds", ttft),
        ("llm_request_inter_token_seconds", itl),
        ("llm_scheduler_queue_seconds", queue),
    ):
        if value is not None:
            out.append(histogram(name, [value] * (n * i)))
    return out


#: token-length buckets (prompt, output, tokens per step) and the exporter's batch-size buckets
TOKEN_BOUNDS = (16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, math.inf)


def config(**labels: str) -> Point:
    """``llm_engine_config_info`` with the text settings read from the engine (exporter/engines/settings.py)."""
    return _s("llm_engine_config_info", {**ENG, **labels}, 1.0)


def setting(name: str, value: float) -> Point:
    return _s("llm_engine_setting", {**ENG, "setting": name}, value)


def steps(i: int, per_second: int, tokens_per_step: float) -> Point:
    """vLLM's iteration_tokens after ``i`` one-second cycles of ``per_second`` engine steps."""
    return histogram("llm_scheduler_iteration_tokens", [tokens_per_step] * (per_second * i), TOKEN_BOUNDS)


def batches(i: int, size: float) -> Point:
    """The exporter's sampled running batch size after ``i`` scrapes that each saw ``size`` running."""
    return histogram("llm_scheduler_batch_size", [size] * i, batchsize.BOUNDS)


def lengths(i: int, prompt: float, output: float, n: int = 30) -> list[Point]:
    """The engine's prompt and output length histograms after ``i`` cycles of ``n`` requests."""
    return [
        histogram("llm_request_prompt_tokens", [prompt] * (n * i), TOKEN_BOUNDS),
        histogram("llm_request_generation_tokens", [output] * (n * i), TOKEN_BOUNDS),
    ]


#: a decode leaving the SMs mostly idle: kernels launched one by one (keyword arguments of gpu())
LAUNCHING: dict[str, Any] = {"util": 0.6, "sm": 0.15, "tensor": 0.05, "dram": 0.1, "pcie": 0.1e9}


def slots_reserving(i: int, per_slot: float, used: float) -> list[Point]:
    """llama.cpp with 4 slots of ``per_slot`` context each, all busy holding ``used`` tokens, six waiting."""
    return (
        engine(waiting=6, running=4, kv=None)
        + [
            _s("llm_scheduler_slots", ENG, 4),
            _s("llm_scheduler_slots_busy", ENG, 4),
            _s("llm_kv_cache_slot_context_tokens", ENG, per_slot),
            _s("llm_kv_cache_used_tokens", ENG, 4 * used),
            setting("context_per_slot", per_slot),
            setting("slots", 4),
        ]
        + tokens(i, 2, prompt=used / 3, output=2 * used / 3)
        + latency(i, ttft=3.0, queue=2.5, n=2)
    )


def tp_group(n: int, tx: float, rx: float, **sms: Any) -> list[Point]:
    """``n`` GPUs of one engine, each moving ``tx`` / ``rx`` bytes/s over a PCIe Gen5 x16 link whose
    capacity the GPU source publishes (exporter/gpu/fields.py)."""
    out: list[Point] = []
    for i in range(n):
        labels = {"gpu": str(i), "uuid": f"GPU-{i}"}
        out += gpu(i, **sms)
        out += [
            _s("llm_gpu_pcie_transmit_bytes_per_second", labels, tx),
            _s("llm_gpu_pcie_receive_bytes_per_second", labels, rx),
            _s("llm_gpu_pcie_link_generation", labels, 5),
            _s("llm_gpu_pcie_link_width", labels, 16),
            _s("llm_gpu_pcie_link_bandwidth_bytes_per_second", labels, pcie_capacity(5, 16) or 0.0),
        ]
    return out


CAPPED: dict[str, Any] = {"power": 699.0, "reasons": ["sw_power_cap"]}
BUSY: dict[str, Any] = {"util": 0.9, "sm": 0.6, "tensor": 0.3, "dram": 0.5}


@dataclass(frozen=True)
class Row:
    name: str
    build: Build
    #: the primary's cause id, or None for "no primary"
    primary: str | None
    cycles: int = 8
    #: a substring one notice must hold
    notice: str | None = None
    #: causes that must not hold at all
    not_holding: tuple[str, ...] = ()
    #: further checks on the last verdict
    check: Callable[[Verdict], None] | None = None


def _no_capacity_advice(v: Verdict) -> None:
    assert v.primary is not None
    assert "add replicas" not in v.primary.advice.lower() and "capacity:" not in v.primary.advice.lower(), v.primary.advice
    assert "DCGM profiling" in v.primary.advice, v.primary.advice


def _capacity_advice(v: Verdict) -> None:
    assert v.primary is not None
    assert "add replicas" in v.primary.advice, v.primary.advice


def _one_slot_flicker(i: int) -> list[Point]:
    """A CPU vLLM with one sequence slot under ten clients, scraped only in its idle moments after
    the first cycles: the gauges read 0 running / 0 waiting for the last 14 s of the window while
    the queue-time histogram shows every admitted request waited 4 s (no GPU at all)."""
    queued = i < 6
    points = engine(waiting=9 if queued else 0, running=1 if queued else 0, kv=0.13)
    points.append(capacity_wait(9 if queued else 0))
    points += kv_model(64 * 32, 32)  # --num-gpu-blocks-override 64, --block-size 32
    points += tokens(i, 1, prompt=72, output=160)
    points += latency(i, ttft=4.5, queue=4.0, n=2)
    return points


ROWS = [
    # ---------------------------------------------------------------- launch settings against what the engine sees (issue 23)
    Row(
        "an eager decode (enforce_eager) at 50 steps/s with SMs 15 % busy: CUDA graphs, backend named",
        lambda i: (
            gpu(**LAUNCHING)
            + process(0.5)
            + engine(waiting=0, running=16, kv=0.4)
            + [config(enforce_eager="true", attention_backend="FLASH_ATTN"), steps(i, 50, 16)]
            + latency(i, itl=0.3)
        ),
        "cuda_graphs_not_covering_batches",
        check=lambda v: _assert(
            v.primary is not None and "enforce_eager" in v.primary.chain and "attention backend FLASH_ATTN" in v.primary.chain,
            v.primary,
        ),
    ),
    Row(
        "graphs on, but the median batch (96) above the largest captured graph (32): CUDA graphs",
        lambda i: (
            gpu(**LAUNCHING)
            + process(0.5)
            + engine(waiting=0, running=96, kv=0.4)
            + [config(enforce_eager="false"), setting("cuda_graph_max_batch_size", 32), batches(i, 96), steps(i, 50, 96)]
            + latency(i, itl=0.3)
        ),
        "cuda_graphs_not_covering_batches",
        check=lambda v: _assert(v.primary is not None and "largest captured graph (32)" in v.primary.chain, v.primary),
    ),
    Row(
        "launch-bound for 6 cycles before the eager setting was read: CUDA graphs, the generic cause contributing",
        lambda i: (
            gpu(**LAUNCHING)
            + process(0.5)
            + engine(waiting=0, running=16, kv=0.4)
            + ([config(enforce_eager="true")] if i >= 6 else [])
            + [steps(i, 50, 16)]
            + latency(i, itl=0.3)
        ),
        "cuda_graphs_not_covering_batches",
        check=lambda v: _assert(
            any(c.cause == "launch_bound_small_kernels" and c.role == "contributing" for c in v.bottlenecks),
            [(c.cause, c.role) for c in v.bottlenecks],
        ),
    ),
    Row(
        "graphs capture the batches that run (16 of up to 64): the generic launch-bound cause",
        lambda i: (
            gpu(**LAUNCHING)
            + process(0.5)
            + engine(waiting=0, running=16, kv=0.4)
            + [config(enforce_eager="false"), setting("cuda_graph_max_batch_size", 64), batches(i, 16), steps(i, 50, 16)]
            + latency(i, itl=0.3)
        ),
        "launch_bound_small_kernels",
        not_holding=("cuda_graphs_not_covering_batches",),
    ),
    Row(
        "prompts of ~12k tokens over a 512-token step budget: TTFT is a count of prefill chunks",
        lambda i: (
            gpu(**BUSY)
            + engine(waiting=0, running=4, kv=0.4)
            + [setting("max_num_batched_tokens", 512)]
            + lengths(i, prompt=12000, output=200)
            + latency(i, ttft=3.0, itl=0.03)
        ),
        "prefill_chunk_too_small",
        check=lambda v: _assert(v.primary is not None and "ITL" in v.primary.advice and "steps" in v.primary.chain, v.primary),
    ),
    Row(
        "the same prompts under a 16k-token step budget: not the chunk size",
        lambda i: (
            gpu(**BUSY)
            + engine(waiting=0, running=4, kv=0.4)
            + [setting("max_num_batched_tokens", 16384)]
            + lengths(i, prompt=12000, output=200)
            + latency(i, ttft=0.3, itl=0.03)
        ),
        None,
        not_holding=("prefill_chunk_too_small",),
    ),
    Row(
        "llama.cpp slots reserving 8192 tokens each while requests use 300, six waiting: context reserved",
        lambda i: slots_reserving(i, per_slot=8192, used=300),
        "context_reserved_not_used",
        check=lambda v: _assert(v.primary is not None and "8192" in v.primary.chain and "-np" in v.primary.advice, v.primary),
    ),
    Row(
        "llama.cpp as it serves (no finished counter, no length histograms): the most a busy slot held",
        lambda i: [p for p in slots_reserving(i, per_slot=8192, used=300) if p.name != "llm_requests_finished_total"],
        "context_reserved_not_used",
        check=lambda v: _assert(v.primary is not None and "the most a busy slot held" in v.primary.chain, v.primary),
    ),
    Row(
        "context reserved 9x the use, read late: the reason found is the primary over the deeper, older generic misjudgment",
        lambda i: [
            p
            for p in slots_reserving(i, per_slot=8192, used=900)
            if i >= 6 or p.name not in ("llm_kv_cache_slot_context_tokens", "llm_engine_setting")
        ],
        "context_reserved_not_used",
        cycles=8,
        check=lambda v: _assert(
            "kv_fragmentation_or_capacity_misjudged" in v.holding
            and any(c.cause == "kv_fragmentation_or_capacity_misjudged" and c.role == "contributing" for c in v.bottlenecks),
            (v.holding, [(c.cause, c.role) for c in v.bottlenecks]),
        ),
    ),
    Row(
        "llama.cpp slots whose requests use half their context: slots are the limit, not over-reserved",
        lambda i: slots_reserving(i, per_slot=8192, used=4000),
        "kv_fragmentation_or_capacity_misjudged",
        not_holding=("context_reserved_not_used",),
    ),
    Row(
        "healthy with every setting known and fitting: none of the setting causes",
        lambda i: (
            healthy_gpu()
            + engine(waiting=0, running=16, kv=0.4)
            + [
                config(enforce_eager="false", attention_backend="FLASHINFER"),
                setting("cuda_graph_max_batch_size", 64),
                setting("max_num_batched_tokens", 8192),
                setting("context_per_slot", 4096),
                batches(i, 16),
                steps(i, 30, 40),
            ]
            + lengths(i, prompt=600, output=200)
            + latency(i, ttft=0.2, itl=0.02)
        ),
        None,
        not_holding=("cuda_graphs_not_covering_batches", "prefill_chunk_too_small", "context_reserved_not_used"),
        check=lambda v: _assert(v.state == "healthy", (v.state, v.holding)),
    ),
    # ---------------------------------------------------------------- the pick follows the evidence
    Row(
        "preallocated framebuffer with a full KV cache: the KV cache, not the framebuffer",
        lambda i: (
            gpu(**BUSY, mem_used=0.98 * 141 * GIB)
            + engine(waiting=20, running=12, kv=1.0, preemptions=4.0 * i)
            + [capacity_wait(20)]
            + latency(i, ttft=3.0, queue=2.0)
        ),
        "kv_cache_pressure",
        not_holding=("memory_capacity_exhausted",),
    ),
    Row(
        "preallocated framebuffer with a roomy KV cache: healthy, no exhaustion",
        lambda i: gpu(**BUSY, mem_used=0.98 * 141 * GIB) + engine(waiting=0, running=4, kv=0.4) + latency(i, ttft=0.2, itl=0.02),
        None,
        not_holding=("memory_capacity_exhausted",),
        check=lambda v: _assert(v.state == "healthy", v.state),
    ),
    Row(
        "full framebuffer and full KV cache with requests failing on engine errors: exhaustion",
        lambda i: (
            gpu(**BUSY, mem_used=0.99 * 141 * GIB)
            + engine(waiting=0, running=8, kv=0.97, finished={"stop": 20.0 * i, "error": 4.0 * i})
            + latency(i, ttft=0.3)
        ),
        "memory_capacity_exhausted",
    ),
    Row(
        "a full framebuffer on a GPU without an engine is a hardware finding",
        lambda i: gpu(**BUSY, mem_used=0.99 * 141 * GIB),
        None,
        check=lambda v: _assert(
            {c.cause: c.role for c in v.bottlenecks}.get("memory_capacity_exhausted") == "candidate", v.bottlenecks
        ),
    ),
    Row(
        "a busy board at its power cap (clock 85 %) under a queue backlog: the backlog",
        lambda i: (
            gpu(**BUSY, clock=0.85 * 1980e6, **CAPPED) + engine(waiting=60, running=8, kv=0.72) + latency(i, ttft=2.4, queue=1.9)
        ),
        "queue_backlog",
        check=lambda v: _assert(
            {c.cause: c.role for c in v.bottlenecks}.get("power_or_thermal_throttling") == "warning", v.bottlenecks
        ),
    ),
    Row(
        "a busy board at its power cap (clock 82 %) with 20 % of drafts accepted: low acceptance",
        lambda i: (
            gpu(**BUSY, clock=0.82 * 1980e6, **CAPPED)
            + engine(waiting=30, running=64, kv=0.6, drafted=4000.0 * i, accepted=800.0 * i)
            + latency(i, queue=1.1)
        ),
        "low_acceptance",
    ),
    Row(
        "a GPU held at half its clock, a queue, and clients timing out behind it: the throttle, not the timeouts",
        lambda i: (
            gpu(util=0.95, sm=0.88, tensor=0.7, dram=0.3, clock=0.52 * 1980e6, **CAPPED)
            + engine(waiting=60, running=64, kv=0.7, finished={"stop": 20.0 * i, "abort": 12.0 * i}, rejected=6.0 * i)
            + latency(i, ttft=0.9, queue=1.9)
        ),
        "power_or_thermal_throttling",
        check=lambda v: _assert(
            {c.cause: c.role for c in v.bottlenecks}.get("retries_and_timeouts") == "contributing", v.bottlenecks
        ),
    ),
    Row(
        "a GPU held at half its clock with requests queueing: the throttle",
        lambda i: (
            gpu(util=0.95, sm=0.88, tensor=0.7, dram=0.3, clock=0.52 * 1980e6, **CAPPED)
            + engine(waiting=30, running=64, kv=0.7)
            + latency(i, ttft=0.9, queue=0.9)
        ),
        "power_or_thermal_throttling",
    ),
    Row(
        "one preemption in a compute-bound overload is not KV-cache pressure",
        lambda i: (
            gpu(util=0.98, sm=0.95, tensor=0.9, dram=0.2)
            + engine(waiting=20, running=64, kv=0.6, preemptions=1.0 if i >= 3 else 0.0)
            + latency(i, ttft=3.0, queue=1.5)
        ),
        "compute_bound",
        notice="1 preemption in the window, below 3",
        not_holding=("kv_cache_pressure",),
    ),
    Row(
        "preemptions that are a pattern in the same overload are KV-cache pressure",
        lambda i: (
            gpu(util=0.98, sm=0.95, tensor=0.9, dram=0.2)
            + engine(waiting=20, running=64, kv=0.6, preemptions=3.0 * i)
            + latency(i, ttft=3.0, queue=1.5)
        ),
        "kv_cache_pressure",
    ),
    Row(
        "PCIe copies stretch every step and the KV cache fills as their consequence: the copies",
        lambda i: (
            gpu(util=0.9, sm=0.17, tensor=0.05, dram=0.2, pcie=10e9)
            + process(0.5)
            + engine(waiting=20, running=32, kv=0.93)
            + [capacity_wait(20)]
            + latency(i, queue=1.5)
        ),
        "pcie_transfer_bound",
        check=lambda v: _assert(
            {c.cause: c.role for c in v.bottlenecks}.get("kv_cache_pressure") == "contributing", v.bottlenecks
        ),
    ),
    # the same PCIe counters, two causes told apart by the traffic's shape (issue 33)
    Row(
        "TP 4 over PCIe, 49 GB/s each way per GPU of 63, SMs 31 % busy, a slow decode: the link, not host copies",
        lambda i: (
            tp_group(4, 49e9, 49e9, util=0.95, sm=0.31, tensor=0.1, dram=0.3)
            + process(0.5)
            + engine(waiting=0, running=32, kv=0.4)
            + [setting("tensor_parallel_size", 4)]
            + latency(i, itl=0.35)
        ),
        "communication_bound",
        not_holding=("pcie_transfer_bound",),
        check=lambda v: _assert(
            v.primary is not None and "TP 4 over PCIe Gen5 x16: 49 GB/s of 63 GB/s per GPU" in v.primary.chain, v.primary
        ),
    ),
    Row(
        "every rank of a TP 4 engine offloads KV one way over PCIe while its SMs idle: the copies, not the link",
        lambda i: (
            tp_group(4, 50e9, 2e9, util=0.9, sm=0.17, tensor=0.05, dram=0.2)
            + process(0.5)
            + engine(waiting=0, running=32, kv=0.4)
            + [setting("tensor_parallel_size", 4)]
            + latency(i, itl=0.35)
        ),
        "pcie_transfer_bound",
        not_holding=("communication_bound",),
    ),
    Row(
        "a queue and the timeouts and rejections it causes, nothing at its limit: the queue, failures follow",
        lambda i: (
            gpu(**BUSY)
            + process(0.5)
            + engine(waiting=60, running=8, kv=0.72, finished={"stop": 20.0 * i, "abort": 8.0 * i}, rejected=6.0 * i)
            + latency(i, ttft=0.9, queue=1.9)
        ),
        "queue_backlog",
        check=lambda v: _assert(
            [x.id for x in v.symptoms] == ["failures", "queueing"]
            and {c.cause: c.role for c in v.bottlenecks}.get("retries_and_timeouts") == "contributing",
            (v.symptoms, v.bottlenecks),
        ),
    ),
    # ---------------------------------------------------------------- say what cannot be judged
    Row(
        "host-bound batch-1 engine, NVML only, util 6 %: util proves the SMs idle, the host ceiling is judged",
        lambda i: gpu(util=0.06, clock=None) + process(0.997) + engine(waiting=0, running=1, kv=0.01) + latency(i, itl=0.35),
        "serial_host_ceiling",
        notice='judged from NVML "GPU util" (6 %',
    ),
    Row(
        "host-bound engine, NVML only, util 45 %: the host ceiling cannot be judged, no 'add replicas'",
        lambda i: (
            gpu(util=0.45, clock=None) + process(0.997) + engine(waiting=12, running=64, kv=0.7) + latency(i, ttft=3.0, queue=2.5)
        ),
        "queue_backlog",
        notice="the serial host ceiling could not be judged (SM activity missing",
        check=_no_capacity_advice,
    ),
    Row(
        "the same queue with SM activity showing busy SMs: a capacity verdict, add replicas",
        lambda i: gpu(**BUSY) + process(0.5) + engine(waiting=12, running=64, kv=0.7) + latency(i, ttft=3.0, queue=2.5),
        "queue_backlog",
        check=_capacity_advice,
    ),
    Row(
        "idle SMs, no process sampler: the advice names the process sampler, not replicas",
        lambda i: (
            gpu(util=0.2, sm=0.1, tensor=0.02, dram=0.1)
            + engine(waiting=40, running=64, kv=0.3)
            + latency(i, ttft=3.0, queue=2.5)
        ),
        "queue_backlog",
        notice="no process sampler",
        check=lambda v: _assert(
            v.primary is not None and "--engine-process" in v.primary.advice and "add replicas" not in v.primary.advice,
            v.primary,
        ),
    ),
    Row(
        "no GPU data and no first-party reason: the GPU is unknown, never busy, no capacity claim",
        lambda i: engine(waiting=9, running=1, kv=0.1) + latency(i, ttft=3.0, queue=2.0),
        "queue_backlog",
        not_holding=("kv_fragmentation_or_capacity_misjudged",),
        check=lambda v: _assert("GPU metrics" in v.primary.summary if v.primary else False, v.primary),
    ),
    Row(
        "no GPU data but the engine says the requests wait for capacity: capacity misjudged",
        lambda i: engine(waiting=9, running=1, kv=0.1) + [capacity_wait(9)] + latency(i, ttft=3.0, queue=2.0),
        "kv_fragmentation_or_capacity_misjudged",
    ),
    # ---------------------------------------------------------------- the engine's own KV model
    Row(
        "KV 35 % full, 3 running, 15 waiting for capacity, the free cache holds them: capacity misjudged",
        lambda i: (
            gpu(**BUSY)
            + engine(waiting=15, running=3, kv=0.35)
            + [capacity_wait(15)]
            + kv_model(32768, 16)
            + tokens(i, 3, prompt=512, output=256)
            + latency(i, ttft=3.0, queue=2.5)
        ),
        "kv_fragmentation_or_capacity_misjudged",
        check=lambda v: _assert(
            v.primary is not None and "free blocks would hold the next 3 waiting (48 blocks each)" in v.primary.summary,
            v.primary,
        ),
    ),
    Row(
        "KV 35 % full of a small cache that cannot hold the head of the queue: not a misjudgment",
        lambda i: (
            gpu(**BUSY)
            + engine(waiting=15, running=3, kv=0.35)
            + [capacity_wait(15)]
            + kv_model(3072, 16)  # 192 blocks: 125 free, the next 3 need 144
            + tokens(i, 3, prompt=512, output=256)
            + latency(i, ttft=3.0, queue=2.5)
        ),
        "queue_backlog",
        not_holding=("kv_fragmentation_or_capacity_misjudged",),
    ),
    Row(
        "KV 60 % full with one long request running and short ones waiting: the model, not a fixed %",
        lambda i: (
            gpu(**BUSY)
            + engine(waiting=6, running=1, kv=0.6)
            + [capacity_wait(6)]
            + kv_model(32768, 16)
            + tokens(i, 1, prompt=256, output=256)
            + latency(i, ttft=3.0, queue=2.5)
        ),
        "kv_fragmentation_or_capacity_misjudged",
    ),
    Row(
        "8 slots and a cache 72 % used by them (the queue_backlog scenario): a backlog, not a misjudgment",
        lambda i: (
            gpu(**BUSY)
            + engine(waiting=60, running=8, kv=0.72)
            + [capacity_wait(60)]
            + kv_model(480 * 16, 16)
            + tokens(i, 8, prompt=512, output=256)
            + latency(i, ttft=2.4, queue=1.9)
        ),
        "queue_backlog",
        not_holding=("kv_fragmentation_or_capacity_misjudged",),
    ),
    Row(
        "llama.cpp: the one slot busy, its context mostly free, requests waiting: capacity misjudged",
        lambda i: (
            gpu(**BUSY)
            + engine(waiting=5, running=1, kv=None)
            + [
                _s("llm_scheduler_slots", ENG, 1),
                _s("llm_scheduler_slots_busy", ENG, 1),
                _s("llm_kv_cache_slot_context_tokens", ENG, 4096),
                _s("llm_kv_cache_used_tokens", ENG, 600),
            ]
            + latency(i, ttft=6.0)
        ),
        "kv_fragmentation_or_capacity_misjudged",
        check=lambda v: _assert(v.primary is not None and "all 1 slots busy" in v.primary.summary, v.primary),
    ),
    # ---------------------------------------------------------------- issue 12's open case
    Row(
        "one-slot vLLM, gauges 0 / 0 between bursts, the histogram proves 4 s waits: capacity misjudged",
        _one_slot_flicker,
        "kv_fragmentation_or_capacity_misjudged",
        cycles=20,
        check=lambda v: _assert(
            v.signals[s.WAITING_MAX_QUEUE] == 0 and v.signals[s.WAITING_MAX_WINDOW] == 9 and v.signals[s.RUNNING_MAX] == 1,
            v.signals,
        ),
    ),
]


def _assert(ok: bool, what: object) -> None:
    assert ok, what


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_decision_table(row: Row) -> None:
    v = run([row.build(i) for i in range(row.cycles)])[-1]
    assert primary(v) == row.primary, (primary(v), v.holding, v.notices, v.primary.chain if v.primary else None)
    if row.primary is not None:
        assert v.state == "degraded" and v.primary is not None and v.primary.chain
        if row.primary not in SYMPTOM_CAUSES:  # a symptom-only primary's chain is its symptoms
            assert "←" in v.primary.chain and v.primary.chain.endswith(v.primary.summary), v.primary.chain
    for cause in row.not_holding:
        assert cause not in v.holding, (cause, v.holding)
    if row.notice is not None:
        assert any(row.notice in n for n in v.notices), v.notices
    if row.check is not None:
        row.check(v)


def test_a_missing_input_lowers_the_confidence_of_the_same_verdict() -> None:
    """The same backlog judged with SM activity (busy SMs rule the host ceiling out) and without it
    (NVML only, util 45 %: the host ceiling could explain the queue and was not judged)."""

    def backlog(gpu_points: list[Point]) -> Verdict:
        return run(
            [
                gpu_points + process(0.997) + engine(waiting=12, running=64, kv=0.7) + latency(i, ttft=3.0, queue=2.5)
                for i in range(8)
            ]
        )[-1]

    seen = backlog(gpu(**BUSY))
    blind = backlog(gpu(util=0.45, clock=None))
    assert primary(seen) == primary(blind) == "queue_backlog"
    assert blind.primary is not None and seen.primary is not None
    assert blind.primary.confidence < seen.primary.confidence - 0.05, (blind.primary.confidence, seen.primary.confidence)


def test_the_one_slot_case_before_the_window_maxima_was_not_claimed() -> None:
    """The same flicker with the waits 10 ms long: the histogram proves nothing, the window's
    maxima are not read and no capacity misjudgment is claimed (the maxima are evidence only
    behind proven waits)."""

    def short_waits(i: int) -> list[Point]:
        points = [p for p in _one_slot_flicker(i) if p.name != "llm_scheduler_queue_seconds"]
        return points + [histogram("llm_scheduler_queue_seconds", [0.01] * (2 * i))]

    v = run([short_waits(i) for i in range(20)])[-1]
    assert "kv_fragmentation_or_capacity_misjudged" not in v.holding, v.holding


def test_the_preemption_count_is_a_setting_and_the_notice_follows_it() -> None:
    """With ``preemption_min_count: 1`` the same single preemption counts, and no notice says otherwise."""
    row = next(r for r in ROWS if r.name.startswith("one preemption"))
    v = run([row.build(i) for i in range(row.cycles)], thresholds=Thresholds(preemption_min_count=1))[-1]
    assert "kv_cache_pressure" in v.holding
    assert not any("preemption in the window" in n for n in v.notices), v.notices
