"""The simulator's HTTP surface: OpenAI-compatible answers, OpenAI-style errors, 429, /sim/*."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from exporter.simulator.settings import SimConfig
from tests.simulator.sim_helpers import KERNELS_CSV, sim_server
from tests.support.waiting import wait_until

MODEL = SimConfig().model


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with sim_server("healthy", "vllm", time_scale=20.0, max_model_len=512) as srv:
        yield srv.base_url


def assert_error(resp: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param
    if code is not None:
        assert body["error"]["code"] == code
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    "body, status, param, code",
    [
        ({"prompt": "hi"}, 400, "model", None),
        ({"model": "nope", "prompt": "hi"}, 404, "model", "model_not_found"),
        ({"model": MODEL}, 400, "prompt", None),
        ({"model": MODEL, "prompt": 42}, 400, "prompt", None),
        ({"model": MODEL, "prompt": ""}, 400, "prompt", None),
        ({"model": MODEL, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens", None),
        ({"model": MODEL, "prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens", None),
        ({"model": MODEL, "prompt": "hi", "max_tokens": 600}, 400, "max_tokens", "context_length_exceeded"),
        ({"model": MODEL, "prompt": "w " * 600}, 400, "prompt", "context_length_exceeded"),
        ({"model": MODEL, "prompt": "hi", "stream": "yes"}, 400, "stream", None),
        ({"model": MODEL, "prompt": "hi", "n": 2}, 400, "n", None),
        ({"model": MODEL, "prompt": "hi", "temperature": 9}, 400, "temperature", None),
    ],
)
def test_completion_errors_are_openai_style(url: str, body: dict[str, Any], status: int, param: str, code: str) -> None:
    assert_error(httpx.post(url + "/v1/completions", json=body), status, param, code)


def test_chat_errors_and_malformed_bodies(url: str) -> None:
    assert_error(httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": []}), 400, "messages")
    assert_error(
        httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}),
        400,
        "messages",
    )
    assert_error(
        httpx.post(url + "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}), 400
    )
    assert_error(httpx.post(url + "/v1/completions", json=[1, 2]), 400)
    assert_error(httpx.post(url + "/v1/completions", content=b"x" * (4 * 1024 * 1024 + 1)), 413, code="request_too_large")
    assert_error(httpx.get(url + "/v1/nothing-here"), 404)
    assert_error(httpx.get(url + "/v1/completions"), 405)
    state = httpx.get(url + "/sim/state").json()
    assert state["requests"]["validation_errors"] >= 4


def test_plain_completion_and_chat(url: str) -> None:
    resp = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "one two three", "max_tokens": 5}, timeout=30)
    body = resp.json()
    assert resp.status_code == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length" and len(body["choices"][0]["text"].split()) == 5
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    chat = httpx.post(
        url + "/v1/chat/completions",
        timeout=30,
        json={
            "model": MODEL,
            "max_completion_tokens": 4,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi there"}]},
            ],
        },
    ).json()
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 4 and chat["usage"]["prompt_tokens"] == 7  # 3 role tags + 4 words


def _sse(resp: httpx.Response) -> list[str]:
    events = []
    for line in resp.iter_lines():
        if line:
            assert line.startswith("data: "), line
            events.append(line[len("data: ") :])
    return events


def test_streaming_sse_format(url: str) -> None:
    body = {"model": MODEL, "prompt": "a b c d", "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = _sse(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
    assert len(text.split()) == 6 and chunks[-2]["choices"][0]["finish_reason"] == "length"

    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=chat, timeout=30) as resp:
        events = _sse(resp)
    first = json.loads(events[0])
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1] == "[DONE]"


def test_models_health_and_gpu_readings(url: str) -> None:
    models = httpx.get(url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == MODEL
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    gpus = httpx.get(url + "/sim/gpu").json()["gpus"]
    columns = KERNELS_CSV.read_text().splitlines()[0].split(",")
    replay = set(columns) - {"t", "phase", "graphics_util", "hmma_util"}
    assert len(gpus) == 1 and replay <= set(gpus[0]), replay - set(gpus[0])
    g = gpus[0]
    assert g["gpu_name"] == "NVIDIA H200" and g["uuid"].startswith("GPU-")
    assert isinstance(g["throttle_reasons"], str) and g["throttle_reasons"].startswith("0x")
    for key in ("sm_util", "tensor_util", "dram_bw_util", "nvml_gpu_util"):
        assert 0 <= g[key] <= 100


def test_client_disconnect_aborts_the_request(url: str) -> None:
    before = httpx.get(url + "/sim/state").json()["requests"]["finished"].get("abort", 0)
    body = {"model": MODEL, "prompt": "x y", "max_tokens": 400, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as resp:
        next(resp.iter_lines())  # one chunk, then hang up
    wait_until(
        lambda: httpx.get(url + "/sim/state").json()["requests"]["finished"].get("abort", 0) > before,
        15,
        "the cancelled request counted as an abort",
    )
    state = httpx.get(url + "/sim/state").json()
    if state["running"]:
        wait_until(lambda: httpx.get(url + "/sim/state").json()["running"] == 0, 15, "nothing running")


def _post_quietly(base_url: str, body: dict[str, Any]) -> None:
    try:
        httpx.post(base_url + "/v1/completions", json=body, timeout=30)
    except httpx.HTTPError:
        pass  # the server shuts down under it at the end of the test


def test_queue_limit_answers_429_and_the_queue_stays_bounded() -> None:
    # a long batching window keeps everything queued, so the queue fills deterministically
    with sim_server("healthy", "vllm", time_scale=1.0, batch_wait_s=60.0, max_queue_len=3) as srv:
        body = {"model": MODEL, "prompt": "a b", "max_tokens": 2}
        holders = [threading.Thread(target=_post_quietly, args=(srv.base_url, body), daemon=True) for _ in range(3)]
        for t in holders:
            t.start()
        with httpx.Client(base_url=srv.base_url, timeout=30) as client:
            wait_until(lambda: client.get("/sim/state").json()["waiting"] == 3, 15, "three requests waiting")
            for _ in range(5):
                err = assert_error(client.post("/v1/completions", json=body), 429, code="queue_full")
            assert err["type"] == "rate_limit_exceeded"
            state = client.get("/sim/state").json()
            assert state["waiting"] == 3 and state["requests"]["rejected"] == {"queue_full": 5.0}
            assert state["waiting_by_reason"]["deferred"] == 3
            text = client.get("/metrics").text
            assert 'vllm:admission_rejections_total{model_name="sim-llama-8b",reason="max_num_queued_reqs"} 5.0' in text
    for t in holders:
        t.join(10)


def test_switching_scenario_live(url: str) -> None:
    resp = httpx.post(url + "/sim/scenario", json={"scenario": "power_throttled"})
    assert resp.status_code == 200 and resp.json()["config"]["power_limit_w"] == 400.0
    state = httpx.get(url + "/sim/state").json()
    assert state["scenario"] == "power_throttled" and state["config"]["max_model_len"] == 512  # explicit flag survives
    assert httpx.get(url + "/sim/gpu").json()["gpus"][0]["power_limit_w"] == 400.0
    assert_error(httpx.post(url + "/sim/scenario", json={"scenario": "melted"}), 400, "scenario")
    httpx.post(url + "/sim/scenario", json={"scenario": "healthy"})
    listing = httpx.get(url + "/sim/scenarios").json()
    assert listing["current"] == "healthy" and len(listing["scenarios"]) == 16
    eager = next(s for s in listing["scenarios"] if s["name"] == "eager_decode")
    assert eager["launch"] == ["--enforce-eager", "true"]  # started with it: the exporter reads the command line
    over = next(s for s in listing["scenarios"] if s["name"] == "over_reserved_context")
    assert over["dialect"] == "llamacpp" and eager["dialect"] is None  # slots as llama.cpp cuts them


def test_every_request_finishes_and_state_settles(url: str) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        start = time.monotonic()
        for i in range(5):
            assert client.post("/v1/completions", json={"model": MODEL, "prompt": f"q{i} z", "max_tokens": 3}).status_code == 200
        assert time.monotonic() - start < 60
        state = client.get("/sim/state").json()
    assert state["running"] == 0 and state["waiting"] == 0 and state["kv"]["blocks_used"] == 0
