"""Shared parts of the real-engine integration tests (vLLM, llama.cpp).

* ``run_setup``: runs a ``scripts/integration/setup_*.sh`` (idempotent, cached) and
  returns the ``KEY=VALUE`` lines it prints last.
* ``Proc``: the kit's ``Child`` (tests/support/processes.py) as these tests run it:
  its own process group (TERM, bounded wait, KILL to the whole group), its log kept
  in ``LOG_DIR``.
* ``raw_series``: an *independent* reading of an exposition (prometheus_client's
  parser, not the exporter's), so the equality tests compare two implementations.
* ``compare``: checks the adapter's neutral points against expectations computed
  here from the raw series by the documented mapping, value by value.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.samples import HistogramSample, Point
from tests.support.loadloop import quick_value
from tests.support.ports import free_port
from tests.support.processes import Child, exporter_argv, tail

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "integration"
CACHE = Path(os.environ.get("LLM_EXPORTER_CACHE", "/var/cache/llm-layer-exporter"))
LOG_DIR = Path(os.environ.get("LLM_EXPORTER_INTEGRATION_LOGS", "/tmp/llm-exporter-integration"))


def run_setup(script: str, timeout_s: float) -> dict[str, str]:
    """Run a set-up script (cached, idempotent); fail with its log tail if it fails."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"{Path(script).stem}.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["bash", str(SCRIPTS / script)],
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            raise AssertionError(f"{script} did not finish within {timeout_s:.0f} s; log {log}:\n{tail(log)}") from None
    if proc.returncode != 0:
        raise AssertionError(f"{script} failed (exit {proc.returncode}); log {log}:\n{tail(log)}")
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return values


class Proc(Child):
    """A real engine or exporter: its own process group (engines fork workers), its log kept as ``LOG_DIR/<name>.log``."""

    def __init__(self, argv: Sequence[str], name: str, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        super().__init__(argv, name, env=env, cwd=cwd, log_dir=LOG_DIR, group=True, grace_s=20.0)

    def wait_http(
        self, url: str, timeout_s: float, ok: Callable[[httpx.Response], bool] | None = None, interval: float = 1.0
    ) -> float:
        """As ``Child.wait_http``, polling once a second (an engine starting up is slow to answer)."""
        return super().wait_http(url, timeout_s, ok, interval)


# --------------------------------------------------------------------------- the cached engines

#: engine -> (the variable that switches its tests off, its name in the skip message)
SKIP_SWITCHES = {"vllm": ("LLM_EXPORTER_SKIP_VLLM", "vLLM"), "llamacpp": ("LLM_EXPORTER_SKIP_LLAMACPP", "llama.cpp")}


def skip_if_off(engine: str) -> None:
    """Skip when ``LLM_EXPORTER_SKIP_<ENGINE>=1`` (nothing else skips these tests)."""
    flag, shown = SKIP_SWITCHES[engine]
    if os.environ.get(flag) == "1":
        pytest.skip(f"{flag}=1: the real-{shown} integration tests were switched off")


@dataclass
class RunningEngine:
    """An engine a fixture started and saw answer: its base URL, its process, its start-up seconds."""

    base: str
    proc: Proc
    startup_s: float

    @property
    def metrics_url(self) -> str:
        return self.base + "/metrics"


#: the small CPU vLLM the engine and ramp tests run: 10 KV blocks of 32 tokens, 8 sequence slots,
#: 256-token contexts, no CUDA graphs (requests queue and get preempted under a modest load)
SMALL_KV_VLLM_ARGS = (
    "--max-model-len", "256", "--dtype", "float32", "--block-size", "32",
    "--num-gpu-blocks-override", "10", "--max-num-seqs", "8", "--enforce-eager",
)  # fmt: skip
VLLM_SETUP_TIMEOUT_S = 3000.0
#: seconds a real engine has to answer its health route once started: one that does not fails
#: its tests in 5 minutes, not in the hour a module timeout allowed (a cold CPU vLLM takes 30-90 s)
ENGINE_READY_S = float(os.environ.get("LLM_EXPORTER_ENGINE_READY_S", "300"))
LLAMACPP_SETUP_TIMEOUT_S = float(os.environ.get("LLM_EXPORTER_LLAMACPP_SETUP_TIMEOUT", "4800"))


def vllm_proc(
    args: Sequence[str], name: str, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> tuple[Proc, str]:
    """The cached CPU vLLM (scripts/integration/setup_vllm.sh) with ``args`` on a free port: (not started, base URL).

    Offline and without usage reports; ``prefix`` goes before the interpreter (``nice -n 10``).
    """
    paths = run_setup("setup_vllm.sh", VLLM_SETUP_TIMEOUT_S)
    port = free_port()
    env = {
        "VLLM_CACHE_ROOT": str(CACHE / "vllm-cache"),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(CACHE / "hf-home"),
        **(env or {}),
    }
    argv = [
        *prefix,
        paths["VLLM_PYTHON"],
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        paths["VLLM_MODEL"],
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *args,
    ]
    return Proc(argv, name=name, env=env), f"http://127.0.0.1:{port}"


def _tree_threads(proc: Proc) -> Iterator[tuple[str, int]]:
    """(process name, thread id) of every thread of ``proc`` and its descendants (gone ones skipped)."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for process in processes:
        try:
            name = process.name()
            threads = process.threads()
        except psutil.Error:
            continue  # a process that exited meanwhile
        for thread in threads:
            yield name, thread.id


def vllm_engine_below_front_end(proc: Proc) -> int:
    """Run the CPU vLLM's engine core and worker processes (not its API server) as SCHED_IDLE.

    Why: on a 2-core runner the worker computes on one core and the engine core busy-polls
    the other, so the API server, at the same priority, waits for a time slice on every
    wake-up: measured under ten clients, its ``/metrics`` took 6-38 s at 10 % CPU and most of
    each request's time was spent outside the engine, so the exporter judged a front end
    starved by the test rig. On a GPU node the model runs on the GPU, not on the host cores
    the API server needs; SCHED_IDLE gives that back (``/metrics`` 0.04-0.2 s, rarely 1-6 s).
    Threads the processes start later inherit the policy. Returns the threads changed.
    """
    changed = 0
    for name, tid in _tree_threads(proc):
        if not name.startswith("VLLM::"):
            continue
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            changed += 1
        except OSError:
            continue  # a thread that exited meanwhile
    return changed


def set_autogroup_nice(pid: int, nice: int) -> bool:
    """Give the session of ``pid`` the autogroup nice ``nice``; False where the kernel has no autogroups.

    Why: with ``kernel.sched_autogroup_enabled`` (the default of most distributions and of
    this VM) every session is one scheduling group and the groups share the CPU equally,
    whatever the nice of their processes. An engine runs in its own session (its own process
    group, to be stopped whole), so ``nice -n 19`` alone left it an equal share with the
    exporter's session: it was not "at a lower priority". The autogroup's nice makes it so.
    """
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
        return True
    except OSError:
        return False


@contextmanager
def engine_priority(proc: Proc, nice: int, idle_engine: bool = False, autogroup: bool = False) -> Iterator[None]:
    """Run a shared engine below the exporter for one test, then give it back its normal priority.

    Each test of the shared CPU vLLM (``cpu_vllm`` in tests/conftest.py) asks for the priority it
    was written for, as its own ``nice -n N`` start did before the engine was shared: ``nice`` on
    every thread of the engine's process tree, ``idle_engine`` its engine core and worker as
    SCHED_IDLE (``vllm_engine_below_front_end``), ``autogroup`` the same nice for its session's
    scheduling group. On exit every thread is back at nice 0 and SCHED_OTHER (raising a priority
    needs root, as CI runs: elsewhere the engine stays lower, which slows it and changes no verdict).
    """

    def apply(level: int, policy: int) -> None:
        for _, tid in _tree_threads(proc):
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, tid, level)
            except OSError:
                continue  # gone meanwhile, or not ours to raise
        if autogroup:
            set_autogroup_nice(proc.pid, level)

    apply(nice, os.SCHED_OTHER)
    if idle_engine:
        assert vllm_engine_below_front_end(proc) > 0, f"no vLLM engine process found under {proc.pid}"
    try:
        yield
    finally:
        apply(0, os.SCHED_OTHER)


#: the one CPU vLLM of the real tier, the small one (SMALL_KV_VLLM_ARGS) with every feature a test
#: reads from it: prefix caching, n-gram speculative decoding, the torch profiler (its directory
#: comes last, ``shared_vllm_args``) and a GPU memory share that ``llm_engine_setting`` reports
SHARED_VLLM_ARGS = (
    "--served-model-name", "tiny", *SMALL_KV_VLLM_ARGS, "--gpu-memory-utilization", "0.3",
    "--enable-prefix-caching",
    "--speculative-config",
    json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}),
)  # fmt: skip


def shared_vllm_args(profile_dir: Path, otlp_port: int | None = None) -> list[str]:
    """SHARED_VLLM_ARGS with the torch profiler writing its traces to ``profile_dir`` and, with
    ``otlp_port``, its request spans sent over OTLP/HTTP to 127.0.0.1:``otlp_port`` (where a test's
    ``serve --otlp-http-listen-address`` takes them; ``TRACING_ENV`` says how)."""
    profiler = {"profiler": "torch", "torch_profiler_dir": str(profile_dir), "torch_profiler_with_stack": False}
    traces = ["--otlp-traces-endpoint", f"http://127.0.0.1:{otlp_port}/v1/traces"] if otlp_port is not None else []
    return [*SHARED_VLLM_ARGS, "--profiler-config", json.dumps(profiler), *traces]


#: The shared engine's span export (the OpenTelemetry SDK's own variables). Most of the session no
#: test listens on its OTLP port: over gRPC the SDK's channel backed off its reconnects (up to 120 s)
#: and its batch processor's queue filled with spans of earlier tests while new ones were dropped, so
#: a test's spans came minutes late or never (seen in a full run). Over HTTP each export is a request
#: of its own, given up after 2 s: spans nobody takes are dropped at once, and from the moment a
#: test's ``serve`` listens its requests' spans arrive within the batch delay (0.5 s).
TRACING_ENV = {
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2",
    "OTEL_BSP_SCHEDULE_DELAY": "500",
    "OTEL_BSP_EXPORT_TIMEOUT": "2000",
}


@dataclass
class CpuVllm(RunningEngine):
    """The real tier's shared CPU vLLM: served as ``tiny``; its profiler writes to ``profile_dir``;
    its request spans go to 127.0.0.1:``otlp_port`` (OTLP/HTTP, ``TRACING_ENV``)."""

    profile_dir: Path = field(default_factory=Path)
    model: str = "tiny"
    otlp_port: int | None = None


def llamacpp_proc(args: Sequence[str], name: str, prefix: Sequence[str] = ()) -> tuple[Proc, str]:
    """The cached ``llama-server`` (scripts/integration/setup_llamacpp.sh) with /metrics and ``args``: (not started, base URL)."""
    paths = run_setup("setup_llamacpp.sh", LLAMACPP_SETUP_TIMEOUT_S)
    port = free_port()
    argv = [
        *prefix,
        paths["LLAMA_SERVER"],
        "-m",
        paths["LLAMA_MODEL"],
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics",
        "--no-webui",
        *args,
    ]
    return Proc(argv, name=name), f"http://127.0.0.1:{port}"


# --------------------------------------------------------------------------- independent parsing

LabelKey = frozenset[tuple[str, str]]  # frozenset of (name, value) pairs
V = TypeVar("V")


def raw_series(text: str) -> dict[str, dict[LabelKey, float]]:
    """sample name -> {labels: value}, read with prometheus_client's parser."""
    out: dict[str, dict[LabelKey, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = float(s.value)
    return out


@dataclass(frozen=True)
class RawHist:
    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


def raw_histograms(raw: Mapping[str, Mapping[LabelKey, float]], base: str) -> dict[LabelKey, RawHist]:
    groups: dict[LabelKey, list[tuple[float, float]]] = {}
    for labels, value in raw.get(base + "_bucket", {}).items():
        le = dict(labels)["le"]
        rest = frozenset((k, v) for k, v in labels if k != "le")
        groups.setdefault(rest, []).append((float(le), value))
    return {
        key: RawHist(tuple(sorted(pairs)), raw[base + "_sum"][key], raw[base + "_count"][key]) for key, pairs in groups.items()
    }


# --------------------------------------------------------------------------- comparing


def point_key(labels: Mapping[str, str], drop: Iterable[str] = ("server", "engine")) -> LabelKey:
    """Neutral labels that identify a series, minus the fixed ones and empty values."""
    return frozenset((k, v) for k, v in labels.items() if k not in set(drop) and v != "")


def adapter_points(points: Iterable[Point]) -> tuple[dict[str, dict[LabelKey, float]], dict[str, dict[LabelKey, RawHist]]]:
    """The adapter's output as {name: {labels: value}} and {name: {labels: hist}}."""
    scalars: dict[str, dict[LabelKey, float]] = {}
    hists: dict[str, dict[LabelKey, RawHist]] = {}
    for p in points:
        key = point_key(p.labels)
        if isinstance(p, HistogramSample):
            hists.setdefault(p.name, {})[key] = RawHist(tuple(p.buckets), p.sum, p.count)
        else:
            scalars.setdefault(p.name, {})[key] = float(p.value)
    return scalars, hists


def assert_same_scalars(name: str, got: Mapping[LabelKey, float], want: Mapping[LabelKey, float]) -> None:
    assert set(got) == set(want), (
        f"{name}: label sets differ\n adapter: {sorted(map(sorted, got))}\n raw:     {sorted(map(sorted, want))}"
    )
    for key, value in want.items():
        assert math.isclose(got[key], value, rel_tol=1e-12, abs_tol=1e-12), (
            f"{name}{dict(key)}: adapter {got[key]} != raw {value}"
        )


def assert_same_hists(name: str, got: Mapping[LabelKey, RawHist], want: Mapping[LabelKey, RawHist]) -> None:
    assert set(got) == set(want), f"{name}: label sets differ: adapter {list(got)} raw {list(want)}"
    for key, w in want.items():
        g = got[key]
        assert g.count == w.count, f"{name}{dict(key)}: count {g.count} != raw {w.count}"
        assert math.isclose(g.sum, w.sum, rel_tol=1e-12), f"{name}{dict(key)}: sum {g.sum} != raw {w.sum}"
        assert len(g.buckets) == len(w.buckets), f"{name}: {len(g.buckets)} buckets != raw {len(w.buckets)}"
        for (gb, gc), (wb, wc) in zip(g.buckets, w.buckets):
            assert (math.isinf(gb) and math.isinf(wb)) or math.isclose(gb, wb, rel_tol=1e-12), f"{name}: bound {gb} != {wb}"
            assert gc == wc, f"{name}{dict(key)} le={wb}: {gc} != raw {wc}"


def scrape(url: str) -> str:
    r = httpx.get(url, timeout=10)
    r.raise_for_status()
    return r.text


def max_value(raw: Mapping[str, Mapping[LabelKey, float]], name: str) -> float:
    """The largest value of ``name`` in ``raw_series`` output, 0 when absent (a gauge or counter's peak over ranks)."""
    return max(raw.get(name, {}).values(), default=0.0)


def exporter_values(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called ``name`` in the exporter's own /metrics."""
    return [(labels, value) for key, value in raw_series(text).get(name, {}).items() for labels in [dict(key)]]


# --------------------------------------------------------------------------- the equality check


@dataclass
class Expected:
    """What the documented mapping says one exposition must normalise to.

    ``scalars`` / ``hists``: neutral name -> {labels without server/engine: value}.
    ``info_model_optional``: names derived from info labels that carry no model
    label in the raw text (vLLM ``cache_config_info``); the adapter may attach the
    served model to them, so ``model`` is not part of their comparison key.
    """

    scalars: dict[str, dict[LabelKey, float]] = field(default_factory=dict)
    hists: dict[str, dict[LabelKey, RawHist]] = field(default_factory=dict)
    info_model_optional: frozenset[str] = frozenset()


def _without_model(values: Mapping[LabelKey, V]) -> dict[LabelKey, V]:
    return {frozenset(kv for kv in key if kv[0] != "model"): v for key, v in values.items()}


def assert_adapter_equals_raw(text: str, family: str, generation: str, expected: Expected) -> None:
    """Normalise ``text`` with the adapter; every neutral value must equal the raw one."""
    from exporter.engines import normalize_exposition

    result = normalize_exposition(text, server="itest", engine_type="auto")
    assert result.family == family
    assert result.generation == generation
    assert result.problems == [], result.problems
    for p in result.points:
        assert p.labels.get("server") == "itest", p
        assert p.labels.get("engine") == family, p
    scalars, hists = adapter_points(result.points)
    for meta in ("llm_engine_info", "llm_engine_config_info"):
        scalars.pop(meta, None)
    # every neutral metric the adapter publishes is checked, and every concept the
    # documented mapping promises for this engine is published
    assert set(scalars) == set(expected.scalars), (
        f"published {sorted(set(scalars) - set(expected.scalars))} unchecked; "
        f"missing {sorted(set(expected.scalars) - set(scalars))}"
    )
    assert set(hists) == set(expected.hists), (sorted(hists), sorted(expected.hists))
    for name, want in expected.scalars.items():
        got = scalars[name]
        if name in expected.info_model_optional:
            got, want = _without_model(got), _without_model(want)
        assert_same_scalars(name, got, want)
    for name, want_hists in expected.hists.items():
        assert_same_hists(name, hists[name], want_hists)


def engine_info(text: str) -> list[dict[str, str]]:
    from exporter.engines import normalize_exposition

    result = normalize_exposition(text, server="itest")
    return [dict(p.labels) for p in result.points if p.name == "llm_engine_info"]


def config_info(text: str) -> list[dict[str, str]]:
    from exporter.engines import normalize_exposition

    result = normalize_exposition(text, server="itest")
    return [dict(p.labels) for p in result.points if p.name == "llm_engine_config_info"]


# --------------------------------------------------------------------------- the exporter, end to end


def start_exporter(engine_metrics_url: str, name: str) -> tuple[Proc, str]:
    """``python3 -m exporter serve`` against one engine; returns (proc, its /metrics URL)."""
    port = free_port()
    argv = exporter_argv(
        "serve",
        "--engine",
        engine_metrics_url,
        "--gpu-source",
        "none",
        "--listen-address",
        f"127.0.0.1:{port}",
        "--engine-interval",
        "1",
        "--log-level",
        "info",
    )
    proc = Proc(argv, name=name, cwd=ROOT).start()
    return proc, f"http://127.0.0.1:{port}/metrics"


def start_exporter_with(args: Sequence[str], name: str, ready_timeout_s: float = 60.0) -> tuple[Proc, str]:
    """``serve --listen-address <a free port> ARGS`` once it answers /readyz: (proc, base URL); stopped if it never does."""
    port = free_port()
    proc = Proc(exporter_argv("serve", "--listen-address", f"127.0.0.1:{port}", *args), name=name, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    proc.start_answering(base + "/readyz", ready_timeout_s)
    return proc, base


def exporter_view(text: str) -> tuple[dict[str, dict[LabelKey, float]], dict[str, dict[LabelKey, RawHist]]]:
    """The exporter's /metrics (engine metrics only) in the same shape as the adapter's."""
    raw = raw_series(text)
    scalars: dict[str, dict[LabelKey, float]] = {}
    for name, series in raw.items():
        if name.startswith("llm_") and not name.endswith(("_bucket", "_sum", "_count", "_created")):
            for key, value in series.items():
                scalars.setdefault(name, {})[point_key(dict(key))] = value
    hists: dict[str, dict[LabelKey, RawHist]] = {}
    for name in raw:
        if name.startswith("llm_") and name.endswith("_bucket"):
            base = name[: -len("_bucket")]
            hists[base] = {point_key(dict(k)): v for k, v in raw_histograms(raw, base).items()}
    return scalars, hists


def exporter_mismatches(exporter_text: str, expected: Expected) -> list[str]:
    """Differences between the exporter's published engine values and the raw-derived ones."""
    scalars, hists = exporter_view(exporter_text)
    problems: list[str] = []
    for name, want in expected.scalars.items():
        got = scalars.get(name, {})
        if name in expected.info_model_optional:
            got, want = _without_model(got), _without_model(want)
        for key, value in want.items():
            if key not in got:
                problems.append(f"{name}{dict(key)} missing")
            elif not math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9):
                problems.append(f"{name}{dict(key)}: exporter {got[key]} != raw {value}")
    for name, want_hists in expected.hists.items():
        got_hists = hists.get(name, {})
        for key, w in want_hists.items():
            g = got_hists.get(key)
            if g is None:
                problems.append(f"{name}{dict(key)} histogram missing")
            elif (
                g.count != w.count
                or not math.isclose(g.sum, w.sum, rel_tol=1e-9)
                or [c for _, c in g.buckets] != [c for _, c in w.buckets]
            ):
                problems.append(f"{name}{dict(key)}: exporter count/sum/buckets differ from raw")
    return problems


def assert_exporter_matches(
    exporter: Proc,
    exporter_url: str,
    engine_url: str,
    family: str,
    expected_of: Callable[[str], Expected],
    timeout_s: float = 90.0,
) -> tuple[str, str]:
    """Poll (bounded) until the exporter publishes exactly what the idle engine serves.

    The engine is idle (load finished), so its values are fixed; the exporter
    scrapes every second. Returns the last (exporter text, raw text).
    """
    exporter.wait_http(exporter_url, timeout_s=60)
    deadline = time.monotonic() + timeout_s
    problems: list[str] = ["never scraped"]
    ex_text = raw_text = ""
    while time.monotonic() < deadline:
        if not exporter.alive():
            raise AssertionError(f"exporter exited; log {exporter.log}:\n{tail(exporter.log)}")
        raw_text = scrape(engine_url)
        ex_text = scrape(exporter_url)
        info = exporter_values(ex_text, "llm_engine_info")
        if any(labels.get("engine") == family for labels, v in info if v == 1):
            problems = exporter_mismatches(ex_text, expected_of(raw_text))
            if not problems:
                return ex_text, raw_text
        else:
            problems = [f"no llm_engine_info{{engine={family!r}}} yet"]
        time.sleep(1.0)
    raise AssertionError(f"exporter never matched the engine: {problems[:10]}\nlog {exporter.log}:\n{tail(exporter.log, 30)}")


def exporter_publishes(engine_metrics_url: str, family: str, generation: str, expected_of: Callable[[str], Expected]) -> str:
    """A real ``serve`` against the idle engine publishes exactly its values and names it; returns its /metrics text."""
    exporter, url = start_exporter(engine_metrics_url, name=f"exporter-{family}")
    try:
        ex_text, _ = assert_exporter_matches(exporter, url, engine_metrics_url, family, expected_of)
    finally:
        exporter.stop()
    info = [labels for labels, v in exporter_values(ex_text, "llm_engine_info") if v == 1]
    assert any(lab.get("engine") == family and lab.get("generation") == generation for lab in info), info
    return ex_text


def pick_expositions(texts: list[str], queue_prefix: str, spread: int = 20, queued: int = 10) -> list[str]:
    """Expositions to compare: up to ``spread`` spread evenly over the load, plus up to
    ``queued`` of those where the queue gauge (``queue_prefix``) was non-zero."""
    step = max(1, len(texts) // spread)
    chosen = texts[::step]
    with_queue = [t for t in texts if quick_value(t, queue_prefix) > 0]
    step_q = max(1, len(with_queue) // queued)
    return chosen + with_queue[::step_q]
