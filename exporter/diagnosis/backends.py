"""Attention backends an engine's own documentation calls slower for long prompts: a notice.

Why a table with its citation: "this backend is slower for long context" is the engine
project's claim, not ours, so each row names the page that says it, and docs/diagnosis.md
("Attention backends and long context") lists the same rows. The notice fires only when the
requests really are long (the prompt-length p90 at ``long_context_prompt_p90_tokens``) and the
backend the engine runs is on the table (``llm_engine_config_info{attention_backend}``, read by
exporter/engines/settings.py); it is a notice, not a cause: nothing measured proves the kernels
are what limits this service, the engine's documentation only says where to look first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.diagnosis import signals as sig
from exporter.diagnosis.thresholds import Thresholds
from exporter.store import Snapshot


@dataclass(frozen=True)
class SlowBackend:
    """One backend an engine documents as the slower choice, what to run instead, and where it says so."""

    family: str
    #: the ``attention_backend`` label value, compared case-insensitively
    backend: str
    instead: str
    source: str


SLOW_FOR_LONG_CONTEXT: tuple[SlowBackend, ...] = (
    SlowBackend(
        "trtllm",
        "vanilla",
        "the default TRT-LLM backend (attn_backend trtllm) or flashinfer",
        # "a reference implementation ... not recommended for production use due to its limited optimization"
        "https://nvidia.github.io/TensorRT-LLM/features/attention.html",
    ),
    SlowBackend(
        "sglang",
        "torch_native",
        "fa3 (Hopper) or flashinfer, which SGLang selects as the most performant when none is forced",
        "https://docs.sglang.ai/advanced_features/attention_backend.html",
    ),
    SlowBackend(
        "vllm",
        "FLEX_ATTENTION",
        "FLASH_ATTN or FLASHINFER (vLLM picks them first; FlexAttention is the fallback for shapes they lack)",
        "https://docs.vllm.ai/en/latest/design/attention_backends.html",
    ),
    SlowBackend(
        "llamacpp",
        "default",
        "-fa on (flash attention: no full attention matrix per step, the larger saving the longer the context)",
        "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md",
    ),
)

_BY_KEY: dict[tuple[str, str], SlowBackend] = {(b.family, b.backend.lower()): b for b in SLOW_FOR_LONG_CONTEXT}


def slow_backend(family: str, backend: str) -> SlowBackend | None:
    """The table's row for an engine family and backend name, or None."""
    return _BY_KEY.get((family.lower(), backend.lower()))


def long_context_notices(v: Mapping[str, float], snap: Snapshot | None, t: Thresholds) -> list[str]:
    """One sentence per engine family that runs long prompts on a backend its docs call slower."""
    p90 = v.get(sig.PROMPT_P90)
    if p90 is None or p90 < t.long_context_prompt_p90_tokens or snap is None:
        return []
    seen: dict[tuple[str, str], SlowBackend] = {}
    for point in snap.samples(sig.CONFIG_METRIC):
        family, backend = point.labels.get("engine", ""), point.labels.get("attention_backend", "")
        row = slow_backend(family, backend) if backend else None
        if row is not None:
            seen.setdefault((row.family, backend), row)
    return [
        f"long-context requests ({sig.prompt_p90_text(v)}, diagnosis.long_context_prompt_p90_tokens "
        f"{t.long_context_prompt_p90_tokens:.0f}) run on attention backend {backend}, which {row.family} documents "
        f"as the slower choice for them: try {row.instead} ({row.source})"
        for (_, backend), row in sorted(seen.items())
    ]
