"""The capacity gauges through a real serve over the simulator: exposition text, /diagnosis, staleness.

A real ``serve`` watches a real simulator (tests/support/stack.py) with ``--capacity-profile``.
The profile starts as a tune.json from before fingerprints (no stale series: unknown); the
fingerprint is then read the way ``ramp`` and ``tune`` read it (``ExporterProbe.check`` on the
exporter's /metrics) and written into the file, which serve re-reads while it runs. A closed
loop at 9 clients offers a rate this host sets; the profile is then rewritten to say the engine
carries only 0.8 of that rate within its SLO, with the workload's lengths as served, and the used
ratio must read the offered rate over the profile's (past the warning line, whatever the host's
speed); the simulator restarted with another KV block size flips ``llm_capacity_profile_stale`` to 1.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from exporter.exposition import read_metrics
from exporter.ramp.probe import ExporterProbe
from tests.capacity.profiles import tune_doc, write
from tests.support.loadloop import ClosedLoop
from tests.support.processes import ROOT, exporter_argv
from tests.support.stack import START_TIMEOUT_S, ProcessStack
from tests.support.waiting import wait_until

#: the profile: knee at 10 concurrent; its requests/s is rewritten from the offered rate the loop reaches
CAP = {"concurrency": 10, "requests_per_second": 500.0, "tokens_per_second": 5000.0}
#: the share of the offered rate the rewritten profile says the engine carries within its SLO
CARRIED = 0.8


def _gauges(url: str) -> dict[str, float]:
    """Every llm_capacity_* sample of the exporter's exposition, by name (and dimension)."""
    text = httpx.get(url + "/metrics", timeout=5).text
    out: dict[str, float] = {}
    for name, series in read_metrics(text).scalars().items():
        for labels, value in series:
            if name.startswith("llm_capacity_"):
                out[name + (f"{{{labels['dimension']}}}" if "dimension" in labels else "")] = value
    return out


def _diagnosis(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(url + "/diagnosis", timeout=5).json()
    return body


def _send(sim_url: str) -> Any:
    def send(client: httpx.Client, n: int) -> int:
        body = {"model": "sim-llama-8b", "prompt": f"request {n} " + "word " * 200, "max_tokens": 48}
        return client.post(sim_url + "/v1/completions", json=body).status_code

    return send


def test_capacity_gauges_used_ratio_warning_and_stale_through_serve(tmp_path: Path) -> None:
    doc = tune_doc(CAP)
    del doc["baseline"]["argv"]  # from before fingerprints: staleness unknown
    profile = write(tmp_path / "tune.json", doc)
    stack = ProcessStack("healthy", sim_args=["--max-num-seqs", "32"], exp_args=["--capacity-profile", str(profile)])
    with stack:

        def gauges() -> dict[str, float] | None:
            g = _gauges(stack.exp_url)
            return g if g.get("llm_capacity_concurrency_at_slo") else None

        first = wait_until(gauges, 30, "gauges")
        assert first["llm_capacity_recommended_max_concurrency"] == 8
        assert first["llm_capacity_requests_per_second_at_slo"] == 500.0
        assert first["llm_capacity_profile_age_seconds"] > 0
        assert "llm_capacity_profile_stale" not in first  # unknown, not 0
        # the fingerprint the way ramp records it, written into the profile serve is watching
        probe = ExporterProbe(stack.exp_url)
        try:
            probe.check()
        finally:
            probe.close()
        assert probe.fingerprint is not None and probe.fingerprint["settings"]["block_size"] == 16.0
        doc["baseline"]["fingerprint"] = probe.fingerprint
        doc["baseline"]["workload"] = {"prompt_tokens_mean": 200.0, "output_tokens_mean": 48.0}
        (tmp_path / "next.json").write_text(json.dumps(doc))
        (tmp_path / "next.json").replace(profile)
        wait_until(lambda: _gauges(stack.exp_url).get("llm_capacity_profile_stale") == 0.0, 30, "stale 0 after re-read")

        with ClosedLoop(_send(stack.sim_url), clients=9, deadline_s=120):

            def measured() -> dict[str, float] | None:
                g = _gauges(stack.exp_url)
                rate = g.get("llm_capacity_offered_requests_per_second", 0.0) > 0
                return g if rate and "llm_capacity_workload_drift_ratio{output_tokens}" in g else None

            live = wait_until(measured, 45, "an offered rate and the workload's lengths")
            offered = live["llm_capacity_offered_requests_per_second"]
            doc["baseline"]["capacity"] = {**CAP, "requests_per_second": CARRIED * offered}
            doc["baseline"]["workload"] = {
                "prompt_tokens_mean": 200.0 * live["llm_capacity_workload_drift_ratio{prompt_tokens}"],
                "output_tokens_mean": 48.0 * live["llm_capacity_workload_drift_ratio{output_tokens}"],
            }
            (tmp_path / "next.json").write_text(json.dumps(doc))
            (tmp_path / "next.json").replace(profile)

            def past_the_line() -> dict[str, float] | None:
                g = _gauges(stack.exp_url)
                re_read = g.get("llm_capacity_requests_per_second_at_slo") == CARRIED * offered
                return g if re_read and g.get("llm_capacity_used_ratio", 0.0) >= 0.9 else None

            g = wait_until(past_the_line, 45, "used ratio at or past 0.9 after the re-read")
            # one scrape: the ratio is the offered rate over the profile's, not the requests in flight
            assert g["llm_capacity_used_ratio"] == pytest.approx(
                g["llm_capacity_offered_requests_per_second"] / g["llm_capacity_requests_per_second_at_slo"], rel=1e-6
            )

            def warned() -> dict[str, Any] | None:
                body = _diagnosis(stack.exp_url)
                causes = {c["cause"]: c for c in body["bottlenecks"]}
                return body if "capacity_nearly_used" in causes else None

            body = wait_until(warned, 45, "capacity_nearly_used in /diagnosis")
            cause = next(c for c in body["bottlenecks"] if c["cause"] == "capacity_nearly_used")
            assert cause["layer"] == "application" and cause["role"] in ("warning", "primary", "contributing")
            if body["state"] == "healthy":
                assert body["primary"] is None and cause["role"] == "warning"
            assert body["capacity"]["concurrency_at_slo"] == 10 and "of measured capacity at SLO" in body["capacity"]["text"]
            assert body["capacity"]["stale"] is False  # the workload as the profile now states it

        # another KV block size: the engine serves another configuration than the one measured
        sim = stack.procs[0]
        sim.stop(grace_s=10.0)
        restarted = stack.spawn(
            "simulator-2",
            ["simulate", "--scenario", "healthy", "--listen-address", f"127.0.0.1:{stack.sim_port}", "--block-size", "32"],
        )
        restarted.wait_http(stack.sim_url + "/health", START_TIMEOUT_S)
        wait_until(lambda: _gauges(stack.exp_url).get("llm_capacity_profile_stale") == 1.0, 30, "stale 1 after the restart")

        # the diagnosis reads the gauge a cycle later; a stale profile judges nothing
        def stale() -> dict[str, Any] | None:
            b = _diagnosis(stack.exp_url)
            return b if b["capacity"]["stale"] is True else None

        body = wait_until(stale, 30, "verdict: stale")
        assert "profile stale" in body["capacity"]["text"]


def test_a_bad_profile_at_start_up_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "tune.json"
    bad.write_text("{not json")
    argv = exporter_argv(
        "serve", "--gpu-source", "none", "--engine", "http://127.0.0.1:9/metrics", "--capacity-profile", str(bad)
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"llm-layer-exporter serve: error: --capacity-profile: capacity profile {bad}: not JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
    ]
