"""Cost of the per-family budget: a normal 20-engine vLLM scrape, and one runaway family beside it.

Why it matters (issue 25, item 2): counting series per family adds a dict
update to every sample line of every scrape, and a runaway family is now read
to the end of the body instead of being refused at the input limit. The run of
a dropped family's lines is skipped at C speed (exporter/engines/textparse.py),
so a 200 000-series family should cost less than refusing it used to (the
refusal counted every line of the body with a regex first).

``python -m bench.family_budget_cost`` prints the figures (median ms).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bench.normalize_cost import median_seconds
from tests.support.exposition import vllm_exposition

BUDGET = 20_000


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    return median_seconds(fn, repeat) * 1e3


def run(repeat: int = 7) -> dict[str, Any]:
    from exporter.engines import normalize_exposition

    normal = vllm_exposition(20)
    base = vllm_exposition(2, created=False)
    unmapped = base + "".join(f'vllm:request_tokens_by_id{{request_id="q{i}"}} 1\n' for i in range(200_000))
    mapped = base + "".join(f'vllm:num_requests_running{{engine="q{i}",model_name="m"}} 1\n' for i in range(200_000))
    kept = normalize_exposition(unmapped, "bench", max_series=BUDGET)
    assert kept.dropped_families == {"vllm:request_tokens_by_id": 200_000}, kept.dropped_families
    return {
        "budget": BUDGET,
        "normal_20_engines_kib": len(normal) // 1024,
        "normal_20_engines_with_family_count_ms": _median_ms(
            lambda: normalize_exposition(normal, "bench", max_series=BUDGET), repeat
        ),
        "normal_20_engines_without_budget_ms": _median_ms(lambda: normalize_exposition(normal, "bench"), repeat),
        "runaway_200k_unmapped_family_kib": len(unmapped) // 1024,
        "runaway_200k_unmapped_family_dropped_ms": _median_ms(
            lambda: normalize_exposition(unmapped, "bench", max_series=BUDGET), max(3, repeat // 2)
        ),
        "runaway_200k_mapped_family_dropped_ms": _median_ms(
            lambda: normalize_exposition(mapped, "bench", max_series=BUDGET), max(3, repeat // 2)
        ),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
