"""The engine's account of the probe's window (exporter/probe/outside.py), and the runtime's imports.

Proven here: the engine's TTFT for a window is the histogram's sum delta over count delta and
unknown after a reset or with nothing observed; engine-reported timing wins over the histogram;
"frozen" needs a scrape late enough in the probe's window and then means "no progress series
moved" (a new series is a move); a view is None while the engine source is down; and the probe
package imports none of the tools-only libraries (httpx, rich, matplotlib).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from exporter.probe.outside import EngineView, engine_ttft, engine_view, frozen, histogram_ttft
from exporter.samples import HistogramSample, Sample, SourceError
from exporter.store import SnapshotStore

ROOT = Path(__file__).resolve().parents[2]
K = ("llm_generation_tokens_total", ())


def view(
    at: float,
    progress: dict[tuple[str, tuple[tuple[str, str], ...]], float] | None = None,
    ttft: tuple[float, float] | None = None,
) -> EngineView:
    return EngineView(at, progress if progress is not None else {K: 10.0}, ttft[0] if ttft else None, ttft[1] if ttft else None)


def test_histogram_ttft_is_the_mean_of_the_window_and_unknown_after_a_reset() -> None:
    assert histogram_ttft(view(0, ttft=(1.0, 10)), view(1, ttft=(1.3, 12))) == pytest.approx(0.15)
    assert histogram_ttft(view(0, ttft=(1.0, 10)), view(1, ttft=(1.0, 10))) is None  # nothing observed
    assert histogram_ttft(view(0, ttft=(5.0, 10)), view(1, ttft=(0.1, 1))) is None  # the engine restarted
    assert histogram_ttft(view(0), view(1)) is None  # no TTFT histogram (llama.cpp)
    assert engine_ttft(0.004, view(0, ttft=(1.0, 10)), view(1, ttft=(1.3, 12))) == (0.004, "engine_reported")
    found = engine_ttft(None, view(0, ttft=(1.0, 10)), view(1, ttft=(1.2, 11)))
    assert found is not None and found[1] == "histogram" and found[0] == pytest.approx(0.2)


def test_frozen_needs_a_late_enough_scrape_and_means_nothing_moved() -> None:
    before = view(9.0)
    assert frozen(before, view(14.0), probe_started=10.0, min_gap=5.0) is None  # too early in the window
    assert frozen(before, view(15.5), 10.0, 5.0) is True
    assert frozen(before, view(15.5, {K: 11.0}), 10.0, 5.0) is False
    assert frozen(before, view(15.5, {K: 10.0, ("llm_prompt_tokens_total", ()): 1.0}), 10.0, 5.0) is False
    assert frozen(None, view(15.5), 10.0, 5.0) is None and frozen(before, None, 10.0, 5.0) is None
    assert frozen(view(9.0, {}), view(15.5, {}), 10.0, 5.0) is None  # an engine with no counters says nothing


def test_engine_view_reads_progress_and_is_none_while_the_source_is_down() -> None:
    store = SnapshotStore()
    store.register("engine:a", 1.0, 0.5)
    labels = {"server": "a", "engine": "vllm", "model": "m", "rank": ""}
    store.record_success(
        "engine:a",
        [
            Sample("llm_engine_info", {**labels, "generation": "v1"}, 1.0),
            Sample("llm_generation_tokens_total", labels, 7.0),
            Sample("llm_scheduler_requests_running", labels, 3.0),  # a gauge: not progress
            Sample("llm_exporter_series_dropped_total", {"source": "engine:a", "reason": "budget"}, 2.0),  # ours: not progress
            HistogramSample("llm_request_ttft_seconds", labels, ((1.0, 2.0), (float("inf"), 3.0)), 0.9, 3.0),
            # sampled by the exporter at every scrape: it moves while a hung engine serves the same text
            HistogramSample("llm_scheduler_batch_size", labels, ((4.0, 5.0), (float("inf"), 5.0)), 15.0, 5.0),
        ],
        duration=0.1,
    )
    v = engine_view(store, "engine:a")
    assert v is not None and (v.family, v.model) == ("vllm", "m")
    assert sorted(name for name, _ in v.progress) == ["llm_generation_tokens_total", "llm_request_ttft_seconds"]
    assert (v.ttft_sum, v.ttft_count) == (0.9, 3.0)
    store.record_failure("engine:a", SourceError("timeout", "slow"), 0.5)
    assert engine_view(store, "engine:a") is None
    assert engine_view(store, "engine:missing") is None


def test_the_probe_package_imports_no_tools_only_library() -> None:
    banned = {"httpx", "rich", "matplotlib"}
    for path in sorted((ROOT / "exporter" / "probe").glob("*.py")) + [ROOT / "exporter" / "diagnosis" / "probe.py"]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not {n.split(".")[0] for n in names} & banned, (path, names)
