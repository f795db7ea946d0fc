"""An engine that reports NaN, +Inf or -Inf cannot break the verdict endpoint.

Before exporter/jsonsafe.py, one NaN in a gauge made ``GET /diagnosis`` answer
HTTP 500 on every request ("Out of range float values are not JSON compliant").
Here a real engine endpoint on 127.0.0.1 serves a real exposition of each
family (the generated vLLM one, the SGLang, TGI, TensorRT-LLM and llama.cpp
captures) with non-finite values written into any of the gauges and counters
its mapping reads (hypothesis picks which, and which value); the real engine
source scrapes it into the real store, the real diagnosis judges it, and
``/diagnosis`` and ``/diagnosis?signals=1`` served by uvicorn must answer 200
with strict JSON (no ``NaN``/``Infinity`` words), the diagnosis source never
crashes on one, and a signal the engine made non-finite is named in the
verdict's notices instead of being judged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.diagnosis import DiagnosisSettings, build_diagnosis
from exporter.engines.config import EngineConfig
from exporter.engines.mappings import MAPPINGS
from exporter.engines.source import EngineSource
from exporter.engines.table import InfoLabel, Series, Source
from exporter.engines.textparse import parse
from exporter.runner import SourceRunner, runner_for
from exporter.schema import SPECS
from exporter.store import SnapshotStore
from tests.engines.engine_helpers import fixture
from tests.support.asgi import UvicornThread
from tests.support.exposition import vllm_exposition
from tests.support.fake_engine import FakeEngine

EXPOSITIONS = {
    "vllm": vllm_exposition(2, created=False),
    "sglang": fixture("sglang-0.5.23-colon-2dp.prom"),
    "tgi": fixture("tgi-3.x-failures.prom"),
    "trtllm": fixture("trtllm-serve.prom"),
    "llamacpp": fixture("llamacpp-new.prom"),
}
NON_FINITE = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}


def _series_names(src: Source) -> Iterator[str]:
    if isinstance(src, Series):
        yield src.name
    elif not isinstance(src, InfoLabel):
        for part in src.parts:
            yield from _series_names(part)


def read_names(family: str) -> list[str]:
    """Every gauge and counter sample name ``family``'s mapping reads that its exposition serves."""
    served = parse(EXPOSITIONS[family], frozenset()).names
    names: set[str] = set()
    for row in MAPPINGS[family].rows:
        if SPECS[row.neutral].type in ("gauge", "counter"):
            for src in row.sources:
                names.update(n for n in _series_names(src) if n in served)
    return sorted(names)


TARGETS = [(family, name) for family in EXPOSITIONS for name in read_names(family)]


def poisoned(family: str, values: dict[str, str]) -> str:
    """``family``'s exposition with every sample of each name in ``values`` set to that value."""
    out = []
    for line in EXPOSITIONS[family].splitlines():
        if line and not line.startswith("#"):
            head = line.rsplit(" ", 1)[0]
            name = head.split("{", 1)[0].split(" ", 1)[0]
            if name in values:
                line = f"{head} {values[name]}"
        out.append(line)
    return "\n".join(out) + "\n"


def _strict(text: str) -> Any:
    def refuse(word: str) -> Any:
        raise AssertionError(f"{word} in the /diagnosis JSON")

    return json.loads(text, parse_constant=refuse)


class Rig:
    """One engine endpoint, its source, the store, the diagnosis and /diagnosis served by uvicorn."""

    def __init__(self, engine: FakeEngine, base: str) -> None:
        self.engine = engine
        self.base = base
        self.store = SnapshotStore()
        self.bundle = build_diagnosis(DiagnosisSettings(interval=0.2, gpu_interval=0.2), [], self.store)
        self.source = EngineSource(EngineConfig(url=engine.url, name="e", interval=0.2, timeout=2.0))
        self.runners = [SourceRunner(self.source, self.store), *(runner_for(s, self.store) for s in self.bundle.sources)]

    def judge(self, *bodies: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Serve each body in turn (one body: twice, rates need two scrapes), each scraped and judged;
        then read both answers."""
        for body in bodies if len(bodies) > 1 else bodies * 2:
            self.engine.set(body=body)
            assert self.runners[0].sample_once(), self.store.states()[self.source.name].last_error
            for runner in self.runners[1:]:
                runner.sample_once()
        crashed = {name: st.errors for name, st in self.store.states().items() if st.errors.get("internal")}
        assert not crashed, crashed  # no source of the diagnosis raised on a non-finite value
        answers = []
        for query in ("", "?signals=1"):
            r = requests.get(self.base + "/diagnosis" + query, timeout=10)
            assert r.status_code == 200, r.text[:300]
            assert r.headers["content-type"].startswith("application/json")
            answers.append(_strict(r.text))
        return answers[0], answers[1]


def _rig() -> Iterator[Rig]:
    with FakeEngine(EXPOSITIONS["vllm"]) as engine:
        app = FastAPI()
        rig = Rig(engine, "")  # the router is the bundle's; the address is known once uvicorn listens
        app.include_router(rig.bundle.router)
        with UvicornThread(app) as server:
            rig.base = f"http://127.0.0.1:{server.port}"
            yield rig


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    """One rig for the property: every example judged after the ones before (a hostile history)."""
    yield from _rig()


@pytest.fixture()
def fresh_rig() -> Iterator[Rig]:
    yield from _rig()


def test_every_mapping_reads_some_gauge_or_counter_of_its_exposition() -> None:
    families = {family for family, _ in TARGETS}
    assert families == set(EXPOSITIONS), families  # the property below reaches every family


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    family=st.sampled_from(sorted(EXPOSITIONS)),
    data=st.data(),
)
def test_non_finite_engine_values_keep_diagnosis_200_and_strict_json(rig: Rig, family: str, data: st.DataObject) -> None:
    names = [n for f, n in TARGETS if f == family]
    chosen = data.draw(st.dictionaries(st.sampled_from(names), st.sampled_from(sorted(NON_FINITE)), min_size=1))
    verdict, with_signals = rig.judge(poisoned(family, chosen))
    assert verdict["schema_version"] == with_signals["schema_version"]
    assert isinstance(with_signals["signals"], dict)


@pytest.mark.parametrize("word", sorted(NON_FINITE))
def test_every_value_non_finite_at_once(rig: Rig, word: str) -> None:
    for family in sorted(EXPOSITIONS):
        verdict, with_signals = rig.judge(poisoned(family, dict.fromkeys(read_names(family), word)))
        assert verdict["state"] in ("healthy", "degraded", "unknown")
        values = [v for v in with_signals["signals"].values() if not isinstance(v, (int, float))]
        assert all(v is None for v in values), values  # non-finite signals are null, never a string


def test_a_non_finite_value_is_named_in_the_notices_and_not_judged(fresh_rig: Rig) -> None:
    # KV cache reported as +Inf full while requests are preempted: +Inf is no usage the memory rules
    # can judge (before: an OverflowError in the KV-room arithmetic took the diagnosis down), so it is
    # left out, the verdict says so, and no cause is claimed from it
    bodies = [
        poisoned("vllm", {"vllm:kv_cache_usage_perc": "+Inf", "vllm:num_preemptions_total": str(1000.0 * k)}) for k in range(4)
    ]
    verdict, with_signals = fresh_rig.judge(*bodies)
    assert fresh_rig.store.snapshot().source_up("diagnosis")
    said = [n for n in verdict["notices"] if "non-finite value" in n]
    assert len(said) == 1 and "kv" in said[0].lower(), verdict["notices"]
    causes = [c["cause"] for c in (verdict["primary"], *verdict["contributing"], *verdict["bottlenecks"]) if c]
    assert "kv_cache_pressure" not in causes, causes
    assert not [k for k in with_signals["signals"] if "kv_cache_usage" in k and with_signals["signals"][k] is None]
