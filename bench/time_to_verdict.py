"""Time to verdict: diagnosis cycles from a live scenario switch to the right cause.

    python bench/time_to_verdict.py [--json PATH] [--time-scale 4] [--max-cycles 30]

Starts the simulator (`simulate`, 4 GPUs) and the exporter (`serve` reading the
simulator's /metrics, /sim/gpu and PID, every interval 1 s, default diagnosis
thresholds) as real processes, drives each scenario's own load, and for each
scenario: returns to `healthy` until three verdicts in a row hold no cause,
and until healthy has run a whole diagnosis window (--settle-seconds, default
20 s: the window then holds healthy data only, so the figure does not depend on
which scenario ran before), switches the running simulator (POST /sim/scenario), and counts diagnosis
cycles until the scenario's cause is reported. Cycle 1 is the first verdict
computed from a snapshot taken after the switch. First it watches `healthy`
for --healthy-seconds and counts false alarms (any cause with score >= 0.5).

Prints a table, writes JSON, exits 0 when every scenario met the target
(<= 2 cycles) and healthy raised nothing, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.diagnosis.sim_stack import Stack, causes
from tests.diagnosis.test_diagnosis_scenarios import EXPECTED

TARGET_CYCLES = 2


def measure(args: argparse.Namespace) -> dict:
    results: dict = {"target_cycles": TARGET_CYCLES, "time_scale": args.time_scale, "interval_s": 1.0,
                     "loadavg_start": os.getloadavg(), "cpus": os.cpu_count(), "scenarios": []}
    with Stack(gpus=4, time_scale=args.time_scale) as stack:
        healthy = stack.verdicts(args.healthy_seconds)
        alarms = [sorted(causes(v, min_score=0.5)) for v in healthy if causes(v, min_score=0.5)]
        results["healthy"] = {"cycles": len(healthy), "false_alarm_cycles": len(alarms), "false_alarms": alarms[:10]}
        for scenario, layer, cause in EXPECTED:
            if args.only and scenario not in args.only:
                continue
            quiet = stack.back_to_healthy(quiet_cycles=3, timeout=120, settle_s=args.settle_seconds)
            started = time.monotonic()
            cycles, seen = stack.switch_and_count(scenario, layer, cause, max_cycles=args.max_cycles)
            others = sorted({f"{lc[0]}/{lc[1]}" for v in seen for lc in causes(v)} - {f"{layer}/{cause}"})
            row = {"scenario": scenario, "expected": f"{layer}/{cause}", "cycles": cycles,
                   "seconds": round(time.monotonic() - started, 1) if cycles else None,
                   "healthy_before": quiet, "other_causes_seen": others}
            results["scenarios"].append(row)
            print(f"  {scenario:24} {row['expected']:50} cycles={cycles}", file=sys.stderr, flush=True)
    results["loadavg_end"] = os.getloadavg()
    return results


def table(results: dict) -> str:
    head = ("scenario", "expected cause", "cycles", "seconds", f"<= {TARGET_CYCLES}", "other causes in those cycles")
    rows = [head]
    for r in results["scenarios"]:
        ok = r["cycles"] is not None and r["cycles"] <= TARGET_CYCLES
        rows.append((r["scenario"], r["expected"], str(r["cycles"] if r["cycles"] is not None else f">{results.get('max_cycles', '?')}"),
                     str(r["seconds"] if r["seconds"] is not None else "-"), "yes" if ok else "NO", ", ".join(r["other_causes_seen"]) or "-"))
    width = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, width)) for row in rows]
    h = results["healthy"]
    lines.append(f"healthy: {h['false_alarm_cycles']} false-alarm cycles of {h['cycles']} (any cause with score >= 0.5)")
    lines.append(f"time scale {results['time_scale']}, 1 s intervals, load average {results['loadavg_start'][0]:.1f} -> "
                 f"{results['loadavg_end'][0]:.1f} on {results['cpus']} CPUs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "time_to_verdict.json", help="where to write the JSON")
    ap.add_argument("--time-scale", type=float, default=4.0, help="simulator speed-up (default 4)")
    ap.add_argument("--max-cycles", type=int, default=30, help="give up on a scenario after this many cycles (default 30)")
    ap.add_argument("--healthy-seconds", type=float, default=30.0, help="how long to watch healthy for false alarms (default 30)")
    ap.add_argument("--settle-seconds", type=float, default=20.0,
                    help="healthy time before each switch (default 20: the default diagnosis window)")
    ap.add_argument("--only", action="append", help="measure only this scenario (repeatable)")
    args = ap.parse_args(argv)
    results = measure(args)
    results["max_cycles"] = args.max_cycles
    print(table(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.json}")
    met = all(r["cycles"] is not None and r["cycles"] <= TARGET_CYCLES for r in results["scenarios"])
    return 0 if met and results["healthy"]["false_alarm_cycles"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
