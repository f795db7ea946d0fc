"""The tour on top of the refresh loop: each scenario switched in live, its verdicts gathered, back to healthy.

Why back to healthy until the diagnosis is quiet: a scenario's data drains out of the
diagnosis window over seconds, and the next scenario must be judged on its own; a
scenario's load drains too (exporter/demo/loads.py), so no abort reaches the verdict.
"""

from __future__ import annotations

import time
from typing import Any

from exporter.demo.plan import EXPECTED_PRIMARY
from exporter.demo.session import Session
from exporter.demo.stack import ChildFailed
from exporter.demo.summary import conclude, summary_lines
from exporter.demo.transcript import injected_text
from exporter.demo.verdicts import conclusion_line
from exporter.simulator import scenarios

#: back to healthy between scenarios: this many verdicts in a row with nothing reported, at most this long
QUIET_CYCLES = 3
QUIET_MAX_SECONDS = 45.0


async def switch(session: Session, name: str, load_seconds: float | None = None) -> None:
    """The simulator to ``name``, and (unless healthy, whose load runs throughout) its load for
    ``load_seconds``, after which that load drains: nothing is cancelled, so no abort shows up
    as a failure in the verdict on the way back to healthy."""
    resp = await session.client.post(session.sim_url + "/sim/scenario", json={"scenario": name})
    if resp.status_code != 200:
        raise ChildFailed(f"the simulator refused scenario {name}: {resp.text[:200]}")
    if name != "healthy":
        session.loads.start(name, load_seconds)
    session.scenario = name


async def visit(session: Session) -> None:
    """Every scenario of ``--tour`` in turn, each announced, run and concluded; the summary last."""
    names = session.args.tour_names
    seconds = session.args.tour_seconds
    session.say(
        f"tour: {', '.join(names)} — {seconds:g} s each, back to healthy in between (up to "
        f"{QUIET_MAX_SECONDS:g} s); `demo --scenario NAME` runs one of them until Ctrl-C"
    )
    for i, name in enumerate(names, 1):
        scenario = scenarios.get(name)
        if session.scenario != "healthy":
            await back_to_healthy(session)
        switched_at = time.time()
        if name != session.scenario:
            await switch(session, name, seconds)
        session.tour_text = f"tour {i}/{len(names)}: {name} — {scenario.summary}"
        session.say("")
        session.say(f"== {i}/{len(names)} {name}: {scenario.summary}")
        session.say_wrapped(injected_text(scenario))
        expected = EXPECTED_PRIMARY.get(name)
        session.say_wrapped(f"the diagnosis should name: {expected or 'nothing (healthy)'}")
        verdicts: list[dict[str, Any]] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            d = await session.tick()
            if (
                d
                and float(d.get("timestamp") or 0) > switched_at
                and (not verdicts or d.get("timestamp") != verdicts[-1].get("timestamp"))
            ):
                verdicts.append(d)
        result = conclude(name, verdicts)
        session.results.append(result)
        session.say(conclusion_line(result.verdict))
        held = f"in {result.share[0]} of the last {result.share[1]} verdicts" if result.share[1] else "no verdict"
        session.say_wrapped(f"expected {expected or 'healthy'}: {'matched' if result.matched else 'NOT matched'} ({held})")
        advice = ((result.verdict or {}).get("primary") or {}).get("advice")
        if advice:
            session.say_wrapped(f"advice: {advice}")
    session.finish(summary_lines(session.results))


async def back_to_healthy(session: Session) -> None:
    """Healthy again (the scenario's load drains by itself) until the diagnosis reports nothing for a few cycles."""
    left = session.scenario
    await switch(session, "healthy")
    session.tour_text = f"tour: back to healthy after {left}"
    began = time.monotonic()
    quiet, last = 0, None
    while quiet < QUIET_CYCLES and time.monotonic() - began < QUIET_MAX_SECONDS:
        d = await session.tick()
        if d and d.get("timestamp") != last:
            last = d.get("timestamp")
            quiet = quiet + 1 if not d.get("bottlenecks") and d.get("state") != "degraded" else 0
    took = time.monotonic() - began
    session.say(
        f"-- back to healthy after {left}: "
        + (f"quiet after {took:.0f} s" if quiet >= QUIET_CYCLES else f"not yet quiet after {took:.0f} s; going on")
    )
