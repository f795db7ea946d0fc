#!/usr/bin/env python3
"""Copy the shipped dashboards and rules into the Helm chart, byte for byte.

Helm's `.Files` sees only the chart folder, so the chart carries copies:

    dashboards/json/*.json  -> helm/llm-layer-exporter/dashboards/*.json
    alerts/*_rules.yml      -> helm/llm-layer-exporter/files/rules/*_rules.yml

The chart's templates turn them into one ConfigMap per dashboard and one
PrometheusRule whose groups are those of the rule files. Never edit the copies:
change the sources (their own generators), then run

    python3 helm/sync.py            # write the copies, drop stale ones
    python3 helm/sync.py --check    # exit 1 if any copy differs, is missing or is extra
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "llm-layer-exporter"

#: (source folder, glob, chart folder)
COPIES = (
    (ROOT / "dashboards" / "json", "*.json", CHART / "dashboards"),
    (ROOT / "alerts", "*_rules.yml", CHART / "files" / "rules"),
)


def plan(copies=COPIES) -> list[tuple[str, Path, Path | None]]:
    """Every action needed: ("write", source, target) or ("delete", target, None)."""
    actions: list[tuple[str, Path, Path | None]] = []
    for src_dir, pattern, dst_dir in copies:
        sources = {p.name: p for p in sorted(src_dir.glob(pattern)) if p.is_file()}
        if not sources:
            raise SystemExit(f"sync: no {pattern} in {src_dir.relative_to(ROOT)}: nothing to copy into the chart")
        for name, src in sources.items():
            dst = dst_dir / name
            if not dst.is_file() or dst.read_bytes() != src.read_bytes():
                actions.append(("write", src, dst))
        for dst in sorted(dst_dir.glob(pattern)) if dst_dir.is_dir() else []:
            if dst.name not in sources:
                actions.append(("delete", dst, None))
    return actions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the chart's copies are stale")
    args = parser.parse_args(argv)
    actions = plan()
    for action, path, target in actions:
        shown = (target or path).relative_to(ROOT)
        if args.check:
            print(f"stale: {shown} ({'differs from or lacks ' + str(path.relative_to(ROOT)) if target else 'has no source'})")
        elif action == "write":
            assert target is not None
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            print(f"wrote {shown}")
        else:
            path.unlink()
            print(f"deleted {shown}")
    if args.check and actions:
        print("run: python3 helm/sync.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
