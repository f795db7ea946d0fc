"""llama.cpp ``llama-server --metrics`` (hand-rendered, unlabeled, single model).

Source of truth: docs/reference/engine-metrics.md section 6. ``old`` builds
(2024) served ``kv_cache_usage_ratio``; ``new`` builds (2025+) dropped it and added
``prompt_tokens_cached_total`` and the speculative-decoding counters.

Meaning fix: ``llamacpp:prompt_tokens_total`` *excludes* prompt tokens reused from
the cache, while ``llm_prompt_tokens_total`` includes them everywhere, so the
neutral counter is ``prompt_tokens_total + prompt_tokens_cached_total``. Builds
without the cached counter therefore publish no ``llm_prompt_tokens_total`` (absent,
never a different meaning).

Not mapped on purpose: ``*_tokens_seconds`` gauges (reset by every scrape, so a
second scraper disturbs them), ``n_busy_slots_per_decode`` (typed counter in old
builds, a ratio), ``n_tokens_max`` (a high-watermark typed counter),
``prompt_seconds_total`` / ``tokens_predicted_seconds_total`` (sums, not histograms).

KV tiers: llama.cpp's only cache-reuse figure is ``prompt_tokens_cached_total``
(``llm_prefix_cache_hit_tokens_total``); it does not say which memory the reused
tokens were in, and nothing counts KV moved to or from host memory, so the tier
series (``llm_kv_cache_tier_*``, ``llm_kv_cache_host_usage_ratio``) are absent.
"""

from __future__ import annotations

from exporter.engines.table import EngineMapping, Generation, Row, Series, Sum

PROMPT = Series("llamacpp:prompt_tokens_total")
CACHED = Series("llamacpp:prompt_tokens_cached_total")

MAPPING = EngineMapping(
    family="llamacpp",
    prefixes=("llamacpp:",),
    generations=(
        Generation("new", any_of=("llamacpp:prompt_tokens_cached_total", "llamacpp:n_tokens_max")),
        Generation("old"),
    ),
    label_map={},
    rows=(
        # --- application
        Row("llm_prompt_tokens_total", (Sum((PROMPT, CACHED)),), note="computed + cached prompt tokens"),
        Row("llm_generation_tokens_total", (Series("llamacpp:tokens_predicted_total"),)),
        # --- memory
        Row("llm_kv_cache_usage_ratio", (Series("llamacpp:kv_cache_usage_ratio"),), combine="max", note="old builds only"),
        Row("llm_prefix_cache_queried_tokens_total", (Sum((PROMPT, CACHED)),)),
        Row("llm_prefix_cache_hit_tokens_total", (CACHED,)),
        # --- scheduler
        Row("llm_scheduler_requests_running", (Series("llamacpp:requests_processing"),)),
        Row("llm_scheduler_requests_waiting", (Series("llamacpp:requests_deferred"),)),
        # --- speculative decoding
        Row("llm_spec_decode_draft_tokens_total", (Series("llamacpp:spec_decode_num_draft_tokens_total"),)),
        Row("llm_spec_decode_accepted_tokens_total", (Series("llamacpp:spec_decode_num_accepted_tokens_total"),)),
        Row("llm_spec_decode_drafts_total", (Series("llamacpp:spec_decode_num_drafts_total"),)),
    ),
)
