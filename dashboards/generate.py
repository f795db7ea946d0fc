"""Generate (or --check) the Grafana dashboards in dashboards/json/.

    python3 dashboards/generate.py          # rewrite dashboards/json/*.json
    python3 dashboards/generate.py --check  # exit 1 if a file is stale, extra, or a query is wrong

Why generated: every name a panel queries comes from exporter/schema.py or a
recording rule in alerts/, and --check fails when one does not exist, so a
metric rename cannot leave a panel dark (the failure mode of most published
LLM dashboards; see shared/reference/dashboards-and-alerts.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `dashboards`, `alerts`, `exporter` importable
    sys.path.insert(0, str(ROOT))

from alerts.causes import LAYER_DASHBOARD  # noqa: E402
from alerts.generate import RUNBOOKS, known_series, verdict_series  # noqa: E402
from alerts.settings import Settings, load  # noqa: E402
from dashboards.boards import (  # noqa: E402
    application,
    fleet,
    hardware,
    memory,
    overview,
    parallel,
    scheduler,
    speculative,
)
from dashboards.layers import LAYER_LINKS  # noqa: E402
from dashboards.lint import dashboard_problems, runbook_problems  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent / "json"
BOARDS = (overview, hardware, memory, scheduler, parallel, speculative, application, fleet)  # fleet: issue 15


def build_all(s: Settings) -> list[dict[str, Any]]:
    return [board.build(s).to_json() for board in BOARDS]


def render(s: Settings) -> dict[str, str]:
    """File name -> JSON text, for every dashboard."""
    return {f"{d['uid']}.json": json.dumps(d, indent=2, ensure_ascii=False) + "\n" for d in build_all(s)}


def problems(s: Settings) -> list[str]:
    dashboards = build_all(s)
    known, verdict = known_series(s), verdict_series(s)
    out: list[str] = []
    for d in dashboards:
        out += dashboard_problems(d, known, verdict)
    uids = [d["uid"] for d in dashboards]
    titles = {d["title"] for d in dashboards}
    if len(set(uids)) != len(uids):
        out.append("duplicate dashboard uid")
    out += [f"layer link to unknown dashboard {uid}" for uid, _ in LAYER_LINKS if uid not in uids]
    out += [f"alerts name dashboard {t!r}, which does not exist" for t in set(LAYER_DASHBOARD.values()) if t not in titles]
    out += runbook_problems(RUNBOOKS.read_text(), dashboards)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a checked-in file is stale or a query is wrong")
    args = parser.parse_args(argv)
    s = load()
    texts = render(s)
    errors = problems(s)
    if args.check:
        for name, text in texts.items():
            path = OUT_DIR / name
            if not path.exists() or path.read_text() != text:
                errors.append(f"dashboards/json/{name} is stale: run python3 dashboards/generate.py")
        for path in sorted(OUT_DIR.glob("*.json")):
            if path.name not in texts:
                errors.append(f"dashboards/json/{path.name} is not produced by the generator")
    else:
        OUT_DIR.mkdir(exist_ok=True)
        for name, text in texts.items():
            (OUT_DIR / name).write_text(text)
    for e in errors:
        print(f"dashboards: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
