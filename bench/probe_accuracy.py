"""How close the canary probe's "time outside the engine" comes to the truth, direct and behind a slow proxy.

    python3 -m bench.probe_accuracy

Why a benchmark (issue 31): the gate asserted "every probe within 100 ms of the engine's figure",
a wall-clock figure of this host: on two loaded cores the exchange itself takes longer. What the
gate keeps is what holds on any host (tests/probe/test_probe_front_end.py): outside the engine is
never below zero nor above the TTFT seen, and behind a proxy that holds the first byte D seconds it
is at least D. This prints how far above those floors the probe reads here: the fake engine of the
probe tests (tests/probe/probe_http.py) reports its own prefill, as llama.cpp does, and
``SlowProxy`` (tests/probe/proxies.py) adds a known delay.

Printed: the median and worst outside-engine figure of 10 probes direct, and of 10 probes through
a proxy adding DELAY_S, less that delay. The real engines' figures are recorded by their gate tests
as test properties (tests/integration/test_vllm.py, tests/probe/test_probe_llamacpp.py).
"""

from __future__ import annotations

import statistics
import sys

from tests.probe.probe_http import Behaviour, ProbeHTTPServer, outside_engine
from tests.probe.proxies import SlowProxy

DELAY_S = 0.6
PROBES = 10
PROBE_TIMEOUT_S = DELAY_S + 1.2
#: the figure the gate asserted before issue 31, now this benchmark's target
FORMER_GATE_S = 0.1


def measure() -> dict[str, float]:
    """Median and worst overshoot (s) of the outside-engine figure over its truth, direct and through the proxy."""
    with ProbeHTTPServer(Behaviour(prompt_ms=0.0)) as server:
        direct = [x for x, _ in outside_engine(server.url, None, PROBES, PROBE_TIMEOUT_S)]
        with SlowProxy(int(server.url.rsplit(":", 1)[1]), DELAY_S) as proxy:
            through = [x - DELAY_S for x, _ in outside_engine(server.url, proxy.url, PROBES, PROBE_TIMEOUT_S)]
    return {
        "direct_median_s": statistics.median(direct),
        "direct_max_s": max(direct),
        "proxy_extra_median_s": statistics.median(through),
        "proxy_extra_max_s": max(through),
    }


def main() -> int:
    figures = measure()
    for name, value in figures.items():
        print(f"{name:24s} {value * 1000:8.1f} ms")
    worst = max(figures["direct_max_s"], figures["proxy_extra_max_s"])
    print(f"worst {worst * 1000:.1f} ms beyond the truth (the former gate's bound: {FORMER_GATE_S * 1000:.0f} ms)")
    return 0 if worst < 2 * FORMER_GATE_S else 1


if __name__ == "__main__":
    sys.exit(main())
