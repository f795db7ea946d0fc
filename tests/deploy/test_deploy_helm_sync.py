"""The chart's copies of the dashboards and rules (helm/sync.py) equal their sources."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.deploy.deploy_helpers import CHART, DASHBOARDS_JSON, ROOT, dashboard_sources, run

RULES = ROOT / "alerts"


def _pairs() -> list[tuple[Path, Path]]:
    rules = sorted(RULES.glob("*_rules.yml"))
    assert {p.name for p in rules} >= {"recording_rules.yml", "alerting_rules.yml"}
    return [(p, CHART / "dashboards" / p.name) for p in dashboard_sources()] + [
        (p, CHART / "files" / "rules" / p.name) for p in rules
    ]


def test_chart_copies_equal_the_sources_byte_for_byte() -> None:
    pairs = _pairs()
    for source, copy in pairs:
        assert copy.is_file(), f"{copy.relative_to(ROOT)} missing: run python3 helm/sync.py"
        assert copy.read_bytes() == source.read_bytes(), (
            f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: run python3 helm/sync.py"
        )
    copies = {c for _, c in pairs}
    extra = [p for d in (CHART / "dashboards", CHART / "files" / "rules") for p in d.iterdir() if p not in copies]
    assert extra == [], f"chart files without a source: {extra}"


def test_sync_check_passes_on_the_tree() -> None:
    result = run(sys.executable, "helm/sync.py", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_sync_check_finds_and_sync_repairs_drift(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "helm", root / "helm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(DASHBOARDS_JSON, root / DASHBOARDS_JSON.relative_to(ROOT))
    (root / "alerts").mkdir()
    for p in RULES.glob("*_rules.yml"):
        shutil.copy2(p, root / "alerts" / p.name)
    chart = root / CHART.relative_to(ROOT)
    dashboards = sorted((chart / "dashboards").glob("*.json"))
    edited, removed = dashboards[0], dashboards[1]
    edited.write_bytes(edited.read_bytes() + b" ")
    removed.unlink()
    stray = chart / "files" / "rules" / "old_rules.yml"
    stray.write_text("groups: []\n")

    check = run(sys.executable, "helm/sync.py", "--check", cwd=root)
    assert check.returncode == 1
    for path in (edited, removed, stray):
        assert str(path.relative_to(root)) in check.stdout

    assert run(sys.executable, "helm/sync.py", cwd=root).returncode == 0
    assert run(sys.executable, "helm/sync.py", "--check", cwd=root).returncode == 0
    assert not stray.exists()
    for name in (edited.name, removed.name):
        assert (chart / "dashboards" / name).read_bytes() == (DASHBOARDS_JSON / name).read_bytes()
