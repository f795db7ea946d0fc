"""`plan` against a real Prometheus holding a backfilled synthetic week (tests/plan/synthetic_week.py).

Why real: the PromQL (the llm_engine_info join, rate windows, the in-flight sum
with a missing queue) and the range API's answer are what the plan stands on;
``promtool tsdb create-blocks-from openmetrics`` writes the week as 2 h blocks
and Debian's Prometheus serves them. The answers are known from the generator:
peak hour 14:00 UTC, 4 replicas of ``tiny`` at the surge peak, 1 at the trough,
one span above capacity on the surge day from 13:00 to about 16:00; ``small``
(capacity from --profile) above capacity every afternoon.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from exporter.cli import main
from tests.plan import synthetic_week as wk
from tests.support.ports import free_port
from tests.support.processes import Child

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")

pytestmark = [
    pytest.mark.skipif(
        PROMETHEUS is None or PROMTOOL is None, reason="Debian package prometheus (prometheus, promtool) not installed"
    ),
]


@pytest.fixture(scope="module")
def week_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, wk.Week]]:
    assert PROMETHEUS and PROMTOOL
    root = tmp_path_factory.mktemp("plan-prometheus")
    week = wk.make_week(time.time())
    source = root / "week.om"
    source.write_text(wk.openmetrics(week))
    data = root / "data"
    done = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        PROMETHEUS,
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=30d",  # the blocks are a week old: kept
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with Child(argv, "prometheus", cwd=None, log_dir=root) as process:
        process.wait_http(url + "/-/ready", 60)
        yield url, week


def _hour_of(iso: str) -> tuple[float, int]:
    t = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    return t, int((t % 86400) // 3600)


def _profile(tmp_path: Path) -> Path:
    """A tune.json of `small`'s replica: its recommendation carries 2 req/s and concurrency 4 at SLO."""
    path = tmp_path / "tune.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "baseline": {"capacity": {"concurrency": 2, "requests_per_second": 1.0, "tokens_per_second": 90.0}},
                "recommendation": {"capacity": {"concurrency": 4, "requests_per_second": 2.0, "tokens_per_second": 180.0}},
            }
        )
    )
    return path


def test_plan_over_a_backfilled_week_names_the_peak_the_replicas_and_the_short_hours(
    week_prometheus: tuple[str, wk.Week], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, week = week_prometheus
    out = tmp_path / "plan"
    profile = _profile(tmp_path)
    rc = main(["plan", "--prometheus", url, "--since", "7d", "--step", "5m", "--out", str(out), "--profile", f"small={profile}"])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    for name in ("plan.md", "plan.html", "plan.png", "plan.json"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "plan.json").read_text())
    models = {m["model"]: m for m in doc["models"]}
    assert set(models) == {wk.MODEL, wk.SMALL}
    assert doc["headroom"] == 0.2 and doc["range"]["step_seconds"] == 300

    tiny = models[wk.MODEL]
    assert tiny["capacity_per_replica"]["source"] == "prometheus"
    assert tiny["capacity_per_replica"]["requests_per_second"] == wk.RPS_PER_REPLICA
    assert tiny["capacity_per_replica"]["concurrency"] == wk.CONCURRENCY_PER_REPLICA
    assert tiny["replicas_observed"] == {"max": 2, "min": 2}
    # the peak is the surge day's 14:00 hour (about 8 req/s): 8 / (3 x 0.8) -> 4 replicas; ceiling floor(8 x 0.8) = 6
    peak_t, peak_h = _hour_of(tiny["peak"]["hour"])
    assert peak_h == wk.PEAK_HOUR and week.surge_day <= peak_t < week.surge_day + 86400
    assert 7.5 < tiny["peak"]["requests_per_second"] < 8.5
    assert tiny["peak"]["replicas_needed"] == 4 and tiny["peak"]["replicas_needed_by_rate"] == 4
    assert tiny["peak"]["concurrency_ceiling_per_replica"] == 6
    # the trough is a 02:00 hour (about 1 req/s): one replica
    assert _hour_of(tiny["trough"]["hour"])[1] == wk.TROUGH_HOUR
    assert tiny["trough"]["replicas_needed"] == 1
    assert tiny["typical_peak_hour_utc"] == wk.PEAK_HOUR
    # above capacity: the surge only, one span 13:00 to about 16:00 of that day
    spans = tiny["above_capacity"]["spans"]
    assert len(spans) == 1, spans
    start_t, start_h = _hour_of(spans[0]["start"])
    end_t, _ = _hour_of(spans[0]["end"])
    assert week.surge_day + 13 * 3600 <= start_t <= week.surge_day + 13 * 3600 + 600
    assert week.surge_day + 16 * 3600 <= end_t <= week.surge_day + 16 * 3600 + 900
    hours = {_hour_of(h)[1] for h in tiny["above_capacity"]["hours"]}
    assert {13, 14, 15} <= hours <= {13, 14, 15, 16}

    small = models[wk.SMALL]
    assert (
        small["capacity_per_replica"]["source"].startswith("profile ")
        and "tune recommendation" in small["capacity_per_replica"]["source"]
    )
    # peak 2.5 req/s / (2 x 0.8) -> 2 replicas; trough 0.5 -> 1; ceiling floor(4 x 0.8) = 3
    assert small["peak"]["replicas_needed"] == 2 and small["trough"]["replicas_needed"] == 1
    assert small["peak"]["concurrency_ceiling_per_replica"] == 3
    # one replica of 2 req/s: short every afternoon, 1.5 + cos > 2 from 10:30 to 18:30
    afternoons = small["above_capacity"]["spans"]
    assert len(afternoons) >= 6
    # the data starts at week.start, plan's range at now - 7d (3-27 h later): whichever is later cuts
    first = max(week.start, _hour_of(doc["range"]["start"])[0])
    last = min(week.end, _hour_of(doc["range"]["end"])[0])
    for span in afternoons:
        s_t, s_h = _hour_of(span["start"])
        e_t, e_h = _hour_of(span["end"])
        if s_t > first + 3600 and e_t < last:  # the spans the edges do not cut
            assert 10 <= s_h <= 11 and 18 <= e_h <= 19, span

    assert "tiny: peak" in printed.out and "-> 4 replicas" in printed.out
    assert f"above capacity {spans[0]['start']} to {spans[0]['end']}" in printed.out
    md = (out / "plan.md").read_text()
    assert "14:00 UTC" in md and "Above measured capacity" in md and "plan.png" in md
    assert "data:image/png;base64," in (out / "plan.html").read_text()


def test_plan_model_filter_and_no_data(
    week_prometheus: tuple[str, wk.Week], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = week_prometheus
    rc = main(["plan", "--prometheus", url, "--since", "2d", "--step", "10m", "--model", wk.MODEL, "--out", str(tmp_path / "a")])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "a" / "plan.json").read_text())
    assert [m["model"] for m in doc["models"]] == [wk.MODEL]
    capsys.readouterr()
    rc = main(["plan", "--prometheus", url, "--since", "1h", "--out", str(tmp_path / "b")])  # the last 3 h hold no samples
    err = capsys.readouterr().err
    assert rc == 1 and "holds no llm_requests_finished_total" in err and len(err.strip().splitlines()) == 1
