"""LLM / Memory / KV cache: is the KV cache full, preempting, fragmented, or reusing prefixes?

Why usage beside preemptions: engines fill the cache on purpose, so usage alone
is no alarm; usage near full *with* preemptions is pressure, and waiting
requests with usage far from full is fragmentation or a misjudged capacity.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.grafana import ENGINE, GPU, SERVER, Dashboard, Panel, Row, Target

UID = "llm-memory"
LEGEND = "{{server}} {{model}}"


def build(s: Settings) -> Dashboard:
    w = s.rate_window
    items: list[Panel | Row] = [
        Row("KV cache"),
        Panel(
            "KV cache usage",
            f"Share of KV-cache blocks in use, per engine rank. Near 1 is normal under load; near 1 together with "
            f"'Preemptions / s' above 0 is KV pressure (dashed line: the {s.kv_near_full_ratio:.0%} alert threshold). "
            "Next: lower max-num-seqs or give the cache more memory.",
            [Target(f"llm_kv_cache_usage_ratio{{{ENGINE}}}", LEGEND + " rank {{rank}}")],
            unit="percentunit",
            min=0,
            max=1,
            thresholds=[(s.kv_near_full_ratio, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Preemptions / s",
            "Requests evicted for lack of KV cache and recomputed (or swapped). Any sustained value wastes GPU work and "
            "raises ITL: check 'KV cache usage' and the running batch on LLM / Scheduler.",
            [Target(f"sum by (server, model) (rate(llm_kv_cache_preemptions_total{{{ENGINE}}}[$__rate_interval]))", LEGEND)],
            min=0,
        ),
        Panel(
            "Waiting requests vs KV usage",
            "Queued requests (left) against KV usage (right, dashed). Requests waiting while usage is well below full is the "
            "fragmentation / admission-limit signature: check max-num-seqs, block size and the token budget.",
            [
                Target(f"sum by (server, model) (llm_scheduler_requests_waiting{{{ENGINE}}})", "waiting " + LEGEND),
                Target(f"max by (server, model) (llm_kv_cache_usage_ratio{{{ENGINE}}})", "kv usage " + LEGEND),
            ],
            min=0,
            right_axis=("^kv usage.*", "percentunit"),
        ),
        Panel(
            "Predicted vs real concurrency",
            "Predicted: KV capacity over the mean tokens a finished request held (prompt + output, over the last minute). "
            "Real: requests running. Preemptions or waiting requests while running stays far below the prediction mean "
            "the capacity is misjudged or fragmented: check block size, max-num-seqs and the token budget.",
            [
                Target(f"max by (server) (llm_kv_cache_predicted_max_concurrency{{{SERVER}}})", "predicted {{server}}"),
                Target(f"sum by (server) (llm_scheduler_requests_running{{{ENGINE}}})", "running {{server}}"),
            ],
            min=0,
        ),
        Panel(
            "Prefix cache hit ratio vs TTFT",
            f"Prompt tokens found in the prefix cache over those looked up (left; {w} rate ratio, not a lifetime ratio) "
            "against the TTFT p95 (right, dashed). A fall of the ratio followed by a rising TTFT is prefix sharing broken "
            "(the diagnosis's prefix_cache_hit_drop): prefix caching switched off (prefix_caching in the engine config), a "
            "router that lost session affinity, or a changed system prompt. Low all along with shared system prompts: the "
            "cache is off or too small.",
            [
                Target(f"server_model:llm_prefix_cache_hit:ratio_rate{w}{{{ENGINE}}}", "hit ratio " + LEGEND),
                Target(f"server_model:llm_request_ttft_seconds:p95_rate{w}{{{ENGINE}}}", "ttft p95 " + LEGEND),
            ],
            unit="percentunit",
            min=0,
            right_axis=("^ttft p95.*", "s"),
        ),
        Panel(
            "KV capacity",
            "KV-cache capacity in tokens and the block (page) size. Capacity far below max-model-len × max-num-seqs means "
            "the engine will preempt at full concurrency.",
            [
                Target(f"max by (server, model) (llm_kv_cache_capacity_tokens{{{ENGINE}}})", "tokens " + LEGEND, instant=True),
                Target(f"max by (server, model) (llm_kv_cache_block_size_tokens{{{ENGINE}}})", "block " + LEGEND, instant=True),
            ],
            kind="stat",
            height=6,
        ),
        Panel(
            "GPU memory used share",
            "Framebuffer used over total, per GPU. Near 1 with a small KV capacity means weights or another process take "
            "the memory: check 'GPU memory used vs total' on LLM / Hardware.",
            [Target(f"instance_gpu:llm_gpu_memory_used:ratio{{{GPU}}}", "{{instance}} gpu {{gpu}}")],
            unit="percentunit",
            min=0,
            max=1,
            height=6,
        ),
        Row("KV below the GPU"),
        Panel(
            "KV moved between GPU and host memory",
            "Bytes/s the engine offloaded to host memory and loaded back (trtllm-serve), and prompt tokens/s whose KV "
            "came back from a tier below the GPU (vLLM 0.33, SGLang HiCache), by tier. High while KV usage is full is "
            "the cache spilling to host memory: each hit is a PCIe copy instead of a recompute. Empty: the engine does "
            "not publish it, or no offload is configured.",
            [
                Target(
                    "sum by (server, model, direction) "
                    f"(rate(llm_kv_cache_tier_transfer_bytes_total{{{ENGINE}}}[$__rate_interval]))",
                    "{{direction}} bytes/s " + LEGEND,
                ),
                Target(
                    "sum by (server, model, tier) "
                    f'(rate(llm_kv_cache_tier_hit_tokens_total{{{ENGINE},tier!="gpu"}}[$__rate_interval]))',
                    "{{tier}} hit tokens/s " + LEGEND,
                ),
            ],
            min=0,
        ),
        Panel(
            "Host KV tier usage",
            "Share of the host-memory KV tier (offload or swap space) in use. Full means the offload tier evicts too: "
            "hits fall back to recomputation.",
            [Target(f"max by (server, model) (llm_kv_cache_host_usage_ratio{{{ENGINE}}})", LEGEND)],
            unit="percentunit",
            min=0,
            max=1,
        ),
    ]
    return Dashboard(
        UID, "LLM / Memory / KV cache", "KV-cache usage, preemptions, fragmentation signature and prefix-cache reuse.", items
    )
