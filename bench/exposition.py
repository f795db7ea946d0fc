"""Realistic vLLM 0.33 expositions for benchmarks: names, labels and bucket sets as vLLM serves them.

Why generated: the benchmark figures in the issue are for a 55 KB single-engine
exposition and an 800 KB one from 20 data-parallel engines (8,840 samples);
this builds both deterministically, with `_created` series as prometheus_client
emits them.
"""

from __future__ import annotations

import random

MODEL = "meta-llama/Llama-3.1-70B-Instruct"

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]
ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
N_BUCKETS = [1, 2, 5, 10, 20]

GAUGES = [
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
]
COUNTERS = [
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache sharing."),
    ("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache sharing."),
    ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."),
    ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:generation_tokens", "Number of generation tokens processed."),
    ("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."),
    ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
    ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
    ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
]
#: counters with one extra label: (name, help, label, values)
LABELLED_COUNTERS = [
    ("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", "position", ["0", "1", "2"]),
    ("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", "source", ["local_compute", "local_cache_hit", "external_kv_transfer"]),
    ("vllm:prompt_tokens_cached_by_source", "Number of cached prompt tokens by source.", "source", ["device", "host", "p2p", "disk", "external_unspecified"]),
]
HISTOGRAMS = [
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_BUCKETS),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", LATENCY_BUCKETS),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", LATENCY_BUCKETS),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS),
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", TOKEN_BUCKETS),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", TOKEN_BUCKETS),
    ("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", TOKEN_BUCKETS),
    ("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", TOKEN_BUCKETS),
    ("vllm:request_num_preemptions", "Number of preemptions per finished request.", TOKEN_BUCKETS),
]
FINISHED_REASONS = ["stop", "length", "abort", "error", "repetition"]


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def vllm_exposition(engines: int = 1, seed: int = 7, created: bool = True) -> str:
    """A vLLM 0.33 /metrics body for `engines` data-parallel engine cores."""
    rng = random.Random(seed)
    out: list[str] = []
    created_ts = 1.7645e9

    def labels(engine: int, extra: str = "") -> str:
        return f'engine="{engine}",model_name="{MODEL}"' + (f",{extra}" if extra else "")

    for name, help_text in GAUGES:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for e in range(engines):
            out.append(f"{name}{{{labels(e)}}} {_fmt(rng.random() * 20)}")
    name = "vllm:num_requests_waiting_by_reason"
    out += [f"# HELP {name} Number of requests waiting, by reason.", f"# TYPE {name} gauge"]
    for e in range(engines):
        for reason in ("capacity", "deferred"):
            out.append(f'{name}{{{labels(e, f"reason={chr(34)}{reason}{chr(34)}")}}} {_fmt(rng.randint(0, 5))}')
    for name, help_text in COUNTERS:
        out += [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"]
        for e in range(engines):
            out.append(f"{name}_total{{{labels(e)}}} {_fmt(rng.randint(0, 10**7))}")
        if created:
            out += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
            for e in range(engines):
                out.append(f"{name}_created{{{labels(e)}}} {_fmt(created_ts)}")
    for name, help_text, label, values in LABELLED_COUNTERS:
        out += [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"]
        for e in range(engines):
            for v in values:
                out.append(f'{name}_total{{{labels(e, f"{label}={chr(34)}{v}{chr(34)}")}}} {_fmt(rng.randint(0, 10**6))}')
        if created:
            out += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
            for e in range(engines):
                for v in values:
                    out.append(f'{name}_created{{{labels(e, f"{label}={chr(34)}{v}{chr(34)}")}}} {_fmt(created_ts)}')
    name = "vllm:request_success"
    out += [f"# HELP {name}_total Count of successfully processed requests.", f"# TYPE {name}_total counter"]
    for e in range(engines):
        for reason in FINISHED_REASONS:
            out.append(f'{name}_total{{{labels(e, f"finished_reason={chr(34)}{reason}{chr(34)}")}}} {_fmt(rng.randint(0, 10**5))}')
    for name, help_text, bounds in HISTOGRAMS:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        for e in range(engines):
            count = 0
            for b in bounds:
                count += rng.randint(0, 50)
                out.append(f'{name}_bucket{{{labels(e, f"le={chr(34)}{_fmt(b)}{chr(34)}")}}} {_fmt(count)}')
            count += rng.randint(0, 5)
            out.append(f'{name}_bucket{{{labels(e, "le=" + chr(34) + "+Inf" + chr(34))}}} {_fmt(count)}')
            out.append(f"{name}_count{{{labels(e)}}} {_fmt(count)}")
            out.append(f"{name}_sum{{{labels(e)}}} {_fmt(count * rng.random() * 3)}")
        if created:
            out += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
            for e in range(engines):
                out.append(f"{name}_created{{{labels(e)}}} {_fmt(created_ts)}")
    name = "vllm:cache_config_info"
    out += [f"# HELP {name} Information of the LLMEngine CacheConfig", f"# TYPE {name} gauge"]
    for e in range(engines):
        out.append(
            f'{name}{{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",'
            f'engine="{e}",gpu_memory_utilization="0.9",is_attention_free="False",kv_cache_size_tokens="1048576",'
            f'num_cpu_blocks="None",num_gpu_blocks="65536",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",'
            f'sliding_window="None",swap_space="4",swap_space_bytes="4294967296"}} 1.0'
        )
    return "\n".join(out) + "\n"


def sample_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


if __name__ == "__main__":
    one, twenty = vllm_exposition(1), vllm_exposition(20)
    print(f"1 engine: {len(one)/1024:.1f} KiB, {sample_count(one)} samples")
    print(f"20 engines: {len(twenty)/1024:.1f} KiB, {sample_count(twenty)} samples")
