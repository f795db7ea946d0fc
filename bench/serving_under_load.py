"""/healthz, /metrics and /diagnosis latency under 50 concurrent scrapers of the largest exposition.

    python3 -m bench.serving_under_load                    # (a) 50 scrapers, one engine at its 20k-series budget
    python3 -m bench.serving_under_load --saturate busy    # (b) the same beside two nice-19 busy loops
    python3 -m bench.serving_under_load --saturate vllm    # (b) the same beside the cached CPU vLLM under load, nice 19
    python3 -m bench.serving_under_load --profile OUT.txt  # and a sampled profile of the exporter (bench/stack_profile.py)
    python3 -m bench.serving_under_load --identity         # scrapers that do not ask for gzip

Why (issue 25): a Kubernetes liveness probe has a 1 s timeout by default, and a
readiness probe or an operator's ``diagnose`` reads the verdict exactly when the
node is busiest. The set-up is the largest exposition the exporter may serve: a
fake engine exposing about 110 vLLM ranks, cut to its 20,000-series budget
(``--engine-max-series`` default; a 2.1 MB /metrics), beside 8 replayed GPUs at
their default 1 s interval and the diagnosis at its default.

The load: ``--scrapers`` keep-alive connections each scraping /metrics back to
back (``Accept-Encoding: gzip``, as Prometheus asks; bodies are read, not
decoded) from a separate process, so the probes' own latency is not the load
generator's GIL. Beside them, from this process, a new connection every 50 ms
to /healthz and every 100 ms to /diagnosis, as a kubelet and a dashboard do.
Each request has a 5 s timeout: one that runs out is *unanswered*. Printed per
endpoint: count, p50, p99, max, unanswered.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil

from bench.harness import percentile, replay_copies
from tests.support.exposition import vllm_exposition
from tests.support.fake_engine import FakeEngine
from tests.support.loadloop import ClosedLoop
from tests.support.ports import free_port
from tests.support.processes import ROOT, Child

#: vLLM ranks in the fake engine: ~20.6k mapped series, so the 20k budget cuts it
RANKS = 110
SCRAPERS = 50
DURATION_S = 30.0
REQUEST_TIMEOUT_S = 5.0
PROBES = {"/healthz": 0.05, "/diagnosis": 0.1}
#: the command-line substring of the CPU vLLM's API server (its process tree is sampled)
VLLM_PROCESS = "vllm.entrypoints.openai.api_server"


@dataclass
class Timings:
    """Latencies of one endpoint, and the requests that got no answer within the timeout."""

    latencies: list[float] = field(default_factory=list)
    unanswered: int = 0
    errors: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        lat = self.latencies
        return {
            "count": float(len(lat)),
            "p50_ms": percentile(lat, 50) * 1e3,
            "p99_ms": percentile(lat, 99) * 1e3,
            "max_ms": max(lat, default=float("nan")) * 1e3,
            "unanswered": float(self.unanswered),
            "errors": float(len(self.errors)),
        }


def _get(conn: http.client.HTTPConnection, path: str, gzip: bool) -> tuple[int, bytes]:
    conn.request("GET", path, headers={"Accept-Encoding": "gzip"} if gzip else {})
    resp = conn.getresponse()
    return resp.status, resp.read()


def _timed(timings: Timings, conn: http.client.HTTPConnection, path: str, gzip: bool = False) -> bool:
    """One request; False when the connection must be opened again."""
    t0 = time.perf_counter()
    try:
        status, _ = _get(conn, path, gzip)
    except TimeoutError:
        timings.unanswered += 1
        return False
    except (OSError, http.client.HTTPException) as exc:
        timings.errors.append(f"{type(exc).__name__}: {exc}")
        return False
    timings.latencies.append(time.perf_counter() - t0)
    if status != 200:
        timings.errors.append(f"HTTP {status}")
    return True


# --------------------------------------------------------------------------- the scrapers' process


def scrape_load(port: int, scrapers: int, duration: float, gzip: bool = True) -> dict[str, object]:
    """``scrapers`` keep-alive /metrics loops for ``duration`` s; their pooled timings."""
    timings = [Timings() for _ in range(scrapers)]
    deadline = time.monotonic() + duration

    def loop(mine: Timings) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        while time.monotonic() < deadline:
            if not _timed(mine, conn, "/metrics", gzip=gzip):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        conn.close()

    threads = [threading.Thread(target=loop, args=(t,), daemon=True) for t in timings]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(duration + REQUEST_TIMEOUT_S + 10)
    pooled = Timings()
    for t in timings:
        pooled.latencies += t.latencies
        pooled.unanswered += t.unanswered
        pooled.errors += t.errors
    return {"latencies": pooled.latencies, "unanswered": pooled.unanswered, "errors": pooled.errors[:10]}


# --------------------------------------------------------------------------- probes from this process


def probe(port: int, path: str, every: float, deadline: float, timings: Timings) -> None:
    """A new connection per request every ``every`` s (as a kubelet probes) until ``deadline``."""
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        _timed(timings, conn, path)
        conn.close()
        time.sleep(max(0.0, every - (time.monotonic() - t0)))


# --------------------------------------------------------------------------- what saturates the cores


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[str]:
    """``n`` processes spinning at nice 19 (one per core): the cheapest CPU engine."""
    procs = [
        subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    try:
        yield f"{n} busy loops at nice 19"
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


@contextlib.contextmanager
def vllm_under_load(base: str, clients: int = 8) -> Iterator[ClosedLoop]:
    """A closed loop of ``clients`` on the CPU vLLM at ``base`` (served as ``tiny``), the cores busy once it yields."""
    import httpx

    rng = random.Random(25)

    def send(client: httpx.Client, _n: int) -> int:
        prompt = [rng.randrange(10, 500) for _ in range(rng.randrange(48, 96))]
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 160, "ignore_eos": True, "temperature": 0}
        return client.post(base + "/v1/completions", json=body).status_code

    with ClosedLoop(send, clients, deadline_s=3600.0) as load:
        time.sleep(5.0)  # the loop is running: the cores are busy
        yield load


@contextlib.contextmanager
def cpu_vllm(clients: int = 8) -> Iterator[tuple[str, ClosedLoop]]:
    """The cached CPU vLLM of the integration tests at nice 19, under a closed loop of ``clients``: (its base URL, the load)."""
    from tests.integration.integration_helpers import SMALL_KV_VLLM_ARGS, set_autogroup_nice, vllm_proc

    proc, base = vllm_proc(["--served-model-name", "tiny", *SMALL_KV_VLLM_ARGS], "bench-vllm", prefix=["nice", "-n", "19"])
    proc.start_answering(base + "/health", float(os.environ.get("LLM_EXPORTER_VLLM_START_TIMEOUT", "600")))
    set_autogroup_nice(proc.pid, 19)
    try:
        with vllm_under_load(base, clients) as load:
            yield base, load
    finally:
        proc.stop()


# --------------------------------------------------------------------------- one run


def run(
    scrapers: int = SCRAPERS,
    duration: float = DURATION_S,
    saturate: str = "none",
    profile: Path | None = None,
    gzip: bool = True,
) -> dict[str, object]:
    port = free_port()
    engine_text = vllm_exposition(RANKS)
    with contextlib.ExitStack() as stack:
        gpu_source = stack.enter_context(replay_copies(8))
        engine = stack.enter_context(FakeEngine(engine_text))
        load_note = "nothing else running"
        vllm_load: ClosedLoop | None = None
        extra: list[str] = []
        if saturate == "busy":
            load_note = stack.enter_context(busy_loops(os.cpu_count() or 2))
        elif saturate == "vllm":
            vllm_base, vllm_load = stack.enter_context(cpu_vllm())
            load_note = f"CPU vLLM at nice 19 under 8 clients, scraped and its process tree sampled ({vllm_base})"
            extra = ["--engine", vllm_base + "/metrics", "--engine-process", VLLM_PROCESS]
        # the vLLM first: --engine-process applies to the first engine
        args = ["serve", "--listen-address", f"127.0.0.1:{port}", "--gpu-source", gpu_source, *extra, "--engine", engine.url]
        prefix = (
            [sys.executable, "-m", "bench.stack_profile", str(profile), "--"] if profile else [sys.executable, "-m", "exporter"]
        )
        child = stack.enter_context(Child([*prefix, *args], "bench-serving"))
        base = f"http://127.0.0.1:{port}"
        # the 20k-series engine (over 1 MB of exposition) and the 8th GPU are in
        child.wait_http(base + "/metrics", 120, ok=lambda r: len(r.content) > 1_000_000 and b'gpu="7"' in r.content)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        body = _get(conn, "/metrics", False)[1]
        gz = _get(conn, "/metrics", True)[1]
        conn.close()
        # the scrapers, in their own process so this process's probes measure the exporter, not our GIL
        code = (
            "import json,sys; from bench.serving_under_load import scrape_load;"
            f"print(json.dumps(scrape_load({port}, {scrapers}, {duration}, {gzip})))"
        )
        loader = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        probes = {path: Timings() for path in PROBES}
        cpu_before = psutil.cpu_times()
        done_before = vllm_load.completed if vllm_load is not None else 0
        deadline = time.monotonic() + duration
        threads = [
            threading.Thread(target=probe, args=(port, path, every, deadline, probes[path]), daemon=True)
            for path, every in PROBES.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(duration + REQUEST_TIMEOUT_S + 10)
        cpu_after = psutil.cpu_times()
        done = (vllm_load.completed - done_before) if vllm_load is not None else 0
        out, _ = loader.communicate(timeout=duration + 60)
        loaded = json.loads(out)
        metrics = Timings(loaded["latencies"], loaded["unanswered"], loaded["errors"])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        sources = _source_health(_get(conn, "/metrics", False)[1].decode())
        conn.close()
        child.stop()
    endpoints = {"/healthz": probes["/healthz"], "/metrics": metrics, "/diagnosis": probes["/diagnosis"]}
    return {
        "load": load_note,
        "scrapers": scrapers,
        "encoding": "gzip" if gzip else "identity",
        "duration_s": duration,
        "metrics_bytes": len(body),
        "metrics_gzip_bytes": len(gz),
        "series": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
        "endpoints": {path: t.figures() for path, t in endpoints.items()},
        "errors": {path: t.errors[:3] for path, t in endpoints.items() if t.errors},
        "loadavg": os.getloadavg(),
        "cores_busy": _busy_share(cpu_before, cpu_after),
        "vllm_requests_done": done,
        "sources": sources,
    }


def _source_health(text: str) -> dict[str, dict[str, float]]:
    """Per source, from the exporter's own series: its last sample's seconds, up, and timeouts counted."""
    from exporter.exposition import read_metrics

    own = read_metrics(text).samples
    out: dict[str, dict[str, float]] = {}
    for key, name in (
        ("last_sample_s", "llm_exporter_source_duration_seconds"),
        ("up", "llm_exporter_source_up"),
    ):
        for labels, value in own.get(name, []):
            out.setdefault(labels["source"], {})[key] = value
    for labels, value in own.get("llm_exporter_source_errors_total", []):
        if labels.get("reason") == "timeout":
            out.setdefault(labels["source"], {})["timeouts"] = value
    return out


def _busy_share(before: Any, after: Any) -> float:
    """Share of all cores' time that was not idle between two ``psutil.cpu_times()``."""
    idle = (after.idle + after.iowait) - (before.idle + before.iowait)
    total = sum(after) - sum(before)
    return 1.0 - idle / total if total > 0 else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--scrapers", type=int, default=SCRAPERS)
    p.add_argument("--duration", type=float, default=DURATION_S)
    p.add_argument("--saturate", choices=("none", "busy", "vllm"), default="none")
    p.add_argument("--profile", type=Path, help="write a sampled profile of the exporter here")
    p.add_argument("--identity", action="store_true", help="scrapers do not ask for gzip (curl without --compressed)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = p.parse_args(argv)
    fig = run(a.scrapers, a.duration, a.saturate, a.profile, gzip=not a.identity)
    if a.json:
        print(json.dumps(fig, indent=2))
        return 0
    print(
        f"{fig['scrapers']} scrapers ({fig['encoding']}) x {fig['duration_s']:.0f} s of a {fig['series']}-series /metrics "
        f"({cast(int, fig['metrics_bytes']) / 1e6:.2f} MB, gzip {cast(int, fig['metrics_gzip_bytes']) / 1e3:.0f} kB); {fig['load']}; "
        f"load average {fig['loadavg'][0]:.1f}, cores {100 * fig['cores_busy']:.0f} % busy"  # type: ignore[index,operator]
        + (f", {fig['vllm_requests_done']} vLLM requests done" if fig["vllm_requests_done"] else "")
    )
    for path, f in fig["endpoints"].items():  # type: ignore[attr-defined]
        print(
            f"  {path:11s} n={f['count']:6.0f}  p50 {f['p50_ms']:8.1f} ms  p99 {f['p99_ms']:8.1f} ms  "
            f"max {f['max_ms']:8.1f} ms  unanswered(>{REQUEST_TIMEOUT_S:.0f}s) {f['unanswered']:.0f}  errors {f['errors']:.0f}"
        )
    for source, h in fig["sources"].items():  # type: ignore[attr-defined]
        print(
            f"  source {source}: last sample {h.get('last_sample_s', float('nan')) * 1e3:.0f} ms, "
            f"up {h.get('up', float('nan')):.0f}, timeouts {h.get('timeouts', 0.0):.0f}"
        )
    for path, errs in fig["errors"].items():  # type: ignore[attr-defined]
        print(f"  {path} errors: {errs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
