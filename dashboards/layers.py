"""Uids and titles of the layer dashboards, in the order an engineer walks the layers.

Why a separate table: the Overview links to every layer dashboard and the alert
descriptions name them; stable uids keep bookmarks and links working.
"""

from __future__ import annotations

LAYER_LINKS: tuple[tuple[str, str], ...] = (
    ("llm-hardware", "LLM / Hardware"),
    ("llm-memory", "LLM / Memory / KV cache"),
    ("llm-scheduler", "LLM / Scheduler"),
    ("llm-parallel", "LLM / Parallelism"),
    ("llm-speculative", "LLM / Speculative decoding"),
    ("llm-application", "LLM / Application & SLO"),
)
