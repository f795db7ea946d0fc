"""report.md and report.html rendered from a recorded /diagnosis body: every section, every value."""

from __future__ import annotations

import copy
import html
import math
import re
from pathlib import Path
from typing import Any

import pytest

from exporter.report import Context, render_html, render_markdown, write_report
from exporter.report.render import ChartRef, evidence_value, percent, ratio
from exporter.report.series import Gauge, Quantile, Rate, bucket_quantile, charts
from exporter.schema import LAYERS, SPECS
from tests.report.fake_exporter import recorded_verdict, rich_verdict


def _flat(text: str) -> str:
    return " ".join(text.split())


def _rendered(md: str) -> str:
    """Markdown text as a reader sees it: backslash escapes of ASCII punctuation undone (CommonMark)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", md)


def _ctx(**kw: Any) -> Context:
    return Context(exporter_url="http://127.0.0.1:9750", generated=1796119012.0, **kw)


def test_markdown_has_every_section_with_full_values() -> None:
    v = rich_verdict()
    md = render_markdown(v, _ctx())
    flat = _flat(_rendered(md))
    assert md.startswith("# Incident snapshot: DEGRADED\n")
    assert "**DEGRADED: primary hardware / pcie_transfer_bound (confidence 0.997)**" in md
    p = v["primary"]
    assert _flat(p["chain"]) in flat
    for cause in [p, *v["contributing"], *v["bottlenecks"]]:  # advice in full, wrapped but never cut
        assert _flat(cause["advice"]) in flat
    assert "END-OF-ADVICE." in md
    assert max(len(line) for line in md.splitlines() if "advice" not in line.lower() and not line.startswith("|")) < 400
    assert "- **ttft_high**: TTFT p95 4.9 s > SLO 2 s" in md
    assert "### contributing: memory / kv_cache_pressure" in md
    assert "### warning: parallel / tp_imbalance" in md and "### symptom: application / slo_breach" in md
    for note in v["notices"]:
        assert f"- {note}" in md
    # the layer table: seven rows in the map's order, headroom a percentage, scores ratios
    rows = re.findall(r"^\| (\w+) \| (\w+) \| ([^|]+) \| ([^|]+) \|", md, re.M)
    layers = [r for r in rows if r[0] in LAYERS]
    assert [r[0] for r in layers] == list(LAYERS)
    table = {r[0]: (r[1], r[2].strip(), r[3].strip()) for r in layers}
    assert table["hardware"] == ("bottleneck", "0.998", "0 %")
    assert table["scheduler"] == ("ok", "0.00", "100 %")  # a zero score exists: 0.00, not '-'
    assert table["memory"] == ("ok", "0.05", "90 %")
    assert table["parallel"] == ("warning", "0.30", "45 %")
    assert table["speculative_decoding"] == ("unknown", "n/a", "not measured")
    assert "-" not in {c for row in table.values() for c in row}
    # evidence of the primary, with units; the skew stays a ratio
    assert '| `llm_gpu_sm_active_ratio{gpu="0"}` | 0 |' in md
    assert "5.800e+10 B/s (58.0 GB/s)" in md
    assert '| `llm_parallel_sm_active_skew_ratio{group="tp0"}` | 1.8 |' in md
    assert "180 %" not in md
    assert "[diagnosis.json](diagnosis.json)" in md


def test_markdown_references_the_charts_and_says_their_source() -> None:
    ctx = _ctx(
        source="exporter",
        source_url="http://127.0.0.1:9750",
        start=1796119000.0,
        end=1796119030.0,
        charts=[
            ChartRef("verdict.png", "verdict over time", "verdict"),
            ChartRef("layer-parallel.png", "parallel layer", "parallel", ("interconnect traffic",)),
        ],
    )
    md = render_markdown(recorded_verdict(), ctx)
    assert "![verdict over time](verdict.png)" in md and "![parallel layer](layer-parallel.png)" in md
    assert "No data for: interconnect traffic" in md
    assert "sampling the exporter at http://127.0.0.1:9750" in md and "for 30 s" in md
    prom = render_markdown(
        recorded_verdict(), _ctx(source="prometheus", source_url="http://127.0.0.1:9090", start=1796118100.0, end=1796119000.0)
    )
    assert "Charts come from Prometheus at http://127.0.0.1:9090" in prom and "the last 15 minutes" in prom


def test_html_is_self_contained_and_shows_every_value(tmp_path: Path) -> None:
    v = rich_verdict()
    (tmp_path / "verdict.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    ctx = _ctx(
        source="exporter",
        source_url="http://x",
        start=1.0,
        end=31.0,
        charts=[ChartRef("verdict.png", "verdict over time", "verdict")],
    )
    paths = write_report(tmp_path, v, ctx)
    assert [p.name for p in paths] == ["diagnosis.json", "report.md", "report.html"]
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'src="data:image/png;base64,' in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no external asset
    assert "<script" not in page
    assert '<section id="verdict" data-state="degraded">' in page
    assert '<div class="primary" id="primary" data-layer="hardware" data-cause="pcie_transfer_bound">' in page
    assert html.escape(v["primary"]["chain"]) in page
    assert html.escape(v["primary"]["advice"]) in page
    cells = re.findall(
        r'<tr data-layer="(\w+)" data-status="(\w+)"[^>]*><td>\w+</td><td><b>\w+</b></td>'
        r'<td class="value score">([^<]*)</td><td class="value headroom">([^<]*)</td>',
        page,
    )
    assert [c[0] for c in cells] == list(LAYERS)
    for name, status, score, room in cells:
        info = v["layers"][name]
        assert status == info["status"]
        assert score == (ratio(info["score"]) if info["score"] is not None else "n/a")
        assert room == (percent(info["headroom"]) if info["headroom"] is not None else "not measured")
    values = re.findall(r'<td class="value"[^>]*>([^<]*)</td>', page)
    assert values and "-" not in values and "" not in values
    import json

    assert json.loads((tmp_path / "diagnosis.json").read_text()) == v


@pytest.mark.parametrize("state", ["healthy", "unknown"])
def test_no_primary_says_why(state: str) -> None:
    v = copy.deepcopy(recorded_verdict())
    v.update(state=state, primary=None, symptoms=[], contributing=[], bottlenecks=[])
    if state == "unknown":
        v["notices"] = ["no engine metrics: whether users suffer cannot be judged"]
    md, page = render_markdown(v, _ctx()), render_html(v, _ctx())
    assert md.startswith(f"# Incident snapshot: {state.upper()}")
    if state == "healthy":
        assert "No primary: the service is healthy" in md and "No primary: the service is healthy" in page
    else:
        assert "Nothing can be concluded: no engine metrics" in md and "no engine metrics" in page
    assert 'id="chain"' not in page


def test_formatting_never_hides_a_value() -> None:
    assert ratio(0.0) == "0.00" and ratio(0.997) == "0.997" and ratio(1.0) == "1.00" and ratio(None) == "n/a"
    assert percent(0.0) == "0 %" and percent(0.004) == "0.4 %" and percent(1.0) == "100 %"
    assert percent(None) == "not measured" and percent(math.nan) == "NaN"
    assert evidence_value("p95(llm_request_ttft_seconds)", 2.42) == "2.42 s"
    assert evidence_value("llm_parallel_sm_active_skew_ratio", 1.8) == "1.8"
    assert evidence_value("x", 0) == "0"


def test_series_use_schema_names_and_prometheus_semantics() -> None:
    queries = {s.promql() for c in charts() for p in c.panels for s in p.series}
    assert "max by (layer) (llm_bottleneck_score)" in queries
    assert "max by (layer) (llm_layer_headroom_ratio)" in queries
    assert "sum(llm_scheduler_requests_waiting)" in queries
    assert "histogram_quantile(0.95, sum by (le) (rate(llm_request_ttft_seconds_bucket[1m])))" in queries
    names = set(re.findall(r"llm_[a-z_]+", " ".join(queries)))
    base = {n.removesuffix("_bucket") for n in names}
    assert base <= set(SPECS), base - set(SPECS)
    assert [c.layer for c in charts()] == ["verdict", *LAYERS]
    # histogram_quantile: linear inside the bucket, +Inf falls back to the highest finite bound
    assert bucket_quantile(0.95, [(0.5, 0), (2.5, 0), (5.0, 10), (math.inf, 10)]) == pytest.approx(4.875)
    assert bucket_quantile(0.95, [(1.0, 0), (math.inf, 10)]) == 1.0
    assert bucket_quantile(0.5, [(1.0, 0), (math.inf, 0)]) is None
    readings = [
        (100.0, {"c_total": [({"a": "1"}, 10.0)], "g": [({"gpu": "0"}, 0.5), ({"gpu": "1"}, 0.7)]}),
        (110.0, {"c_total": [({"a": "1"}, 30.0)], "g": [({"gpu": "0"}, 0.6)]}),
    ]
    assert Rate("r", "c_total").local(readings) == {"r": [(110.0, 2.0)]}
    assert Gauge("g", "g", by="gpu").local(readings) == {"g gpu=0": [(100.0, 0.5), (110.0, 0.6)], "g gpu=1": [(100.0, 0.7)]}
    assert Quantile("q", "h").local(readings) == {}


def test_the_slowest_traced_requests_are_a_section_of_both_reports() -> None:
    from exporter.report.traced import _checked

    held = [
        {
            "engine": "vllm",
            "trace_id": "ab" * 16,
            "ttft_seconds": 2.4,
            "queue_seconds": 2.1,
            "prefill_seconds": 0.3,
            "decode_seconds": None,
            "e2e_seconds": 3.4,
            "primary": {"layer": "memory", "cause": "kv_cache_pressure"},
            "sentence": "TTFT 2.4 s of 3.4 s: 2.1 s in the queue <b>",
        }
    ]
    ctx = _ctx(requests=[_checked(r) for r in held])
    md = _rendered(render_markdown(recorded_verdict(), ctx))
    assert "## Slowest traced requests (GET /requests)" in md
    assert f"| vllm | {'ab' * 16} | 2.400 | 2.100 | 0.300 | – | 3.400 | memory/kv_cache_pressure |" in md
    page = render_html(recorded_verdict(), ctx)
    section = page.split('<section id="traced-requests">')[1].split("</section>")[0]
    assert "&lt;b&gt;" in section and "<b>" not in section and "memory/kv_cache_pressure" in section
    assert "Slowest traced requests" not in render_markdown(recorded_verdict(), _ctx())
