"""Real Prometheus and Alertmanager on 127.0.0.1 for tests, plus a webhook receiver.

Why real binaries: the point of the monitoring tests is that the shipped files
load and behave in the programs that will run them (Debian bookworm's
Prometheus 2.42 and Alertmanager 0.25), not in a model of them. Every process
started here is a ``tests.support.processes.Child`` stopped by the context
manager that started it; every wait is bounded, and a timeout names what it
waited for and shows the log (``Child.start_answering``).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tests.support.processes import ROOT, Child

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the project supports 3.10
    from typing_extensions import Self

#: seconds Prometheus or Alertmanager may take to answer /-/ready
READY_TIMEOUT_S = 30.0
#: the generated Grafana dashboards (dashboards/generate.py), one ``<uid>.json`` each
DASHBOARDS = ROOT / "dashboards" / "json"

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def http_json(url: str, data: object | None = None, timeout: float = 5.0) -> Any:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"} if body else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        text = resp.read()
    return json.loads(text) if text else None


def reads_capacity(expr: str) -> bool:
    """Whether a panel query reads the measured capacity at SLO (issue 22: ``llm_capacity_*`` or a record of it).

    Why the integration tests ask: their exporters run without ``--capacity-profile``, so those
    queries have no data there; tests/monitoring/test_capacity_prometheus.py serves the gauges
    and requires data for exactly these queries.
    """
    from alerts.promql import metric_names

    return any("llm_capacity_" in name for name in metric_names(expr))


def grafana_to_promql(expr: str) -> str:
    """A panel query as Grafana sends it with every variable on "All" (macros at their usual values)."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "5m")
    expr = re.sub(r"\$\{?(instance|engine|server|model|gpu)\}?", ".*", expr)
    assert not re.search(r"\$\{?[A-Za-z_]", expr), expr  # "$1" of label_replace is PromQL, not a variable
    return expr


def dashboard_uids() -> list[str]:
    return sorted(path.stem for path in DASHBOARDS.glob("*.json"))


def panel_queries(uids: Iterable[str], *, capacity: bool, variables: bool = False) -> list[tuple[str, str]]:
    """(where, PromQL) of the boards' panel targets that read the measured capacity (``capacity``) or do not.

    Why split by capacity: only tests/monitoring/test_capacity_prometheus.py serves the
    ``llm_capacity_*`` gauges; the others run exporters without a capacity profile.
    ``variables``: each query variable's ``label_values`` expression too.
    """
    out: list[tuple[str, str]] = []
    for uid in uids:
        board = json.loads((DASHBOARDS / f"{uid}.json").read_text())
        for panel in board["panels"]:
            for t in panel.get("targets", []):
                if reads_capacity(t["expr"]) == capacity:
                    out.append((f"{uid} / {panel['title']} / {t['refId']}", grafana_to_promql(t["expr"])))
        if variables:
            for v in board["templating"]["list"]:
                m = re.match(r"label_values\((.*),\s*\w+\)$", v.get("definition", ""))
                if m:
                    out.append((f"{uid} / variable {v['name']}", grafana_to_promql(m.group(1))))
    return out


class Webhook:
    """Collects Alertmanager webhook payloads posted to http://127.0.0.1:PORT/alerts."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.payloads.append(payload)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert received so far (with the receiver name added)."""
        with self._lock:
            return [{**a, "receiver": p.get("receiver")} for p in self.payloads for a in p.get("alerts", [])]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


def alertmanager_config(shipped: Path, webhook_url: str) -> str:
    """The shipped Alertmanager config with every webhook URL pointed at the test receiver."""
    doc = yaml.safe_load(shipped.read_text())
    for receiver in doc.get("receivers", []):
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook_url
    return yaml.safe_dump(doc, sort_keys=False)


class Alertmanager:
    def __init__(self, workdir: Path, config_text: str, port: int) -> None:
        assert ALERTMANAGER, "prometheus-alertmanager is not installed"
        self.dir = workdir / "alertmanager"
        (self.dir / "data").mkdir(parents=True)
        (self.dir / "alertmanager.yml").write_text(config_text)
        self.url = f"http://127.0.0.1:{port}"
        self.argv = [
            ALERTMANAGER,
            f"--config.file={self.dir / 'alertmanager.yml'}",
            f"--storage.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ]
        self.process: Child | None = None

    def __enter__(self) -> Self:
        self.process = Child(self.argv, "alertmanager", cwd=None, log_dir=self.dir)
        self.process.start_answering(self.url + "/-/ready", READY_TIMEOUT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process:
            self.process.stop()

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = http_json(self.url + "/api/v2/alerts")
        return alerts

    def post(self, alerts: list[dict[str, Any]]) -> None:
        http_json(self.url + "/api/v2/alerts", alerts)


class Prometheus:
    def __init__(
        self, workdir: Path, port: int, targets: list[str], rule_files: list[Path], alertmanager: str | None, job: str
    ) -> None:
        assert PROMETHEUS, "prometheus is not installed"
        self.dir = workdir / "prometheus"
        (self.dir / "data").mkdir(parents=True)
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
        }
        if alertmanager:
            host = alertmanager.split("//", 1)[1]
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.url = f"http://127.0.0.1:{port}"
        self.argv = [
            PROMETHEUS,
            f"--config.file={self.dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--rules.alert.resend-delay=2s",
        ]
        self.process: Child | None = None

    def __enter__(self) -> Self:
        self.process = Child(self.argv, "prometheus", cwd=None, log_dir=self.dir)
        self.process.start_answering(self.url + "/-/ready", READY_TIMEOUT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process:
            self.process.stop()

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; raises with Prometheus' error text on a bad expression."""
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            doc = http_json(url)
        except urllib.error.HTTPError as err:
            raise AssertionError(f"query failed: {expr}\n{err.read().decode(errors='replace')}") from None
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def rule_groups(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = http_json(self.url + "/api/v1/rules")["data"]["groups"]
        return groups

    def targets_up(self) -> int:
        return len([t for t in http_json(self.url + "/api/v1/targets")["data"]["activeTargets"] if t["health"] == "up"])
