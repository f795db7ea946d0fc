"""Time to verdict: diagnosis cycles from a live scenario switch to the right primary, then how steady it is.

    python bench/time_to_verdict.py [--json PATH] [--time-scale 4] [--max-cycles 30] [--burn N]

Starts the simulator (`simulate`, 4 GPUs) and the exporter (`serve` reading the
simulator's /metrics, /sim/gpu and PID, every interval 1 s, default diagnosis
thresholds) as real processes, drives each scenario's own load, and for each
scenario: returns to `healthy` until three verdicts in a row hold no cause,
and until healthy has run a whole diagnosis window (--settle-seconds, default
20 s), switches the running simulator (POST /sim/scenario), and counts diagnosis
cycles until the scenario's cause is THE primary. Cycle 1 is the first verdict
computed from a snapshot taken after the switch; symptoms need two cycles to
count, and the scenario's load needs a few seconds to build its queue, so the
figure includes both. Then it reads --steady-cycles more verdicts (after skipping
two) and reports the share naming the same primary. First it watches `healthy`
for --healthy-seconds and counts the readings that are not `healthy`.
`--burn N` runs N busy-looping processes beside it (a saturated machine).

Prints a table, writes JSON, exits 0 when every scenario reached its primary
within --max-cycles and held it in >= 95 % of the steady readings and healthy
read healthy throughout, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.diagnosis.test_diagnosis_scenarios import EXPECTED  # noqa: E402 - needs the root on sys.path first
from tests.support.stack import ScenarioStack  # noqa: E402

MIN_STEADY_SHARE = 0.95


def _primary(v: dict[str, Any]) -> str | None:
    p = v.get("primary")
    return f"{p['layer']}/{p['cause']}" if p else None


def _burners(n: int) -> list[subprocess.Popen[bytes]]:

    code = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "time_scale": args.time_scale,
        "interval_s": 1.0,
        "burners": args.burn,
        "loadavg_start": os.getloadavg(),
        "cpus": os.cpu_count(),
        "scenarios": [],
    }
    burners = _burners(args.burn)
    try:
        with ScenarioStack(gpus=4, time_scale=args.time_scale) as stack:
            healthy = stack.verdicts(args.healthy_seconds)
            loud = [v["state"] + (f":{_primary(v)}" if _primary(v) else "") for v in healthy if v["state"] != "healthy"]
            results["healthy"] = {"cycles": len(healthy), "not_healthy_readings": len(loud), "examples": loud[:10]}
            for scenario, layer, cause in EXPECTED:
                if args.only and scenario not in args.only:
                    continue
                quiet = stack.back_to_healthy(quiet_cycles=3, timeout=120, settle_s=args.settle_seconds)
                started = time.monotonic()
                cycles, seen = stack.switch_and_count(scenario, layer, cause, max_cycles=args.max_cycles, primary_only=True)
                steady = stack.next_verdicts(args.steady_cycles + 2)[2:] if cycles else []
                right = sum(1 for v in steady if _primary(v) == f"{layer}/{cause}")
                others = sorted({p for v in seen + steady if (p := _primary(v)) and p != f"{layer}/{cause}"})
                row = {
                    "scenario": scenario,
                    "expected": f"{layer}/{cause}",
                    "cycles": cycles,
                    "seconds": round(time.monotonic() - started, 1) if cycles else None,
                    "steady_share": round(right / len(steady), 3) if steady else None,
                    "steady_readings": len(steady),
                    "healthy_before": quiet,
                    "other_primaries_seen": others,
                }
                results["scenarios"].append(row)
                print(
                    f"  {scenario:24} {row['expected']:50} cycles={cycles} steady={row['steady_share']}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for b in burners:
            b.kill()
            b.wait(10)
    results["loadavg_end"] = os.getloadavg()
    return results


def table(results: dict[str, Any]) -> str:
    head = ("scenario", "expected primary", "cycles to it", "seconds", "steady share", "other primaries seen")
    rows = [head]
    for r in results["scenarios"]:
        rows.append(
            (
                r["scenario"],
                r["expected"],
                str(r["cycles"] if r["cycles"] is not None else f">{results.get('max_cycles', '?')}"),
                str(r["seconds"] if r["seconds"] is not None else "-"),
                f"{100 * r['steady_share']:.0f} % of {r['steady_readings']}" if r["steady_share"] is not None else "-",
                ", ".join(r["other_primaries_seen"]) or "-",
            )
        )
    width = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, width)) for row in rows]
    h = results["healthy"]
    lines.append(f"healthy: {h['not_healthy_readings']} readings not healthy of {h['cycles']}")
    lines.append(
        f"time scale {results['time_scale']}, 1 s intervals, {results['burners']} busy processes beside, load average "
        f"{results['loadavg_start'][0]:.1f} -> {results['loadavg_end'][0]:.1f} on {results['cpus']} CPUs"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--json", type=Path, default=ROOT / "bench" / "results" / "time_to_verdict.json", help="where to write the JSON"
    )
    ap.add_argument("--time-scale", type=float, default=4.0, help="simulator speed-up (default 4)")
    ap.add_argument("--max-cycles", type=int, default=30, help="give up on a scenario after this many cycles (default 30)")
    ap.add_argument("--healthy-seconds", type=float, default=30.0, help="how long to watch healthy for false alarms (default 30)")
    ap.add_argument(
        "--settle-seconds",
        type=float,
        default=20.0,
        help="healthy time before each switch (default 20: the default diagnosis window)",
    )
    ap.add_argument("--only", action="append", help="measure only this scenario (repeatable)")
    ap.add_argument("--steady-cycles", type=int, default=20, help="readings after the first naming (default 20)")
    ap.add_argument("--burn", type=int, default=0, help="busy-looping processes beside the stack (default 0)")
    args = ap.parse_args(argv)
    results = measure(args)
    results["max_cycles"] = args.max_cycles
    print(table(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.json}")
    met = all(r["cycles"] is not None and (r["steady_share"] or 0) >= MIN_STEADY_SHARE for r in results["scenarios"])
    return 0 if met and results["healthy"]["not_healthy_readings"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
