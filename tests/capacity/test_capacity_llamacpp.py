"""The issue's proof on a real llama.cpp server (the cached build and tiny model).

A short real ``tune`` in launch mode (llama.cpp with 4 slots, three steps of 3 s, one
repeat) measures the baseline and writes tune.json with the engine's fingerprint and
workload; the same command is started again and a ``serve`` is given that tune.json as its
capacity profile (the issue's proof: "a profile from a real tune run"). Then: the gauges are published;
a closed loop at about 90 % of the measured concurrency raises the used ratio above 0.7
and ``capacity_nearly_used`` into /diagnosis; llama.cpp restarted with another slot count
(``-np 2``) turns ``llm_capacity_profile_stale`` to 1 within two scrapes of the engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from exporter.capacity.profile import load_profile
from exporter.exposition import read_metrics
from tests.integration.integration_helpers import LLAMACPP_SETUP_TIMEOUT_S, Proc, run_setup, skip_if_off
from tests.support.loadloop import ClosedLoop
from tests.support.ports import free_port
from tests.support.processes import exporter_argv
from tests.support.waiting import wait_until
from tests.tune.tune_cli import run_tune

pytestmark = [pytest.mark.timeout(300)]

FIRST_WORD_PIECE = 259  # the tiny model's first word piece (tests/integration/test_llamacpp.py)


def _llama_argv(paths: dict[str, str], port: int, slots: int) -> list[str]:
    argv = [paths["LLAMA_SERVER"], "-m", paths["LLAMA_MODEL"], "--host", "127.0.0.1", "--port", str(port)]
    return argv + ["--metrics", "--no-webui", "-np", str(slots), "-c", str(256 * slots), "-t", "1", "--threads-http", "16"]


def _llama(paths: dict[str, str], port: int, slots: int, name: str) -> Proc:
    proc = Proc(_llama_argv(paths, port, slots), name=name)
    proc.start()
    proc.wait_http(f"http://127.0.0.1:{port}/health", 120)
    return proc


def _serve(llama_port: int, *extra: str) -> tuple[Proc, str]:
    port = free_port()
    argv = exporter_argv(
        "serve", "--listen-address", f"127.0.0.1:{port}", "--gpu-source", "none",
        "--engine", f"http://127.0.0.1:{llama_port}/metrics", "--engine-interval", "1", *extra,
    )  # fmt: skip
    proc = Proc(argv, name="serve")
    proc.start()
    url = f"http://127.0.0.1:{port}"
    proc.wait_http(url + "/readyz", 60)
    return proc, url


def _scalars(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return read_metrics(httpx.get(url + "/metrics", timeout=5).text).scalars()


def _gauge(url: str, name: str) -> float | None:
    series = _scalars(url).get(name) or []
    return series[0][1] if series else None


def test_real_llamacpp_profile_used_ratio_warning_and_stale_after_restart(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    skip_if_off("llamacpp")
    paths = run_setup("setup_llamacpp.sh", LLAMACPP_SETUP_TIMEOUT_S)
    port = free_port()
    # 1. a short real tune, its own exporter reading the engine: the profile (tune stops the engine it left)
    tune_dir = tmp_path / "tune"
    workload = ["--concurrency", "1,4,10", "--step-seconds", "3", "--prompt-tokens", "16", "--output-tokens", "48"]
    workload += ["--sample-interval", "0.5", "--start-timeout", "120"]
    doc, err, rc = run_tune(
        tune_dir, ["--slo-ttft", "5s", "--repeats", "1", "--trials", "1", *workload], _llama_argv(paths, port, 4), 300
    )
    assert rc == 0 and doc, err[-3000:]
    assert doc["recommendation"] is None, doc["stop"]  # a roomy server meets its SLO: no change
    measured = doc["baseline"]  # the profile is the baseline
    assert measured["fingerprint"]["engine"] == "llamacpp" and measured["fingerprint"]["settings"]["slots"] == 4.0, measured
    assert measured["workload"]["output_tokens_mean"] > 0
    profile_path = tune_dir / "tune.json"
    profile = load_profile(profile_path)
    llama = _llama(paths, port, 4, "llama-np4")  # the configuration tune measured, started again
    procs = [llama]
    try:
        # 2. serve with the profile
        exp, url = _serve(port, "--capacity-profile", str(profile_path))
        procs.append(exp)
        wait_until(lambda: _gauge(url, "llm_capacity_concurrency_at_slo") == profile.concurrency, 30, "profile gauges")
        assert _gauge(url, "llm_capacity_recommended_max_concurrency") == max(1, int(profile.concurrency * 0.8))
        wait_until(lambda: _gauge(url, "llm_capacity_profile_stale") == 0.0, 30, "stale 0: the configuration measured")
        # 3. a closed loop at about 90 % of the measured concurrency
        clients = max(1, round(0.9 * profile.concurrency))

        def send(client: httpx.Client, n: int) -> int:
            body = {"prompt": [FIRST_WORD_PIECE + n % 50] * 16, "n_predict": 200, "ignore_eos": True, "temperature": 0}
            return client.post(f"http://127.0.0.1:{port}/completion", json=body).status_code

        with ClosedLoop(send, clients, deadline_s=60):
            used = wait_until(lambda: (u := _gauge(url, "llm_capacity_used_ratio") or 0.0) > 0.7 and u, 30, "used > 0.7")

            def warned() -> dict[str, Any] | None:
                body: dict[str, Any] = httpx.get(url + "/diagnosis", timeout=5).json()
                return body if any(c["cause"] == "capacity_nearly_used" for c in body["bottlenecks"]) else None

            body = wait_until(warned, 30, "capacity_nearly_used in /diagnosis")
        assert used > 0.7 and body["capacity"]["concurrency_at_slo"] == profile.concurrency
        record_property("profile", f"{profile.concurrency} concurrent, {profile.requests_per_second:.2f} req/s at SLO")
        record_property("clients", clients)
        record_property("used_ratio", used)
        # 4. another slot count: stale within two scrapes of the restarted engine
        source = f"engine:127.0.0.1:{port}"

        def last_success() -> float | None:
            rows = _scalars(url).get("llm_exporter_source_last_success_timestamp_seconds") or []
            return next((v for labels, v in rows if labels.get("source") == source), None)

        llama.stop()
        before = last_success()
        llama = _llama(paths, port, 2, "llama-np2")
        procs.append(llama)
        seen: set[float] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            scalars = _scalars(url)
            stamp = next(
                (
                    v
                    for lb, v in scalars.get("llm_exporter_source_last_success_timestamp_seconds", [])
                    if lb.get("source") == source
                ),
                None,
            )
            if stamp is not None and stamp != before:
                seen.add(stamp)
            stale = scalars.get("llm_capacity_profile_stale") or []
            if stale and stale[0][1] == 1.0:
                break
            time.sleep(0.1)
        else:
            pytest.fail("llm_capacity_profile_stale did not turn 1 within 30 s of the restart")
        assert 1 <= len(seen) <= 2, f"stale after {len(seen)} scrapes of the restarted engine"
        record_property("scrapes_to_stale", len(seen))
    finally:
        for p in reversed(procs):
            p.stop()
