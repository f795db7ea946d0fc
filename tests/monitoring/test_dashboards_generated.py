"""The checked-in dashboards are current, follow the conventions, and the check catches the usual mistakes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from alerts.generate import known_series  # noqa: E402
from alerts.settings import load  # noqa: E402
from dashboards import generate  # noqa: E402
from dashboards.lint import dashboard_problems, expr_problems, runbook_problems  # noqa: E402

JSON_DIR = ROOT / "dashboards" / "json"
TITLES = {
    "llm-overview": "LLM / Overview",
    "llm-hardware": "LLM / Hardware",
    "llm-memory": "LLM / Memory / KV cache",
    "llm-scheduler": "LLM / Scheduler",
    "llm-parallel": "LLM / Parallelism",
    "llm-speculative": "LLM / Speculative decoding",
    "llm-application": "LLM / Application & SLO",
    "llm-fleet": "LLM / Fleet",  # issue 15: across replicas, not a layer
}


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(JSON_DIR.glob("*.json"))}


def panels(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["title"]: p for p in d["panels"] if p["type"] != "row"}


def test_check_passes_on_the_checked_in_files() -> None:
    result = subprocess.run(
        [sys.executable, "dashboards/generate.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_check_fails_on_stale_and_foreign_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(generate, "OUT_DIR", tmp_path)
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
    stale = tmp_path / "llm-memory.json"
    stale.write_text(stale.read_text().replace("llm_kv_cache_usage_ratio", "vllm:gpu_cache_usage_perc"))
    (tmp_path / "hand-made.json").write_text("{}")
    assert generate.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "llm-memory.json is stale" in err
    assert "hand-made.json is not produced by the generator" in err


def test_the_dashboards_have_stable_uids_and_titles() -> None:
    assert {uid: d["title"] for uid, d in dashboards().items()} == TITLES
    for uid, d in dashboards().items():
        assert d["uid"] == uid
        assert d["schemaVersion"] >= 39
        assert d["graphTooltip"] == 1
        names = [v["name"] for v in d["templating"]["list"]]
        assert {"datasource", "server", "model", "gpu"} <= set(names)


def test_no_hard_coded_datasource_uid_anywhere() -> None:
    for d in dashboards().values():
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])


def test_every_panel_says_what_bad_means() -> None:
    for d in dashboards().values():
        for title, p in panels(d).items():
            assert len(p["description"]) >= 60, f"{d['uid']}/{title}"


def test_overview_has_verdict_latency_against_queue_and_layer_links() -> None:
    d = dashboards()["llm-overview"]
    exprs = " ".join(t["expr"] for p in panels(d).values() for t in p["targets"])
    assert "llm_bottleneck_score" in exprs and "llm_bottleneck_active" in exprs
    for title in ("TTFT p95 vs queue depth", "ITL p95 vs queue depth", "Throughput vs queue depth"):
        assert "llm_scheduler_requests_waiting" in " ".join(t["expr"] for t in panels(d)[title]["targets"])
    linked = {link["url"].split("?")[0] for link in d["links"] if link["type"] == "link"}
    assert linked == {f"/d/{uid}" for uid in TITLES if uid not in ("llm-overview", "llm-fleet")}


def test_overview_leads_with_state_primary_symptoms_headroom_and_chain() -> None:
    d = dashboards()["llm-overview"]
    first_row = d["panels"][0]
    assert first_row["type"] == "row"
    lead = [
        p for p in d["panels"][1:] if p["gridPos"]["y"] < min(q["gridPos"]["y"] for q in d["panels"][1:] if q["type"] == "row")
    ]
    by_title = {p["title"]: p for p in lead}
    assert list(by_title)[:4] == ["Service state", "Primary cause", "Active symptoms", "Layer headroom"]

    state = by_title["Service state"]
    assert state["type"] == "stat" and "llm_service_state" in state["targets"][0]["expr"]
    texts = {m["text"] for mapping in state["fieldConfig"]["defaults"]["mappings"] for m in mapping["options"].values()}
    assert texts == {"healthy", "unknown", "degraded"}

    primary = by_title["Primary cause"]
    assert primary["type"] == "table" and primary["targets"][0]["format"] == "table"
    expr = primary["targets"][0]["expr"]
    assert expr.startswith("instance_cause:llm_bottleneck_confidence:primary{")
    # the recording rule behind it: the primary (== 1) valued by its confidence
    rule = next(
        r
        for g in yaml.safe_load((ROOT / "alerts/recording_rules.yml").read_text())["groups"]
        for r in g["rules"]
        if r.get("record") == "instance_cause:llm_bottleneck_confidence:primary"
    )
    assert "llm_bottleneck_confidence" in rule["expr"] and "(llm_bottleneck_primary) == 1" in rule["expr"]
    shown = primary["transformations"][0]["options"]
    assert shown["renameByName"] == {"Value": "confidence"} and {"layer", "cause"} <= set(shown["indexByName"])

    symptoms = by_title["Active symptoms"]
    assert "llm_symptom_active" in symptoms["targets"][0]["expr"]

    headroom = by_title["Layer headroom"]
    assert headroom["type"] == "bargauge" and "llm_layer_headroom_ratio" in headroom["targets"][0]["expr"]
    assert (headroom["fieldConfig"]["defaults"]["min"], headroom["fieldConfig"]["defaults"]["max"]) == (0, 1)

    (chain,) = [p for p in lead if p["type"] == "text"]
    content = chain["options"]["content"]
    assert "http://${instance}/diagnosis" in content and "http://${instance}/)" in content
    # the existing verdict panels follow
    assert {"Layer scores", "Active causes", "Layer scores over time"} <= set(panels(d)) - set(by_title)


def test_lint_lets_text_panels_go_without_a_query_but_not_without_a_description() -> None:
    d = generate.build_all(load())[0]
    text = next(p for p in d["panels"] if p["type"] == "text")
    assert not [p for p in dashboard_problems(d, known_series(load())) if text["title"] in p]
    text["description"] = "short"
    assert any("description must say" in p for p in dashboard_problems(d, known_series(load())) if text["title"] in p)


def test_hardware_shows_gpu_util_and_sm_active_side_by_side_and_throttle_timeline() -> None:
    p = panels(dashboards()["llm-hardware"])
    util, sm = p["GPU util"]["gridPos"], p["SM active"]["gridPos"]
    assert util["y"] == sm["y"] and util["x"] + util["w"] == sm["x"]
    assert p["Throttle reasons"]["type"] == "state-timeline"
    assert "llm_gpu_throttle_reason_active" in p["Throttle reasons"]["targets"][0]["expr"]
    for title, metrics in {
        "Power vs limit": ("llm_gpu_power_watts", "llm_gpu_power_limit_watts"),
        "SM clock vs max": ("llm_gpu_sm_clock_hertz", "llm_gpu_sm_clock_max_hertz"),
        "SM occupancy": ("llm_gpu_sm_occupancy_ratio",),
        "Tensor pipe active": ("llm_gpu_tensor_active_ratio",),
        "DRAM active": ("llm_gpu_dram_active_ratio",),
        "GPU memory used vs total": ("llm_gpu_memory_used_bytes", "llm_gpu_memory_total_bytes"),
    }.items():
        exprs = " ".join(t["expr"] for t in p[title]["targets"])
        assert all(m in exprs for m in metrics), title


def test_scheduler_shows_the_busiest_thread() -> None:
    p = panels(dashboards()["llm-scheduler"])
    assert "llm_process_busiest_thread_cpu_ratio" in p["Busiest thread CPU"]["targets"][0]["expr"]


@pytest.mark.parametrize(
    "expr, complaint",
    [
        ("rate(vllm:num_preemptions[$__rate_interval])", "unknown metric 'vllm:num_preemptions'"),
        ("sum(llm_prefix_cache_hit_tokens_total) / sum(llm_prefix_cache_queried_tokens_total)", "without rate()"),
        ("histogram_quantile(0.95, rate(llm_request_ttft_seconds_bucket[$__rate_interval]))", "without sum by (le"),
        ("sum(rate(llm_generation_tokens_total[5m]))", "use [$__rate_interval]"),
        ("limitk(3, llm_gpu_sm_active_ratio)", "newer than 2.42"),
    ],
)
def test_lint_catches_the_mistakes_of_published_dashboards(expr: str, complaint: str) -> None:
    found = expr_problems(expr, known_series(load()))
    assert any(complaint in p for p in found), found


def test_lint_catches_a_hard_coded_uid_and_a_missing_description() -> None:
    d = generate.build_all(load())[0]
    d["panels"][1]["datasource"] = {"type": "prometheus", "uid": "PBFA97CFB590B2093"}
    d["panels"][2]["description"] = ""
    found = dashboard_problems(d, known_series(load()))
    assert any("panel datasource must be ${datasource}" in p for p in found)
    assert any("description must say" in p for p in found)


def test_runbooks_only_name_existing_panels() -> None:
    boards = list(dashboards().values())
    assert runbook_problems((ROOT / "alerts" / "runbooks.md").read_text(), boards) == []
    assert runbook_problems('**Confirm**: look at "No such panel".\n', boards) == [
        "alerts/runbooks.md names panel 'No such panel', which no dashboard has"
    ]
    # a quote inside a code span is a label matcher, not a panel
    assert runbook_problems('**Confirm**: `errors_total{reason="timeout"}` on "Service state".\n', boards) == []


def test_provisioning_points_grafana_at_the_dashboards() -> None:
    ds = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/prometheus.yaml").read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    prov = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards/llm.yaml").read_text())
    provider = prov["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"]


# --------------------------------------------------------------------------- one verdict per engine (issue 20)

VERDICT_BOARDS = {"llm-overview", "llm-fleet"}


def _variable(d: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((v for v in d["templating"]["list"] if v["name"] == name), None)


def test_boards_that_draw_the_verdict_have_an_engine_variable_and_only_they() -> None:
    from alerts.generate import verdict_series
    from alerts.promql import metric_names

    verdict = verdict_series(load())
    for uid, d in dashboards().items():
        reads = {n for p in panels(d).values() for t in p["targets"] for n in metric_names(t["expr"]) & verdict}
        engine = _variable(d, "engine")
        assert bool(reads) == (uid in VERDICT_BOARDS) == (engine is not None), (uid, sorted(reads))
        if engine:
            # the engines the diagnosis judges, of the selected exporters; "All" also matches an unlabelled series
            assert engine["definition"] == 'label_values(llm_service_state{instance=~"$instance"}, engine)'
            assert engine["includeAll"] and engine["multi"] and engine["allValue"] == ".*"
            names = [v["name"] for v in d["templating"]["list"]]
            assert names.index("instance") < names.index("engine")


def test_the_overview_draws_one_verdict_per_engine() -> None:
    p = panels(dashboards()["llm-overview"])
    for title in (
        "Service state",
        "Active symptoms",
        "Layer headroom",
        "Layer scores",
        "Active causes",
        "Layer scores over time",
    ):
        (target,) = p[title]["targets"]
        assert 'engine=~"$engine"' in target["expr"] and "{{engine}}" in target["legendFormat"], title
        assert re.search(r"by \((instance, )?engine[,)]", target["expr"]), title
    primary = p["Primary cause"]
    assert 'engine=~"$engine"' in primary["targets"][0]["expr"]
    assert "engine" in primary["transformations"][0]["options"]["indexByName"]
    assert primary["fieldConfig"]["defaults"]["links"][0]["url"].endswith("/diagnosis?engine=${__data.fields.engine}")
    assert "/diagnosis?engine=${engine}" in p["Chain: symptom to cause"]["options"]["content"]
    # the engine series (latency, queue) keep their own server filter: their engine label is the family
    assert not [t for t in p["TTFT p95 vs queue depth"]["targets"] if "$engine" in t["expr"]]


def test_the_fleet_table_has_one_row_per_engine() -> None:
    p = panels(dashboards()["llm-fleet"])
    table = p["Replicas: state, primary cause, headroom"]
    exprs = [t["expr"] for t in table["targets"]]
    assert all("$engine" in e for e in exprs)
    # the replica's own series get the engine's name as engine, so the merge joins them with its verdict
    assert all(e.startswith("label_replace(") for e in exprs[3:])
    organize = table["transformations"][1]["options"]
    assert "engine" in organize["indexByName"] and organize["excludeByName"]["server"]
    headroom = p["Tightest-layer headroom per replica"]["targets"][0]
    assert 'engine=~"$engine"' in headroom["expr"] and "{{engine}}" in headroom["legendFormat"]


@pytest.mark.parametrize(
    "expr, legend, complaint",
    [
        ('max by (layer) (llm_bottleneck_score{instance=~"$instance", engine=~"$engine"})', "{{engine}}", "drops label 'engine'"),
        (
            'max by (engine, layer) (llm_bottleneck_score{instance=~"$instance"})',
            "{{engine}} {{layer}}",
            'without engine=~"$engine"',
        ),
        ('max by (engine, layer) (llm_bottleneck_score{instance=~"$instance", engine=~"$engine"})', "{{layer}}", "does not name"),
    ],
)
def test_lint_catches_a_verdict_panel_that_folds_engines(expr: str, legend: str, complaint: str) -> None:
    d = generate.build_all(load())[0]
    scores = next(p for p in d["panels"] if p.get("title") == "Layer scores")
    scores["targets"][0].update(expr=expr, legendFormat=legend)
    found = [p for p in dashboard_problems(d, known_series(load())) if "Layer scores" in p]
    assert any(complaint in p for p in found), found


def test_lint_wants_the_engine_variable_where_queries_read_it() -> None:
    d = generate.build_all(load())[0]
    d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "engine"]
    assert any("no engine variable" in p for p in dashboard_problems(d, known_series(load())))
