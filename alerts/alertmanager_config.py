"""Renders alerts/alertmanager.yml: routing by severity and layer, inhibitions, webhook receivers.

Why generated from config.yaml: the webhook URL and the layer -> team map live
in the same one place as the thresholds, and the inhibitions are derived from
the cause table, so a new cause cannot be left out of them.

Routing (first match wins):
  1. LLMServiceDegraded -> the pager, grouped per engine of an exporter (not per layer),
     so a primary that moves to another layer updates the incident's page instead of
     opening a second one, and a second engine on the same node pages on its own;
  2. layer="exporter" -> the observability team, whatever the severity
     (a blind exporter is their problem, not the serving team's);
  3. severity=<severity.page> -> the pager;
  4. otherwise (tickets) the team owning the layer (alertmanager.layer_receivers).

Inhibitions (target muted while a source fires for the same engine of the same exporter:
equal job, instance, engine; the verdict is one per engine, issue 20, and the symptom alerts
carry the engine's name as ``engine`` for this, alerts/recording.py with_engine):
  * LLMServiceDegraded naming an outage cause (engine_unresponsive), muted by that
    cause's own page (LLMEngineUnresponsive, which nothing mutes): one page per incident.
    Equal on job, instance only: the target names the same cause, so another engine's page
    it could mute is a hung engine too, whose own LLMEngineUnresponsive pages;
  * every per-cause ticket (kind="diagnosis"), muted by LLMServiceDegraded: one
    incident, one notification; the page names the primary, /diagnosis the rest;
  * TTFT/ITL burn-rate symptoms, muted by LLMServiceDegraded (the page names the
    cause instead of the symptom). Not by a per-cause ticket: with no primary
    (nothing explains the burn, or the primary keeps changing) the burn alert is the page;
  * LLMCapacityHeadroomLow (alerts/capacity.py), muted by LLMServiceDegraded: "plan replicas
    before the SLO breaks" is moot once the SLO broke and the page is the incident; it comes
    back as a ticket if the load stays high after the page resolves. LLMCapacityProfileStale
    is not muted: a profile to re-measure is no part of the incident; LLMCapacityNearlyUsed
    (the diagnosis's capacity_nearly_used ticket) mutes it too: the same news with evidence;
  * KV-near-full symptom, muted by the kv_cache_pressure diagnosis alert (an
    inhibited alert still inhibits, so this holds under the page too);
  * source-errors, muted while the same source is down (the down alert says it all).
"""

from __future__ import annotations

from alerts import capacity
from alerts.alerting import PAGE
from alerts.causes import CAUSES
from alerts.recording import ENGINE
from alerts.settings import Settings

PAGER = "oncall-pager"


def _webhook(name: str, url: str) -> dict[str, object]:
    return {"name": name, "webhook_configs": [{"url": url, "send_resolved": True, "max_alerts": 0}]}


def document(s: Settings) -> dict[str, object]:
    kv_pressure = next(c for c in CAUSES if c.cause == "kv_cache_pressure")
    nearly_used = next(c for c in CAUSES if c.cause == "capacity_nearly_used")
    per_engine = ["job", "instance", ENGINE]
    teams = sorted(set(s.layer_receivers.values()) | {PAGER})
    layer_routes: list[dict[str, object]] = []
    by_receiver: dict[str, list[str]] = {}
    for layer, receiver in s.layer_receivers.items():
        if layer != "exporter":
            by_receiver.setdefault(receiver, []).append(layer)
    for receiver, layers in sorted(by_receiver.items()):
        layer_routes.append({"receiver": receiver, "matchers": [f'layer=~"{"|".join(sorted(layers))}"']})
    routes: list[dict[str, object]] = [
        {
            "receiver": PAGER,
            "matchers": [f'alertname="{PAGE}"'],
            "group_by": ["alertname", "job", "instance", ENGINE],
            "repeat_interval": "1h",
        }
    ]
    if "exporter" in s.layer_receivers:
        routes.append({"receiver": s.layer_receivers["exporter"], "matchers": ['layer="exporter"']})
    routes.append({"receiver": PAGER, "matchers": [f'severity="{s.severity_page}"'], "repeat_interval": "1h"})
    routes += layer_routes
    fallback = s.layer_receivers.get("application", PAGER)
    return {
        "route": {
            "receiver": fallback,
            "group_by": ["alertname", "job", "instance", "layer"],
            "group_wait": s.group_wait,
            "group_interval": s.group_interval,
            "repeat_interval": s.repeat_interval,
            "routes": routes,
        },
        "inhibit_rules": [
            {
                "source_matchers": [f'alertname="{PAGE}"'],
                "target_matchers": ['kind="diagnosis"'],
                "equal": list(per_engine),
            },
            {
                "source_matchers": [f'alertname="{PAGE}"'],
                "target_matchers": ['alertname=~"LLM(TTFT|ITL)BudgetBurn.*"'],
                "equal": list(per_engine),
            },
            {
                "source_matchers": [f'alertname="{PAGE}"'],
                "target_matchers": [f'alertname="{capacity.HEADROOM_LOW}"'],
                "equal": list(per_engine),
            },
            # the diagnosis's capacity ticket says the same with its evidence: one ticket, as for the KV cache
            {
                "source_matchers": [f'alertname="{nearly_used.alert}"'],
                "target_matchers": [f'alertname="{capacity.HEADROOM_LOW}"'],
                "equal": list(per_engine),
            },
            {
                "source_matchers": [f'alertname="{kv_pressure.alert}"'],
                "target_matchers": ['alertname="LLMKVCacheNearFull"'],
                "equal": list(per_engine),
            },
            {
                "source_matchers": ['alertname="LLMExporterSourceDown"'],
                "target_matchers": ['alertname="LLMExporterSourceErrors"'],
                "equal": ["job", "instance", "source"],
            },
        ]
        # an outage cause pages on its own (alerts/alerting.py _outage_alert); the per-exporter page
        # naming that same cause is muted under it, so the incident pages once
        + [
            {
                "source_matchers": [f'alertname="{c.alert}"'],
                "target_matchers": [f'alertname="{PAGE}"', f'cause="{c.cause}"'],
                "equal": ["job", "instance"],
            }
            for c in CAUSES
            if c.pages
        ],
        "receivers": [_webhook(name, s.webhook_url) for name in teams],
    }
