"""Scale figures of the fleet (issue 15): one node's series, and what the fleet rules cost Prometheus.

    python3 -m bench.fleet_scale                        # both parts: 1,000 replicas, ~7 minutes
    python3 -m bench.fleet_scale --only node            # (a) only: one node's series, ~30 s
    python3 -m bench.fleet_scale --replicas 200 --warmup 60 --measure 60   # a quick look
    python3 -m bench.fleet_scale --json bench/results/fleet_scale.json

(a) Series one node publishes: ``serve`` on the benchmarks' busy node (8 GPUs replayed
from the recorded H200 trace, two engines serving the 55 KB vLLM exposition, the
diagnosis, ``--parallel-group``), its ``/metrics`` counted by family. GPU-to-pod
attribution needs NVML processes and the kubelet, which this machine lacks, so its two
families are counted from their schema specs (exporter/schema.py) with the stated
multiplicity: ``llm_gpu_pod_info`` one per GPU and container it is allocated to, and
``llm_gpu_process_memory_used_bytes`` one per GPU and container with a process on it;
a node whose every GPU serves one container adds 2 series per GPU.

(b) Fleet rule cost: a generated exposition of N replicas (default 1,000: ten models of
100 replicas; 250 four-node parallel groups), each replica one exporter with one engine
and 8 GPUs, built from node (a)'s own series of every family the fleet rules read
(directly, or through the recording rules they read), with counters and histograms
growing at per-replica rates and verdicts spread over causes. One target serves it all
with its own ``job``/``instance`` labels (``honor_labels``), scraped every 15 s by
Debian's ``/usr/bin/prometheus`` with the shipped ``recording_rules.yml`` and
``fleet_rules.yml`` at the compose stack's 15 s evaluation interval. After the warm-up
(the 5 m windows full) the figure is ``prometheus_rule_group_last_duration_seconds`` of
every group, read after each evaluation: median and maximum, with the series each
group writes (``prometheus_rule_group_last_evaluation_samples``) and Prometheus' RSS.
Only the families the rules read are generated: rule cost follows the series a
selector matches, not the size of the TSDB around them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
import yaml

from alerts import fleet
from alerts.promql import metric_names
from alerts.recording import VERDICT_FAMILIES
from alerts.recording import groups as recording_groups
from alerts.settings import load
from bench.harness import busy_node, engine_flags, exporter
from exporter import schema
from tests.support.ports import free_port
from tests.support.processes import ROOT

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
GPUS = 8
JOB = "llm-layer-exporter"
EVAL_INTERVAL_S = 15
MODELS = 10
NODES_PER_GROUP = 4
#: GPU-to-pod attribution families and their series per GPU on a node whose GPUs each serve one container
ATTRIBUTION_PER_GPU = {"llm_gpu_pod_info": 1, "llm_gpu_process_memory_used_bytes": 1}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"')


def _family(sample: str) -> str:
    """The schema family of a sample name (histogram parts and the counter suffix folded in)."""
    if sample in schema.SPECS:
        return sample
    for suffix in ("_bucket", "_sum", "_count", "_created"):
        if sample.endswith(suffix) and sample[: -len(suffix)] in schema.SPECS:
            return sample[: -len(suffix)]
    return sample


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of every sample line of a text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


# --------------------------------------------------------------------------- (a) one node


def node_exposition(warmup_s: float = 12.0) -> str:
    """/metrics of ``serve`` on the busy node (8 replayed GPUs, two engines), diagnosis and group on."""
    with busy_node(GPUS) as (gpu_source, engines):
        args = ["--gpu-source", gpu_source, *engine_flags(engines), "--engine-interval", "1", "--parallel-group", "pp0"]
        with exporter(args, ready_sources=3) as (_, base):
            time.sleep(warmup_s)  # a few diagnosis cycles: every derived family present
            return requests.get(base + "/metrics", timeout=10).text


def count_node(text: str) -> dict[str, Any]:
    samples = parse(text)
    by_family = Counter(_family(name) for name, _, _ in samples)
    by_layer: Counter[str] = Counter()
    for fam, n in by_family.items():
        by_layer[schema.SPECS[fam].layer if fam in schema.SPECS else "other"] += n
    servers = sorted({labels["server"] for _, labels, _ in samples if "server" in labels})
    per_engine = {s: sum(1 for _, labels, _ in samples if labels.get("server") == s) for s in servers}
    measured_attribution = {f: by_family.get(f, 0) for f in ATTRIBUTION_PER_GPU}
    attribution = {f: measured_attribution[f] or n * GPUS for f, n in ATTRIBUTION_PER_GPU.items()}
    added = sum(attribution.values()) - sum(measured_attribution.values())
    return {
        "series_measured": len(samples),
        "series_with_attribution": len(samples) + added,
        "attribution_series": attribution,
        "attribution_counted_from_schema": added > 0,
        "by_layer": dict(by_layer.most_common()),
        "per_engine": per_engine,
        "gpu_series": sum(
            n for fam, n in by_family.items() if fam in schema.SPECS and set(schema.GPU_LABELS) & set(schema.SPECS[fam].labels)
        ),
        "top_families": dict(by_family.most_common(12)),
        "exposition_kib": len(text.encode()) / 1024,
    }


# --------------------------------------------------------------------------- (b) the fleet


def fleet_inputs() -> set[str]:
    """Sample names the fleet rules read, directly or through the recording rules they read."""
    s = load()
    records = {str(r["record"]): str(r["expr"]) for g in recording_groups(s) for r in g["rules"] if "record" in r}
    todo = [str(r["expr"]) for g in fleet.groups(s) for r in g["rules"]]
    seen: set[str] = set()
    out: set[str] = set()
    while todo:
        for name in metric_names(todo.pop()):
            if name in records and name not in seen:
                seen.add(name)
                todo.append(records[name])
            elif ":" not in name:
                out.add(name)
    return out


@dataclass
class _Series:
    prefix: str  # 'name{labels' without the closing brace: instance labels follow
    value: float
    kind: str  # "gauge" | "counter" | "bucket"
    share: float = 1.0  # buckets: the share of the histogram's count at or below this le


CAUSES_SPREAD = (
    ("none", "none", 0.8),
    ("memory", "kv_cache_pressure", 0.1),
    ("scheduler", "queue_backlog", 0.05),
    ("hardware", "compute_bound", 0.05),
)


def replica_template(text: str, inputs: set[str]) -> list[_Series]:
    """One replica's series of the input families: node (a)'s first engine, its GPUs, its verdict."""
    samples = [(n, lab, v) for n, lab, v in parse(text) if n in inputs]
    servers = sorted({lab["server"] for _, lab, _ in samples if "server" in lab})
    # the verdict is one per engine (issue 20): its ``engine`` label is the engine's name (its ``server``)
    keep = [
        (n, lab, v)
        for n, lab, v in samples
        if lab.get("server", servers[0]) == servers[0]
        and (n not in VERDICT_FAMILIES or lab.get("engine", servers[0]) == servers[0])
    ]
    counts = {
        tuple(sorted((k, v) for k, v in lab.items() if k != "le")) + (n[: -len("_bucket")],): v
        for n, lab, v in keep
        if n.endswith("_bucket") and lab.get("le") == "+Inf"
    }
    out = []
    for name, labels, value in keep:
        if name in ("llm_bottleneck_primary", "llm_bottleneck_confidence", "llm_service_state", "llm_parallel_node_group_info"):
            continue  # set per replica by FleetExposition
        labels = {k: v for k, v in labels.items() if k not in ("job", "instance")}
        if "model" in labels:
            labels["model"] = "{model}"
        body = ",".join(f'{k}="{v}"' for k, v in labels.items())
        prefix = f"{name}{{{body}" + ("," if body else "")
        if name.endswith("_bucket"):
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le")) + (name[: -len("_bucket")],)
            total = counts.get(key) or 0.0
            out.append(_Series(prefix, value, "bucket", value / total if total else 1.0))
        elif name.endswith("_total") or name.endswith("_count") or name.endswith("_sum"):
            out.append(_Series(prefix, value, "counter"))
        else:
            out.append(_Series(prefix, value, "gauge"))
    return out


class FleetExposition:
    """The text of N replicas' input series at a given time, each replica its own ``instance``."""

    def __init__(self, template: list[_Series], replicas: int, seed: int = 15) -> None:
        rng = random.Random(seed)
        self.t0 = time.time()
        self.replicas: list[tuple[str, str, str, float, tuple[str, str]]] = []
        weights = [w for _, _, w in CAUSES_SPREAD]
        for i in range(replicas):
            inst = f"10.{i // 250}.{i % 250}.1:9750"
            model = f"model-{i % MODELS}"
            group = f"pp{i // NODES_PER_GROUP}"
            cause = rng.choices(CAUSES_SPREAD, weights)[0]
            self.replicas.append((inst, model, group, rng.uniform(0.5, 2.0), (cause[0], cause[1])))
        self.template = template
        # the replica's engine name: its verdict series carry it as ``engine`` (the fleet rules join on it)
        info = next(s.prefix for s in template if s.prefix.startswith("llm_engine_info{"))
        found = re.search(r'server="([^"]*)"', info)
        self.engine = found.group(1) if found else ""
        self.series_per_replica = len(template) + 1 + 3 + 2  # + group info, three states, primary and confidence

    def render(self) -> bytes:
        dt = time.time() - self.t0
        parts: list[str] = []
        for inst, model, group, speed, (layer, cause) in self.replicas:
            tail = f'job="{JOB}",instance="{inst}"}} '
            verdict_tail = f'engine="{self.engine}",{tail}'
            for s in self.template:
                prefix = s.prefix.replace("{model}", model) if "{model}" in s.prefix else s.prefix
                if s.kind == "gauge":
                    v = s.value
                elif s.kind == "counter":
                    v = s.value + speed * 10.0 * dt
                else:  # cumulative buckets grow with the histogram's count, le by le
                    v = s.value + s.share * speed * 10.0 * dt
                parts.append(f"{prefix}{tail}{v:.6g}\n")
            parts.append(f'llm_parallel_node_group_info{{group="{group}",{tail}1\n')
            degraded = 0 if cause == "none" else 1
            for state, v in (("degraded", degraded), ("healthy", 1 - degraded), ("unknown", 0)):
                parts.append(f'llm_service_state{{state="{state}",{verdict_tail}{v}\n')
            if cause != "none":
                parts.append(f'llm_bottleneck_primary{{layer="{layer}",cause="{cause}",{verdict_tail}1\n')
                parts.append(f'llm_bottleneck_confidence{{layer="{layer}",cause="{cause}",{verdict_tail}0.8\n')
        return "".join(parts).encode()


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def do_GET(self) -> None:
        body = self.server.fleet.render()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


class _Server:
    """The generated exposition on 127.0.0.1 in a thread; stopped on leaving the ``with``."""

    def __init__(self, fleet_exposition: FleetExposition) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.fleet = fleet_exposition  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return str(r.read().decode())


def _get(url: str) -> Any:
    return json.loads(_text(url))


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=30) as r:
        result: list[dict[str, Any]] = json.loads(r.read())["data"]["result"]
        return result


@dataclass
class _Prometheus:
    """Debian's Prometheus on 127.0.0.1 with our rules; output to a file, stopped on leaving the ``with``."""

    workdir: Path
    target: str

    def __enter__(self) -> _Prometheus:
        rules = self.workdir / "rules"
        rules.mkdir()
        for name in ("recording_rules.yml", "fleet_rules.yml"):
            shutil.copy(ROOT / "alerts" / name, rules / name)
        config = {
            "global": {
                "scrape_interval": f"{EVAL_INTERVAL_S}s",
                "evaluation_interval": f"{EVAL_INTERVAL_S}s",
                "scrape_timeout": "14s",
            },
            "rule_files": [str(rules / "recording_rules.yml"), str(rules / "fleet_rules.yml")],
            "scrape_configs": [
                {"job_name": "fleet-exposition", "honor_labels": True, "static_configs": [{"targets": [self.target]}]}
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(self.workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"prometheus did not start: {(self.workdir / 'prometheus.log').read_text()[-2000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def measure_rules(template: list[_Series], replicas: int, warmup_s: float, measure_s: float) -> dict[str, Any]:
    """Rule group durations on a Prometheus scraping ``replicas`` generated replicas."""
    expo = FleetExposition(template, replicas)
    with (
        tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp,
        _Server(expo) as server,
        _Prometheus(Path(tmp), server.address) as prom,
    ):
        t_render = time.perf_counter()
        series = len(expo.render().splitlines())
        render_s = time.perf_counter() - t_render
        print(
            f"  {replicas} replicas, {series} input series ({expo.series_per_replica} per replica); "
            f"one exposition renders in {render_s:.2f} s; warming up {warmup_s:.0f} s so the 5m windows fill"
        )
        time.sleep(warmup_s)
        durations: dict[str, list[float]] = {}
        per_rule: dict[str, list[float]] = {}
        seen: dict[str, str] = {}
        end = time.monotonic() + measure_s
        while time.monotonic() < end:
            for g in _get(prom.url + "/api/v1/rules")["data"]["groups"]:
                if seen.get(g["name"]) != g["lastEvaluation"]:  # one reading per evaluation
                    seen[g["name"]] = g["lastEvaluation"]
                    durations.setdefault(g["name"], []).append(float(g["evaluationTime"]))
                    if ".fleet" in g["name"]:
                        for r in g["rules"]:
                            per_rule.setdefault(
                                r["name"]
                                + (
                                    f" {r['labels'].get('signal') or r['labels'].get('capacity') or ''}"
                                    if r.get("labels")
                                    else ""
                                ),
                                [],
                            ).append(float(r["evaluationTime"]))
            time.sleep(EVAL_INTERVAL_S / 3)
        own = {(n, lab.get("rule_group", "").split(";")[-1]): v for n, lab, v in parse(_text(prom.url + "/metrics"))}
        samples = {g: v for (n, g), v in own.items() if n == "prometheus_rule_group_last_evaluation_samples"}
        up = _query(prom.url, 'up{job="fleet-exposition"}')
        scrape = _query(prom.url, 'scrape_duration_seconds{job="fleet-exposition"}')
        rss = own.get(("process_resident_memory_bytes", ""))
        failures = sum(v for (n, _), v in own.items() if n == "prometheus_rule_evaluation_failures_total")
        groups = {
            g: {
                "evaluations": len(v),
                "median_ms": statistics.median(v) * 1000,
                "max_ms": max(v) * 1000,
                "output_series": samples.get(g, 0.0),
            }
            for g, v in sorted(durations.items())
        }
        fleet_groups = {g: v for g, v in groups.items() if ".fleet" in g}
        return {
            "replicas": replicas,
            "input_series": series,
            "input_series_per_replica": expo.series_per_replica,
            "evaluation_interval_s": EVAL_INTERVAL_S,
            "groups": groups,
            "fleet_median_ms": sum(v["median_ms"] for v in fleet_groups.values()),
            "fleet_max_ms": sum(v["max_ms"] for v in fleet_groups.values()),
            "fleet_output_series": sum(v["output_series"] for v in fleet_groups.values()),
            "slowest_fleet_rules_ms": dict(
                sorted(((k.strip(), statistics.median(v) * 1000) for k, v in per_rule.items()), key=lambda kv: -kv[1])[:6]
            ),
            "loadavg": os.getloadavg(),
            "rule_evaluation_failures": failures,
            "scrape_up": bool(up) and up[0]["value"][1] == "1",
            "scrape_duration_s": float(scrape[0]["value"][1]) if scrape else None,
            "prometheus_rss_mib": rss / 2**20 if rss else None,
            "prometheus_version": _version(),
        }


def _version() -> str:
    out = subprocess.run([PROMETHEUS, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else "?"


def _print_node(node: dict[str, Any]) -> None:
    how = "counted from the schema, 1 per GPU each" if node["attribution_counted_from_schema"] else "measured"
    print(f"(a) one node, {GPUS} GPUs, 2 engines, diagnosis, --parallel-group, attribution on:")
    print(
        f"    {node['series_with_attribution']} series ({node['series_measured']} measured + "
        f"{node['series_with_attribution'] - node['series_measured']} attribution, {how}); /metrics {node['exposition_kib']:.0f} KiB"
    )
    print(f"    per engine: {', '.join(f'{v}' for v in node['per_engine'].values())}; GPU series: {node['gpu_series']}")
    print(f"    by layer: {', '.join(f'{k} {v}' for k, v in node['by_layer'].items())}")


def _print_fleet(res: dict[str, Any]) -> None:
    print(
        f"(b) fleet rules on {res['prometheus_version']}, {res['replicas']} replicas, {res['input_series']} input series, "
        f"evaluation every {res['evaluation_interval_s']} s:"
    )
    for g, v in res["groups"].items():
        print(
            f"    {g:45} median {v['median_ms']:8.1f} ms  max {v['max_ms']:8.1f} ms  writes {v['output_series']:7.0f} series  ({v['evaluations']} evaluations)"
        )
    print(
        f"    fleet groups together: median {res['fleet_median_ms']:.1f} ms, max {res['fleet_max_ms']:.1f} ms per evaluation, "
        f"{res['fleet_output_series']:.0f} series written; evaluation failures {res['rule_evaluation_failures']}; "
        f"scrape {res['scrape_duration_s']} s; Prometheus RSS {res['prometheus_rss_mib']:.0f} MiB"
    )
    print("    slowest fleet rules (median): " + ", ".join(f"{k} {v:.1f} ms" for k, v in res["slowest_fleet_rules_ms"].items()))
    load = res["loadavg"]
    print(
        f"    load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs (other work shares them)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("node", "fleet"), help="run one part")
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--warmup", type=float, default=330.0, help="seconds before measuring (the 5m rate windows fill)")
    ap.add_argument("--measure", type=float, default=90.0, help="seconds of evaluations to measure")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    text = node_exposition()
    if args.only != "fleet":
        results["node"] = count_node(text)
        _print_node(results["node"])
    if args.only != "node":
        inputs = fleet_inputs()
        template = replica_template(text, inputs)
        results["fleet"] = measure_rules(template, args.replicas, args.warmup, args.measure)
        _print_fleet(results["fleet"])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
