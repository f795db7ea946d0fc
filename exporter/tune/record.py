"""``DIR/tune.json``: the baseline, every trial, the recommendation and the rollback, as issue 21 names them.

Why every ramp record is kept (``runs``): ``compare tune.json#baseline
tune.json#trial-2`` re-reads them, so the verdict diff of any two stages can be
redone later without re-measuring. Non-finite numbers become null (exporter/jsonsafe.py).

Why every command line is redacted here (exporter/tune/redact.py): tune.json is
made to be shared, and ``build`` is the one place every record, the report and
the closing terminal paragraph are made from. Credentials show as ``<redacted>``
(``argv`` of the baseline, trials, recommendation, rollback, left_running and
each fingerprint, and the changes); a last pass takes their values out of every
other text. So two commands that differ only in a credential record the same
fingerprint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from exporter import jsonsafe
from exporter.capacity.layout import Scaled, layout_of_fingerprint, scaled, smallest_against
from exporter.tune import redact
from exporter.tune.accept import RULE
from exporter.tune.argv import changes_between
from exporter.tune.capacity import SLO, capacity_at_slo
from exporter.tune.decide import common_primary
from exporter.tune.session import Measurement, TuneResult

VERSION = 1


def _knee(m: Measurement) -> int | None:
    knees = [r["knee"]["concurrency"] for r in m.runs if r.get("knee")]
    return min(knees) if knees else None


def _primary(m: Measurement, slo: SLO) -> dict[str, str] | None:
    p = common_primary(m.runs, slo)
    return None if p is None else {"layer": p.layer, "cause": p.cause, "chain": p.chain}


def _fingerprint(m: Measurement) -> dict[str, Any] | None:
    """The configuration measured, for a capacity profile (exporter/capacity): what its exporter published
    during the last run that saw any, with the command line the tuner started it with."""
    found = next((r["fingerprint"] for r in reversed(m.runs) if isinstance(r.get("fingerprint"), dict)), None)
    out = dict(found) if found is not None else {"engine": None, "model": None, "settings": {}}
    out["argv"] = redact.argv(m.cmd.full())
    return out


def _workload(m: Measurement) -> dict[str, Any] | None:
    """Mean prompt / output tokens per request over the runs (each run's ``workload``, exporter/ramp/report.py)."""
    seen = [r["workload"] for r in m.runs if isinstance(r.get("workload"), dict)]
    out: dict[str, Any] = {}
    for key in ("prompt_tokens_mean", "output_tokens_mean"):
        values = [w[key] for w in seen if isinstance(w.get(key), (int, float))]
        if values:
            out[key] = sum(values) / len(values)
    if not out:
        return None
    out["source"] = seen[-1].get("source")
    return out


def _layout_fingerprint(m: Measurement) -> dict[str, Any]:
    """The fingerprint a layout is read from: the family the tuner started, where the exporter named none
    (the flags of its command line then say the layout, exporter/capacity/layout.py)."""
    fp = _fingerprint(m) or {}
    return fp if fp.get("engine") else {**fp, "engine": m.cmd.engine}


def _scaled(m: Measurement, slo: SLO) -> Scaled | None:
    """The configuration's capacity at SLO against its layout (exporter/capacity/layout.py); None: not measured."""
    if not m.runs:
        return None
    return scaled([capacity_at_slo(r, slo) for r in m.runs], m.capacity(slo), _layout_fingerprint(m))


def _scaling(m: Measurement, slo: SLO) -> dict[str, Any]:
    """``layout``, ``per_gpu`` and ``per_user_output_tokens_per_second`` (the last two null when not measured)."""
    found = _scaled(m, slo)
    if found is None:
        layout = layout_of_fingerprint(_layout_fingerprint(m)).as_dict()
        return {"layout": layout, "per_gpu": None, "per_user_output_tokens_per_second": None}
    return found.fields()


def _config(m: Measurement, slo: SLO) -> dict[str, Any]:
    return {
        "argv": redact.argv(m.cmd.full()),
        "capacity": m.capacity(slo).as_dict(),
        "fingerprint": _fingerprint(m),
        "workload": _workload(m),
        **_scaling(m, slo),
        "knee": _knee(m),
        "primary": _primary(m, slo),
        "warmup": m.warmup,
        "runs": m.runs,
        "failure": m.failure,
        "seconds": round(m.seconds, 1),
    }


def _deployment(result: TuneResult) -> dict[str, Any] | None:
    """What every candidate stayed inside (exporter/tune/layout.py): the GPUs, where that count came from
    (``--gpus`` or the baseline's TP x PP x DP; null: unknown, not checked), the quantised build named."""
    dep = result.deployment
    if dep is None:
        return None
    source = "--gpus" if dep.gpus_given else ("baseline" if dep.gpus is not None else None)
    return {"gpus": dep.gpus, "gpus_from": source, "quantized_model": dep.quantized_model}


def build(result: TuneResult, slo: SLO, engine: str, mode: str) -> dict[str, Any]:
    base = result.baseline
    best = result.best
    names = {id(base): "baseline", **{id(t.measurement): f"trial {t.number}" for t in result.trials}}
    efficiencies = smallest_against(
        [("baseline", _scaled(base, slo))] + [(f"trial {t.number}", _scaled(t.measurement, slo)) for t in result.trials]
    )
    recommendation = None
    if best is not None and best is not base:
        b_rps = base.capacity(slo).requests_per_second
        recommendation = {
            "argv": redact.argv(best.cmd.full()),
            "changes": [redact.change(c.as_dict()) for c in changes_between(base.cmd, best.cmd)],
            "gain": best.capacity(slo).requests_per_second / b_rps if b_rps > 0 else None,
            "primary_after": _primary(best, slo),
            "capacity": best.capacity(slo).as_dict(),
            "fingerprint": _fingerprint(best),
            "workload": _workload(best),
            **_scaling(best, slo),
            "scaling_efficiency": efficiencies.get(names.get(id(best), "")),
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
                "changes": [redact.change(c.as_dict()) for c in d.changes],
                "trade": d.trade or None,
                **{k: v for k, v in _config(t.measurement, slo).items()},
                "scaling_efficiency": efficiencies.get(f"trial {t.number}"),
                "accepted": t.accepted,
                "why": t.why,
                "gain": t.gain,
            }
        )
    left = result.left_running
    if left is not None and isinstance(left.get("argv"), list):
        left = {**left, "argv": redact.argv(left["argv"])}
    secrets = redact.values(base.cmd.full(), *(t.measurement.cmd.full() for t in result.trials))
    doc = {
        "version": VERSION,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "engine": engine,
        "mode": mode,
        "slo": {"ttft_s": slo.ttft_s, "itl_s": slo.itl_s},
        "rule": RULE,
        "baseline": {**_config(base, slo), "scaling_efficiency": efficiencies.get("baseline")},
        "trials": trials,
        "recommendation": recommendation,
        "rollback": {"argv": redact.argv(base.cmd.full())},
        "stop": result.stop,
        "deployment": _deployment(result),
        "interrupted": result.interrupted,
        "left_running": left,
        "seconds": round(result.seconds, 1),
    }
    scrubbed: dict[str, Any] = redact.scrub(doc, secrets)
    return scrubbed


def write(directory: Path, doc: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tune.json"
    tmp = directory / ".tune.json.tmp"
    tmp.write_text(jsonsafe.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


__all__ = ["VERSION", "build", "write"]
