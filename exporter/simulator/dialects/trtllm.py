"""TensorRT-LLM behind Triton (``tensorrtllm_backend``): ``nv_trt_llm_*`` + ``nv_inference_*``.

Per docs/reference/engine-metrics.md §5.1-5.2 and the backend README
samples: every TRT-LLM family is a gauge with one series per category label
(``request_type``, ``kv_cache_block_type``, ...), labels ``model`` and
``version``; Triton core latencies are cumulative **microsecond** counters and
the optional TTFT histogram ``nv_inference_first_response_histogram_ms`` is in
**milliseconds**. prometheus-cpp prints integers without a decimal point and
counters without ``_total``.
"""

from __future__ import annotations

import time

from exporter.simulator.dialects.text import Exposition, compact_number
from exporter.simulator.engine import ACTIVATION_MIB, EngineSnapshot

NAME = "trtllm"
MODEL = "tensorrt_llm"

#: Triton's default first-response histogram bounds, 100 / 500 / 2000 / 5000 ms (as seconds here)
TTFT_BUCKETS = (0.1, 0.5, 2.0, 5.0)
TOKEN_LEN_BUCKETS = (10, 50, 100, 500, 1000)

BUCKETS: dict[str, tuple[float, ...]] = {
    "ttft": TTFT_BUCKETS,
    "prompt_len": TOKEN_LEN_BUCKETS,
    "gen_len": TOKEN_LEN_BUCKETS,
}

US = 1e6


def render(snap: EngineSnapshot) -> str:
    cfg = snap.config
    s = snap.stats
    base = {"model": MODEL, "version": "1"}
    out = Exposition(fmt=compact_number)

    def family(name: str, help_text: str, label: str, values: list[tuple[str, float]], type_: str = "gauge") -> None:
        out.family(name, type_, help_text)
        for key, value in values:
            out.sample(name, {**base, label: key}, value)

    decode_running = snap.running - snap.running_prefill
    family(
        "nv_trt_llm_request_metrics",
        "TRT LLM request metrics",
        "request_type",
        [
            ("waiting", snap.waiting),
            ("context", snap.running_prefill),
            ("scheduled", snap.running),
            ("max", cfg.max_num_seqs),
            ("active", snap.running),
        ],
    )
    family(
        "nv_trt_llm_runtime_memory_metrics",
        "TRT LLM runtime memory metrics",
        "memory_type",
        [("pinned", 0), ("gpu", ACTIVATION_MIB * 1024 * 1024), ("cpu", 0)],
    )
    family(
        "nv_trt_llm_kv_cache_block_metrics",
        "TRT LLM KV cache block metrics",
        "kv_cache_block_type",
        [
            ("fraction", round(snap.kv_usage, 6)),
            ("tokens_per", cfg.block_size),
            ("used", snap.kv_blocks_used),
            ("free", snap.kv_blocks_total - snap.kv_blocks_used),
            ("max", snap.kv_blocks_total),
            ("reused", s.counter("prefix_hits_blocks")),
        ],
    )
    family(
        "nv_trt_llm_inflight_batcher_metrics",
        "TRT LLM inflight_batcher-specific metrics",
        "inflight_batcher_specific_metric",
        [
            ("paused_requests", 0),
            ("micro_batch_id", 0),
            ("generation_requests", decode_running),
            ("total_context_tokens", snap.last_step_prefill_tokens),
        ],
    )
    family(
        "nv_trt_llm_general_metrics",
        "General TRT LLM metrics",
        "general_type",
        [("iteration_counter", snap.steps), ("timestamp", int(time.time() * US))],
    )
    family(
        "nv_trt_llm_disaggregated_serving_metrics",
        "TRT LLM disaggregated serving metrics",
        "disaggregated_serving_type",
        [("kv_cache_transfer_ms", 0), ("request_count", 0)],
        type_="counter",
    )
    for name, help_text, metric_type, neutral in (
        ("nv_llm_input_token_len", "TRT LLM response metrics", "total_input_tokens", "prompt_len"),
        ("nv_llm_output_token_len", "TRT LLM response metrics", "total_output_tokens", "gen_len"),
    ):
        out.family(name, "histogram", help_text)
        out.histogram_series(name, {**base, "response_metric_type": metric_type}, s.histogram(neutral))

    finished = s.counter_by("finished", "reason")
    success = sum(v for reason, v in finished.items() if reason and reason != "abort")
    out.metric(
        "nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes", base, success
    )
    family(
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        "reason",
        [
            ("REJECTED", s.counter("rejected")),
            ("CANCELED", finished.get("abort", 0.0)),
            ("BACKEND", 0),
            ("OTHER", s.counter("validation_errors")),
        ],
        type_="counter",
    )
    out.metric(
        "nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)", base, success
    )
    out.metric(
        "nv_inference_exec_count",
        "counter",
        "Number of model executions performed (does not include cached requests)",
        base,
        success,
    )
    out.metric(
        "nv_inference_pending_request_count",
        "gauge",
        "Instantaneous number of pending requests awaiting execution per-model.",
        base,
        0,
    )
    for name, help_text, value in (
        (
            "nv_inference_request_duration_us",
            "Cumulative inference request duration in microseconds (includes cached requests)",
            s.histogram("e2e").sum,
        ),
        (
            "nv_inference_queue_duration_us",
            "Cumulative inference queuing duration in microseconds (includes cached requests)",
            s.histogram("queue").sum,
        ),
        (
            "nv_inference_compute_input_duration_us",
            "Cumulative compute input duration in microseconds (does not include cached requests)",
            0.0,
        ),
        (
            "nv_inference_compute_infer_duration_us",
            "Cumulative compute inference duration in microseconds (does not include cached requests)",
            s.histogram("inference").sum,
        ),
        (
            "nv_inference_compute_output_duration_us",
            "Cumulative inference compute output duration in microseconds (does not include cached requests)",
            0.0,
        ),
    ):
        out.metric(name, "counter", help_text, base, int(value * US))
    out.family("nv_inference_first_response_histogram_ms", "histogram", "Duration from request to first response in milliseconds")
    out.histogram_series("nv_inference_first_response_histogram_ms", base, s.histogram("ttft"), bound_scale=1000.0)
    return out.text()
