"""Alerting rules, each with the series that must fire it and the series that must not.

Why fixtures live beside each rule: the promtool unit test file is rendered from
them, so no alert can exist without a case proving it fires on the series that
should trigger it and a case proving it stays quiet on healthy (and nearly
triggering) series. Annotations use only ``{{ $labels.NAME }}`` so the expected
text in the test file can be rendered here exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from alerts.causes import CAUSES, Cause
from alerts.recording import ENGINE, INSTANCE_CAUSE, SERVER_MODEL, slo_error_ratio_record, slo_metrics, with_engine
from alerts.settings import Settings, duration_seconds

#: Labels every fixture series carries, as a scrape of the exporter would add them.
INSTANCE = "10.0.0.7:9750"


@dataclass(frozen=True)
class Case:
    """Input series (name{labels}, promtool values) and the expression labels of each expected alert."""

    series: tuple[tuple[str, str], ...]
    expect: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    labels: dict[str, str]
    summary: str
    description: str
    fire: Case
    quiet: Case
    #: promtool evaluation time for both cases, and the input sample interval
    eval_time: str = "10m"
    interval: str = "1m"
    extra: dict[str, str] = field(default_factory=dict)
    #: runbook_url template; empty: the alert's own section (Settings.runbook_url)
    runbook: str = ""


#: The one page per incident (alerts/README.md): the diagnosis's primary cause.
PAGE = "LLMServiceDegraded"
#: A second exporter for fixtures that need two.
OTHER_INSTANCE = "10.0.0.8:9750"
#: Two engines on one exporter (issue 20: one verdict per engine). The verdict families carry
#: the engine's name as ``engine``, the same string as the ``server`` label of its own series.
ENGINE_A, ENGINE_B = "s1", "s2"


def _labels(job: str, instance: str = INSTANCE, **extra: str) -> str:
    pairs = {"job": job, "instance": instance, **extra}
    return "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def _minutes_after(for_: str, extra_minutes: int) -> str:
    return f"{int(duration_seconds(for_) // 60) + extra_minutes}m"


def _samples(for_: str, extra_minutes: int = 6) -> int:
    return int(duration_seconds(for_) // 60) + extra_minutes + 2


def runbook_url(s: Settings, a: Alert) -> str:
    """The alert's runbook_url annotation (a template for the page, whose cause picks the section)."""
    return a.runbook or s.runbook_url(a.name)


def _service_degraded_alert(s: Settings) -> Alert:
    """The one page per incident: users are affected and the diagnosis names the primary cause.

    Why on ``llm_bottleneck_primary`` and not on ``llm_bottleneck_active``: active is 1 for
    every reported cause (contributing, symptom, warning, candidate too), primary for exactly
    one, and only while the service is degraded; the page carries that cause in its labels and
    links to its runbook section, and Alertmanager mutes the per-cause tickets under it.
    """
    job, for_ = s.exporter_job, s.for_["service_degraded"]
    n = _samples(for_)
    kv = next(c for c in CAUSES if c.cause == "kv_cache_pressure")
    queue = next(c for c in CAUSES if c.cause == "queue_backlog")

    throttle = next(c for c in CAUSES if c.cause == "power_or_thermal_throttling")

    def primary(c: Any, values: str, instance: str = INSTANCE, engine: str = ENGINE_A) -> tuple[str, str]:
        return ("llm_bottleneck_primary" + _labels(job, instance, **{ENGINE: engine}, layer=c.layer, cause=c.cause), values)

    def active(c: Any, values: str, instance: str = INSTANCE, engine: str = ENGINE_A) -> tuple[str, str]:
        return ("llm_bottleneck_active" + _labels(job, instance, **{ENGINE: engine}, layer=c.layer, cause=c.cause), values)

    # the exporter publishes every cause id per engine, 0 for all but that engine's primary
    every_cause_but_kv = tuple(primary(c, f"0x{n}") for c in CAUSES if c is not kv)
    # engine B on the same exporter is healthy: no primary, although a warning cause holds there
    healthy_b = tuple(primary(c, f"0x{n}", engine=ENGINE_B) for c in CAUSES) + (active(throttle, f"1x{n}", engine=ENGINE_B),)
    blip = " ".join(["0", "0", "1"] + ["0"] * (n - 3))
    flip = " ".join("1" if i % 2 else "0" for i in range(n))
    flop = " ".join("0" if i % 2 else "1" for i in range(n))
    return Alert(
        name=PAGE,
        expr=f"max by ({INSTANCE_CAUSE}) (llm_bottleneck_primary) == 1",
        for_=for_,
        labels={"severity": s.severity_page, "kind": "incident"},
        summary=(
            "LLM service degraded: {{ $labels.layer }}/{{ $labels.cause }} is the primary cause "
            "({{ $labels.engine }} on {{ $labels.instance }})"
        ),
        description=(
            "Users of engine {{ $labels.engine }} behind exporter {{ $labels.instance }} are affected (TTFT or ITL over the "
            "SLO, queueing, saturated throughput or failures) and the diagnosis names {{ $labels.layer }}/{{ $labels.cause }} "
            "as the cause that best explains it. This is the one page for the incident: the per-cause alerts and the "
            "latency burn alerts of this engine are muted while it fires (another engine on the same exporter pages on its "
            "own). Open the runbook section of the cause (runbook_url), the chain from symptom to cause at "
            "http://{{ $labels.instance }}/diagnosis?engine={{ $labels.engine }}, and 'LLM / Overview'."
        ),
        fire=Case(
            (primary(kv, f"1x{n}"),)
            + every_cause_but_kv
            # active for the primary and for a contributing cause, which must not page
            + (active(kv, f"1x{n}"), active(queue, f"1x{n}"))
            # the second engine of the same exporter: healthy, so no page for it
            + healthy_b
            # another exporter, another primary: one page each, each with its own runbook section
            + (
                primary(queue, f"1x{n}", OTHER_INSTANCE),
                primary(kv, f"0x{n}", OTHER_INSTANCE),
                active(queue, f"1x{n}", OTHER_INSTANCE),
            ),
            (
                {"job": job, "instance": INSTANCE, ENGINE: ENGINE_A, "layer": kv.layer, "cause": kv.cause},
                {"job": job, "instance": OTHER_INSTANCE, ENGINE: ENGINE_A, "layer": queue.layer, "cause": queue.cause},
            ),
        ),
        quiet=Case(
            # no primary (healthy, or a warning cause holds on its own): every cause id at 0,
            # although llm_bottleneck_active reports kv_cache_pressure
            (primary(kv, f"0x{n}"),)
            + every_cause_but_kv
            + (active(kv, f"1x{n}"),)
            # a primary for one cycle only, shorter than for:
            + (primary(queue, blip, OTHER_INSTANCE), primary(kv, f"0x{n}", OTHER_INSTANCE))
            # a primary that changes every minute: each cause's for: restarts (the burn alerts,
            # not muted then, page instead)
            + (primary(kv, flip, "10.0.0.9:9750"), primary(queue, flop, "10.0.0.9:9750"))
        ),
        eval_time=_minutes_after(for_, 4),
        runbook=f"{s.runbook_url_base}#{{{{ $labels.cause }}}}",
    )


def _cause_alerts(s: Settings) -> list[Alert]:
    out = []
    for c in CAUSES:
        if c.pages:
            out.append(_outage_alert(s, c))
            continue
        n = _samples(s.for_["bottleneck_cause"])
        me, neighbour, me_on_b = _active_series(s, c)
        blip = " ".join(["0", "0", "1"] + ["0"] * (n - 3))
        out.append(
            Alert(
                name=c.alert,
                expr=_active_expr(c),
                for_=s.for_["bottleneck_cause"],
                # a ticket: the page for the incident is LLMServiceDegraded, on the primary cause
                labels={"severity": s.severity_ticket, "layer": c.layer, "kind": "diagnosis"},
                summary=f"{c.summary} ({{{{ $labels.engine }}}} on {{{{ $labels.instance }}}})",
                description=(
                    f"{c.what} The diagnosis of engine {{{{ $labels.engine }}}} on exporter {{{{ $labels.instance }}}} reports "
                    f"{c.layer}/{c.cause} as active. Confirm on '{c.dashboard}' and the 'LLM / Overview' cause timeline. A "
                    f"ticket: while this engine's {PAGE} page fires, Alertmanager mutes it."
                ),
                # the cause holds for engine A only: one ticket, for A
                fire=Case(
                    ((me, f"1x{n}"), (neighbour, f"0x{n}"), (me_on_b, f"0x{n}")),
                    ({"job": s.exporter_job, "instance": INSTANCE, ENGINE: ENGINE_A, "layer": c.layer, "cause": c.cause},),
                ),
                # healthy: 0 throughout; a one-sample blip shorter than for:; another cause active
                quiet=Case(((me, blip), (neighbour, f"1x{n}"), (me_on_b, f"0x{n}"))),
                eval_time=_minutes_after(s.for_["bottleneck_cause"], 4),
            )
        )
    return out


def _active_expr(c: Cause) -> str:
    """A cause's ticket (or outage page): per engine, as the diagnosis judges each engine on its own."""
    return f'max by ({INSTANCE_CAUSE}) (llm_bottleneck_active{{layer="{c.layer}", cause="{c.cause}"}}) == 1'


def _active_series(s: Settings, c: Cause) -> tuple[str, str, str]:
    """``llm_bottleneck_active`` of ``c`` and of another cause on engine A, and of ``c`` on engine B (same exporter)."""
    other = next(o for o in CAUSES if o.cause != c.cause)

    def sel(cause: Cause, engine: str) -> str:
        return "llm_bottleneck_active" + _labels(s.exporter_job, **{ENGINE: engine}, layer=cause.layer, cause=cause.cause)

    return sel(c, ENGINE_A), sel(other, ENGINE_A), sel(c, ENGINE_B)


#: what an outage cause's alert carries in ``kind``: a page of its own, not muted by the per-exporter page
OUTAGE_KIND = "outage"


def _outage_alert(s: Settings, c: Cause) -> Alert:
    """A cause that is an outage, not a slowdown (``Cause.pages``: engine_unresponsive): its own page.

    Why not a ticket under LLMServiceDegraded: a hung engine may leave nothing the diagnosis can
    call a symptom (its histograms stop moving), so there may be no primary to page on; and when
    there is, the page names this cause, and Alertmanager mutes that page under this one
    (alerts/alertmanager_config.py), so the incident still pages once.
    """
    for_ = s.for_["engine_unresponsive"]
    n = _samples(for_)
    me, neighbour, me_on_b = _active_series(s, c)
    blip = " ".join(["0", "0", "1"] + ["0"] * (n - 3))
    return Alert(
        name=c.alert,
        expr=_active_expr(c),
        for_=for_,
        labels={"severity": s.severity_page, "layer": c.layer, "kind": OUTAGE_KIND},
        summary=f"{c.summary} ({{{{ $labels.engine }}}} on {{{{ $labels.instance }}}})",
        description=(
            f"{c.what} The diagnosis of engine {{{{ $labels.engine }}}} on exporter {{{{ $labels.instance }}}} reports "
            f"{c.layer}/{c.cause}. "
            f"A page of its own: {PAGE} does not mute it (it mutes {PAGE} when that names this cause). Collect a "
            "py-spy dump of the engine core, nvidia-smi and the engine's last log lines before restarting it; "
            f"confirm on '{c.dashboard}' (canary probe panels) and 'LLM / Overview'."
        ),
        fire=Case(
            ((me, f"1x{n}"), (neighbour, f"0x{n}"), (me_on_b, f"0x{n}")),
            ({"job": s.exporter_job, "instance": INSTANCE, ENGINE: ENGINE_A, "layer": c.layer, "cause": c.cause},),
        ),
        # healthy: 0 throughout; a one-sample blip shorter than for:; another cause active
        quiet=Case(((me, blip), (neighbour, f"1x{n}"), (me_on_b, f"0x{n}"))),
        eval_time=_minutes_after(for_, 4),
    )


def _burn_alerts(s: Settings) -> list[Alert]:
    out = []
    budget = s.error_budget
    for short_name, (hist, threshold) in slo_metrics(s).items():
        le = repr(float(threshold))
        for b in s.burn_rates:
            limit = round(b.factor * budget, 10)
            long_rec, short_rec = slo_error_ratio_record(hist, b.long), slo_error_ratio_record(hist, b.short)
            # 100 observations a minute; "bad" minutes put only half of them under the SLO.
            # "recovered" is bad until two short windows before the evaluation, then good.
            eval_min = int(duration_seconds(b.long) // 60) + 10
            bad_then_good_split = eval_min - 2 * int(duration_seconds(b.short) // 60)
            n = eval_min + 5

            def series(
                server: str, bucket_values: str, hist: str = hist, le: str = le, n: int = n
            ) -> tuple[tuple[str, str], ...]:
                lab = {"server": server, "model": "m", "engine": "vllm", "rank": "0"}
                return (
                    (f"{hist}_bucket" + _labels(s.exporter_job, le=le, **lab), bucket_values),
                    (f"{hist}_count" + _labels(s.exporter_job, **lab), f"0+100x{n}"),
                )

            good_after = bad_then_good_split * 50
            out.append(
                Alert(
                    name=f"LLM{short_name}BudgetBurn{b.name.capitalize()}",
                    expr=with_engine(f"{long_rec} > {limit}\nand on ({SERVER_MODEL})\n{short_rec} > {limit}"),
                    for_=b.for_,
                    labels={"severity": b.severity, "layer": "application", "kind": "symptom"},
                    summary=f"{short_name} error budget burning {b.factor:g}x too fast ({{{{ $labels.server }}}} {{{{ $labels.model }}}})",
                    description=(
                        f"More than {limit:.1%} of {short_name} observations of {{{{ $labels.server }}}} / {{{{ $labels.model }}}} "
                        f"were slower than {threshold:g}s over both the last {b.long} and {b.short} "
                        f"(objective {s.slo_objective:.2%}). Confirm on 'LLM / Application & SLO', then check the "
                        "bottleneck verdict on 'LLM / Overview'."
                    ),
                    fire=Case(
                        series("burning", f"0+50x{n}"),
                        ({"job": s.exporter_job, "instance": INSTANCE, "server": "burning", "model": "m", ENGINE: "burning"},),
                    ),
                    quiet=Case(
                        series("healthy", f"0+99.9x{n}")
                        # bad for a while, then recovered: the long window still burns, the short one does not
                        + series("recovered", f"0+50x{bad_then_good_split} {good_after + 100}+100x{n - bad_then_good_split - 1}")
                    ),
                    eval_time=f"{eval_min}m",
                )
            )
    return out


def _symptom_alerts(s: Settings) -> list[Alert]:
    job, w = s.exporter_job, s.rate_window
    eng = {"server": "s1", "model": "m", "engine": "vllm", "rank": "0"}
    out: list[Alert] = []

    n = _samples(s.for_["kv_near_full"], 8)
    usage, preempt = "llm_kv_cache_usage_ratio", "llm_kv_cache_preemptions_total"
    full = round(min(1.0, s.kv_near_full_ratio + (1 - s.kv_near_full_ratio) / 2), 4)
    half = round(s.kv_near_full_ratio / 2, 4)
    out.append(
        Alert(
            name="LLMKVCacheNearFull",
            expr=with_engine(
                f"server_model:llm_kv_cache_usage:max > {s.kv_near_full_ratio:g}\nand on ({SERVER_MODEL})\n"
                f"server_model:llm_kv_cache_preemptions:rate{w} > {s.kv_preemptions_per_second:g}"
            ),
            for_=s.for_["kv_near_full"],
            labels={"severity": s.severity_ticket, "layer": "memory", "kind": "symptom"},
            summary="KV cache nearly full and preempting ({{ $labels.server }} {{ $labels.model }})",
            description=(
                f"KV-cache usage of {{{{ $labels.server }}}} / {{{{ $labels.model }}}} is above {s.kv_near_full_ratio:.0%} "
                "while requests are being preempted and recomputed. Confirm on 'LLM / Memory / KV cache' "
                "(usage and preemptions/s panels)."
            ),
            fire=Case(
                ((usage + _labels(job, **eng), f"{full}x{n}"), (preempt + _labels(job, **eng), f"0+30x{n}")),
                ({"job": job, "instance": INSTANCE, "server": "s1", "model": "m", ENGINE: "s1"},),
            ),
            quiet=Case(
                (
                    # full but not preempting (engines fill the cache on purpose)
                    (usage + _labels(job, **eng), f"{full}x{n}"),
                    (preempt + _labels(job, **eng), f"7x{n}"),
                    # preempting at half usage: a different cause, not this symptom
                    (usage + _labels(job, **{**eng, "server": "s2"}), f"{half}x{n}"),
                    (preempt + _labels(job, **{**eng, "server": "s2"}), f"0+30x{n}"),
                )
            ),
            eval_time=_minutes_after(s.for_["kv_near_full"], 7),
        )
    )

    n = _samples(s.for_["source_down"])
    src = "llm_exporter_source_up" + _labels(job, source="engine:s1")
    out.append(
        Alert(
            name="LLMExporterSourceDown",
            expr="llm_exporter_source_up == 0",
            for_=s.for_["source_down"],
            labels={"severity": s.severity_ticket, "layer": "exporter", "kind": "symptom"},
            summary="Exporter source {{ $labels.source }} is down ({{ $labels.instance }})",
            description=(
                "The last samples of source {{ $labels.source }} on exporter {{ $labels.instance }} failed, so its "
                "layer's panels and diagnosis go stale. Check llm_exporter_source_errors_total by reason and the exporter log."
            ),
            fire=Case(((src, f"0x{n}"),), ({"job": job, "instance": INSTANCE, "source": "engine:s1"},)),
            quiet=Case(((src, " ".join(["1", "1", "0"] + ["1"] * (n - 3))),)),
            eval_time=_minutes_after(s.for_["source_down"], 4),
        )
    )

    n = _samples(s.for_["gpu_lost"])
    gpu = "llm_gpu_up" + _labels(job, gpu="0", uuid="GPU-0000")
    out.append(
        Alert(
            name="LLMGPULost",
            expr="llm_gpu_up == 0",
            for_=s.for_["gpu_lost"],
            labels={"severity": s.severity_page, "layer": "hardware", "kind": "symptom"},
            summary="GPU {{ $labels.gpu }} stopped answering ({{ $labels.instance }})",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} no longer answers the driver: "
                "an Xid error, a fallen-off-the-bus GPU or a driver reset. Confirm on 'LLM / Hardware' (GPU up) and in dmesg."
            ),
            fire=Case(((gpu, f"0x{n}"),), ({"job": job, "instance": INSTANCE, "gpu": "0", "uuid": "GPU-0000"},)),
            quiet=Case(((gpu, f"1x{n}"),)),
            eval_time=_minutes_after(s.for_["gpu_lost"], 4),
        )
    )

    n = _samples(s.for_["source_errors"], 10)
    per_minute = round(s.source_errors_per_second * 60 * 10, 6) or 6
    err = "llm_exporter_source_errors_total" + _labels(job, source="gpu", reason="timeout")
    out.append(
        Alert(
            name="LLMExporterSourceErrors",
            expr=f"sum by (job, instance, source, reason) (rate(llm_exporter_source_errors_total[{w}])) > {s.source_errors_per_second:g}",
            for_=s.for_["source_errors"],
            labels={"severity": s.severity_ticket, "layer": "exporter", "kind": "symptom"},
            summary="Source {{ $labels.source }} keeps failing with {{ $labels.reason }} ({{ $labels.instance }})",
            description=(
                "Samples of source {{ $labels.source }} on {{ $labels.instance }} fail with reason {{ $labels.reason }} "
                "again and again; its values are missing or stale. Check the exporter log and the source's endpoint or driver."
            ),
            fire=Case(
                ((err, f"0+{per_minute:g}x{n}"),), ({"job": job, "instance": INSTANCE, "source": "gpu", "reason": "timeout"},)
            ),
            # healthy: no errors; one stray error does not make a sustained rate
            quiet=Case(((err, " ".join(["0", "0", "1"] + ["1"] * (n - 3))),)),
            eval_time=_minutes_after(s.for_["source_errors"], 8),
        )
    )

    n = _samples(s.for_["exporter_down"])
    up = "up" + _labels(job)
    other = "up" + _labels("some-other-job")
    out.append(
        Alert(
            name="LLMExporterDown",
            expr=f'up{{job="{job}"}} == 0',
            for_=s.for_["exporter_down"],
            labels={"severity": s.severity_page, "layer": "exporter", "kind": "symptom"},
            summary="Prometheus cannot scrape the LLM exporter ({{ $labels.instance }})",
            description=(
                "Scrapes of {{ $labels.instance }} fail, so every LLM dashboard and alert for it is blind. "
                "Check that the exporter process runs and listens, and its /healthz."
            ),
            fire=Case(((up, f"0x{n}"),), ({"job": job, "instance": INSTANCE},)),
            quiet=Case(((up, f"1x{n}"), (other, f"0x{n}"))),
            eval_time=_minutes_after(s.for_["exporter_down"], 4),
        )
    )
    return out


def _source_stale_alert(s: Settings) -> Alert:
    """A source's last success is too old, whatever the reason (a hang, a wedged loop, a clock).

    Why beside LLMExporterSourceDown: ``up == 0`` needs the exporter to notice a
    failure; the age of the last success needs nothing but the exporter answering.
    """
    job, limit = s.exporter_job, s.source_stale_seconds
    # promtool starts at Unix time 0 with one sample a minute, so a value equal to t is "just succeeded"
    n = int(duration_seconds(s.for_["source_stale"]) // 60 + limit // 60) + 8
    eval_min = n - 2
    ts = "llm_exporter_source_last_success_timestamp_seconds"
    stuck_since = eval_min - int(limit // 60) - 1  # over the limit only at the evaluation: shorter than for:
    return Alert(
        name="LLMExporterSourceStale",
        expr=f"time() - {ts} > {limit:g}",
        for_=s.for_["source_stale"],
        labels={"severity": s.severity_ticket, "layer": "exporter", "kind": "symptom"},
        summary="Source {{ $labels.source }} has not sampled successfully for a while ({{ $labels.instance }})",
        description=(
            f"The last successful sample of source {{{{ $labels.source }}}} on exporter {{{{ $labels.instance }}}} is more than "
            f"{limit:g}s old: its values are gone from /metrics and its layer reads unknown. Check llm_exporter_source_up, "
            "llm_exporter_source_errors_total by reason, the exporter log, and the node's clock."
        ),
        fire=Case(
            ((ts + _labels(job, source="engine:s1"), f"0x{n}"),),
            ({"job": job, "instance": INSTANCE, "source": "engine:s1"},),
        ),
        quiet=Case(
            (
                (ts + _labels(job, source="gpu"), f"0+60x{n}"),  # healthy: succeeds every minute
                # succeeded until recently, then stuck: over the limit at the evaluation, but not for as long as for:
                (ts + _labels(job, source="engine:s2"), f"0+60x{stuck_since} {stuck_since * 60}x{n - stuck_since}"),
            )
        ),
        eval_time=f"{eval_min}m",
    )


def alerts(s: Settings) -> list[Alert]:
    """Every alert: the page, one ticket per diagnosis cause, the symptom alerts, then the capacity tickets."""
    from alerts import capacity  # alerts/capacity.py builds on this module's Alert and Case

    return (
        [_service_degraded_alert(s)]
        + _cause_alerts(s)
        + _burn_alerts(s)
        + _symptom_alerts(s)
        + [_source_stale_alert(s)]
        + capacity.alerts(s)
    )


def groups(s: Settings) -> list[dict[str, Any]]:
    """The alerting-rule groups, in file order (causes first, then symptoms)."""

    def rule(a: Alert) -> dict[str, Any]:
        return {
            "alert": a.name,
            "expr": a.expr,
            "for": a.for_,
            "labels": dict(a.labels),
            "annotations": {"summary": a.summary, "description": a.description, "runbook_url": runbook_url(s, a)},
        }

    all_alerts = alerts(s)
    return [
        {
            "name": "llm-layer-exporter.bottleneck",
            "rules": [rule(a) for a in all_alerts if a.labels["kind"] in ("incident", "diagnosis", OUTAGE_KIND)],
        },
        {"name": "llm-layer-exporter.symptoms", "rules": [rule(a) for a in all_alerts if a.labels["kind"] == "symptom"]},
        # issue 22: the measured capacity at SLO (alerts/capacity.py)
        {"name": "llm-layer-exporter.capacity", "rules": [rule(a) for a in all_alerts if a.labels["kind"] == "capacity"]},
    ]


_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def render(template: str, labels: dict[str, str]) -> str:
    """Expand ``{{ $labels.NAME }}`` as Prometheus would; anything else is refused."""

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        if not inner.startswith("$labels.") or inner[8:] not in labels:
            raise ValueError(f"template {{{{ {inner} }}}} cannot be rendered for the unit test (labels: {sorted(labels)})")
        return labels[inner[8:]]

    return _TEMPLATE.sub(one, template)
