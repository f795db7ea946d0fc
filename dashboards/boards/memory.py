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
            "Prefix cache hit ratio",
            f"Prompt tokens found in the prefix cache over those looked up ({w} rate ratio, not a lifetime ratio). Low with "
            "shared system prompts means prefix caching is off or the cache is too small; check prefix_caching in the "
            "engine config.",
            [Target(f"server_model:llm_prefix_cache_hit:ratio_rate{w}{{{ENGINE}}}", LEGEND)],
            unit="percentunit",
            min=0,
            max=1,
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
    ]
    return Dashboard(
        UID, "LLM / Memory / KV cache", "KV-cache usage, preemptions, fragmentation signature and prefix-cache reuse.", items
    )
