"""``DIR/tune.json``: the baseline, every trial, the recommendation and the rollback, as issue 21 names them.

Why every ramp record is kept (``runs``): ``compare tune.json#baseline
tune.json#trial-2`` re-reads them, so the verdict diff of any two stages can be
redone later without re-measuring. Non-finite numbers become null (exporter/jsonsafe.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from exporter import jsonsafe
from exporter.tune.accept import RULE
from exporter.tune.argv import changes_between
from exporter.tune.capacity import SLO
from exporter.tune.decide import common_primary
from exporter.tune.session import Measurement, TuneResult

VERSION = 1


def _knee(m: Measurement) -> int | None:
    knees = [r["knee"]["concurrency"] for r in m.runs if r.get("knee")]
    return min(knees) if knees else None


def _primary(m: Measurement, slo: SLO) -> dict[str, str] | None:
    p = common_primary(m.runs, slo)
    return None if p is None else {"layer": p.layer, "cause": p.cause, "chain": p.chain}


def _config(m: Measurement, slo: SLO) -> dict[str, Any]:
    return {
        "argv": m.cmd.full(),
        "capacity": m.capacity(slo).as_dict(),
        "knee": _knee(m),
        "primary": _primary(m, slo),
        "runs": m.runs,
        "failure": m.failure,
        "seconds": round(m.seconds, 1),
    }


def build(result: TuneResult, slo: SLO, engine: str, mode: str) -> dict[str, Any]:
    base = result.baseline
    best = result.best
    recommendation = None
    if best is not None and best is not base:
        b_rps = base.capacity(slo).requests_per_second
        recommendation = {
            "argv": best.cmd.full(),
            "changes": [c.as_dict() for c in changes_between(base.cmd, best.cmd)],
            "gain": best.capacity(slo).requests_per_second / b_rps if b_rps > 0 else None,
            "primary_after": _primary(best, slo),
            "capacity": best.capacity(slo).as_dict(),
        }
    trials = []
    for t in result.trials:
        d = t.decision
        trials.append(
            {
                "trial": t.number,
                "stage": d.stage,
                "group": d.group,
                "cause": d.cause,
                "reason": d.reason,
                "changes": [c.as_dict() for c in d.changes],
                **{k: v for k, v in _config(t.measurement, slo).items()},
                "accepted": t.accepted,
                "why": t.why,
                "gain": t.gain,
            }
        )
    return {
        "version": VERSION,
        "engine": engine,
        "mode": mode,
        "slo": {"ttft_s": slo.ttft_s, "itl_s": slo.itl_s},
        "rule": RULE,
        "baseline": _config(base, slo),
        "trials": trials,
        "recommendation": recommendation,
        "rollback": {"argv": base.cmd.full()},
        "stop": result.stop,
        "interrupted": result.interrupted,
        "left_running": result.left_running,
        "seconds": round(result.seconds, 1),
    }


def write(directory: Path, doc: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tune.json"
    tmp = directory / ".tune.json.tmp"
    tmp.write_text(jsonsafe.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


__all__ = ["VERSION", "build", "write"]
