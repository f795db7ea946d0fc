"""The canary request against a real local streaming server: every result, and one deadline for all of it.

Proven here, each on 127.0.0.1 with a server that misbehaves on purpose (tests/probe/probe_http.py):
* ``ok`` measures the client-seen TTFT (it includes a delay before the first token),
  the gaps between chunks, and the tokens from the stream's usage (from the chunks
  when the server reports none), and the request is marked (``user``, header, agent);
* ``timeout`` ends at the timeout whatever the server does — slow headers, a stream
  that stalls after its first token, or one that trickles keep-alive bytes forever
  (per-read timeouts would never fire on it);
* ``http_error`` (404, 500), ``bad_stream`` (invalid JSON, an error event, a JSON body,
  no [DONE], no token, a connection closed without an answer) and ``refused``;
* the engine's own timing of the request (llama.cpp ``timings.prompt_ms``) is kept;
* the Authorization header is sent and appears in no detail.
"""

from __future__ import annotations

import time

import pytest

from exporter.probe.client import Deadline
from exporter.probe.stream import PROBE_HEADER, PROBE_USER, Outcome, first_model, request_body, run_probe
from tests.probe.probe_http import Behaviour, ProbeHTTPServer
from tests.support.ports import free_port

TIMEOUT = 1.0
#: how far past the timeout a probe may end (thread wake-up on a busy 2-core machine)
SLACK = 0.5


def probe(server: ProbeHTTPServer, api: str = "completions", timeout: float = TIMEOUT, auth: str | None = None) -> Outcome:
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    return run_probe(server.url + path, request_body(api, "tiny-model", "Say OK.", 8), auth, Deadline(timeout))


def test_ok_measures_ttft_gaps_and_tokens_and_marks_the_request() -> None:
    with ProbeHTTPServer(Behaviour(tokens=5, gap=0.03, first_delay=0.2)) as server:
        o = probe(server)
        req = server.completions()[-1]
    assert o.result == "ok", o.detail
    assert o.ttft is not None
    # causal bounds only (the server cannot send before its own waits are over), none on this host's speed
    assert o.ttft >= 0.2
    assert len(o.gaps) == 4 and all(g >= 0 for g in o.gaps)
    assert o.ttft + sum(o.gaps) >= 0.2 + 4 * 0.03 - 1e-3  # the last chunk left the server after every gap
    assert (o.chunks, o.completion_tokens, o.prompt_tokens) == (5, 5, 5)
    assert o.duration >= o.ttft + sum(o.gaps) - 1e-6
    body, headers = req["body"], {k.lower(): v for k, v in req["headers"].items()}
    assert body["user"] == PROBE_USER and body["stream"] is True and body["max_tokens"] == 8
    assert body["prompt"] == "Say OK." and body["stream_options"] == {"include_usage": True}
    assert headers[PROBE_HEADER.lower()] == "1" and headers["user-agent"].startswith("llm-layer-exporter-probe/")
    assert "authorization" not in headers


def test_chat_api_reads_deltas_and_chunks_count_when_no_usage() -> None:
    with ProbeHTTPServer(Behaviour(tokens=3, usage=False)) as server:
        o = probe(server, api="chat")
        req = server.completions()[-1]
    assert o.result == "ok", o.detail
    assert req["path"] == "/v1/chat/completions" and req["body"]["messages"] == [{"role": "user", "content": "Say OK."}]
    assert o.completion_tokens is None and o.generated_tokens == 3 and o.prompt_tokens is None


def test_engine_reported_prefill_time_is_kept() -> None:
    with ProbeHTTPServer(Behaviour(prompt_ms=12.5)) as server:
        o = probe(server)
    assert o.result == "ok" and o.engine_prompt_seconds == pytest.approx(0.0125)


@pytest.mark.parametrize(
    "behaviour, has_token",
    [
        (Behaviour(header_delay=5.0), False),  # no status line in time
        (Behaviour(mode="stall"), True),  # the first token, then nothing
        (Behaviour(mode="trickle"), False),  # a keep-alive comment every 0.2 s, never a token
        (Behaviour(first_delay=5.0), False),  # headers, then silence
    ],
)
def test_timeout_ends_the_probe_at_its_deadline_whatever_the_server_does(behaviour: Behaviour, has_token: bool) -> None:
    with ProbeHTTPServer(behaviour) as server:
        t0 = time.monotonic()
        o = probe(server)
        took = time.monotonic() - t0
    assert o.result == "timeout", o.detail
    assert TIMEOUT - 0.05 <= took < TIMEOUT + SLACK, took
    assert (o.ttft is not None) == has_token
    assert o.duration == pytest.approx(took, abs=0.1)


@pytest.mark.parametrize("status", [404, 500, 401])
def test_a_non_2xx_status_is_http_error(status: int) -> None:
    with ProbeHTTPServer(Behaviour(status=status)) as server:
        o = probe(server, auth="Bearer s3cret-token-value")
        sent = server.completions()[-1]["headers"]
    assert (o.result, o.status) == ("http_error", status)
    assert f"HTTP {status}" in o.detail
    assert {k.lower(): v for k, v in sent.items()}["authorization"] == "Bearer s3cret-token-value"
    assert "s3cret" not in o.detail


@pytest.mark.parametrize("mode", ["bad_json", "error_event", "json_body", "no_done", "no_token", "close"])
def test_a_broken_stream_is_bad_stream(mode: str) -> None:
    with ProbeHTTPServer(Behaviour(mode=mode)) as server:
        o = probe(server)
    assert o.result == "bad_stream", (mode, o.detail)
    assert o.detail


def test_nothing_listening_is_refused_at_once() -> None:
    port = free_port()  # bound and released: nothing listens there now
    t0 = time.monotonic()
    o = run_probe(f"http://127.0.0.1:{port}/v1/completions", b"{}", None, Deadline(TIMEOUT))
    assert o.result == "refused" and "connection refused" in o.detail
    assert time.monotonic() - t0 < TIMEOUT


def test_first_model_reads_v1_models_and_a_missing_route_is_http_error() -> None:
    with ProbeHTTPServer(Behaviour(model="served-name")) as server:
        assert first_model(server.url, None, Deadline(TIMEOUT)) == "served-name"
        server.behaviour.models_status = 404
        with pytest.raises(Exception) as err:
            first_model(server.url, None, Deadline(TIMEOUT))
    assert getattr(err.value, "result", None) == "http_error"
