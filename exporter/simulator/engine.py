"""The simulated engine: a scheduler thread that steps in scaled real time.

Why a real thread with real pacing: the exporter under test scrapes a live
endpoint and samples a live process, so the simulator must behave like one.
Each step the scheduler thread plans a batch (:mod:`.scheduler`), asks the
roofline (:mod:`.roofline`) how long the GPUs take, burns the modelled host time
on a real CPU (:mod:`.hostwork`), then sleeps out the rest of the step (host
work overlaps GPU work unless ``overlap_host`` is off) and delivers the tokens.
All bookkeeping runs under one lock; renderers read frozen snapshots.

The HTTP front end never waits on that lock (issue 31): a submission goes into a
lock-free inbox the scheduler takes at its next step (as a real engine core takes
new requests between steps), HTTP-level counts go to a counter of their own, and
an idle scheduler is woken by an event, not by the lock's condition. Before this,
the event loop waited for the scheduler's bookkeeping on every request and every
count; on a short CPU its clients fell behind and the simulated queue emptied,
so a scenario stopped being its scenario for reasons of the host. For the same
reason the engine holds its model clock while a named closed-loop client it
answered has not sent its next request (exporter/simulator/lockstep.py): a slow
load generator then slows the simulation down, it does not lighten the load.

Data parallel (``--data-parallel-size`` / ``-dp`` N): N replicas behind the one
endpoint, each with a scheduler, a KV cache and GPUs of its own (``Replica``), as
vLLM runs one engine core per DP rank. A request goes to the replica with the least
``4 * waiting + running`` (vLLM's DP load balancer, ``DPLBAsyncMPClient``; the
lowest index on a tie), chosen when the scheduler takes it from the inbox, so the
counts are exact where vLLM's are up to 100 ms old. The one scheduler thread steps
every replica event by event in model time (``_run_replicas``): each replica runs
its own steps, of its own length, and an idle replica takes a new request at once.
The statistics, the queue bound and the metrics stay per endpoint (sums over the
replicas); /sim/gpu lists every GPU, replica by replica. With one replica the loop
is the single-scheduler one (``_run``), unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.simulator.clock import SimClock
from exporter.simulator.delivery import deliver
from exporter.simulator.gpu import GpuTelemetry, link_readings
from exporter.simulator.hostwork import burn_cpu
from exporter.simulator.lockstep import ClientLedger
from exporter.simulator.requests import SimRequest, TokenEvent
from exporter.simulator.roofline import MIB, GpuParams, StepWork, stage_layers, step_cost
from exporter.simulator.scheduler import Plan, QueueFull, Scheduler
from exporter.simulator.settings import SimConfig
from exporter.simulator.stats import EngineStats, FrozenStats

__all__ = ["Engine", "EngineSnapshot", "EngineStopped", "QueueFull"]

log = logging.getLogger(__name__)

#: Model seconds over which windowed gauges (throughputs, hit rates) are computed.
RATE_WINDOW_S = 10.0
#: Memory the driver and CUDA context hold before the model loads (trace ``idle``: 615-619 MiB).
BASE_FB_MIB = 617.0
#: Activations and CUDA graphs, per GPU.
ACTIVATION_MIB = 2048.0
#: Cumulative values kept per step for windowed gauges, in this order.
_WINDOW_KEYS = (
    "generation_tokens",
    "prompt_tokens_local_compute",
    "prefix_hits",
    "prefix_queries",
    "spec_drafts",
    "spec_accepted_tokens",
    "spec_draft_tokens",
    "decode_steps",
    "decode_batch",
)


class FrontCounts:
    """HTTP-level counts (requests received, validation errors, queue-full refusals) kept apart
    from the engine's stats, under a lock the scheduler never holds for a step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def inc(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        key = (name, tuple(sorted((labels or {}).items())))
        with self._lock:
            self._counts[key] = self._counts.get(key, 0.0) + 1.0

    def take(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Everything counted since the last take (the caller adds it to the engine's stats)."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts


class EngineStopped(Exception):
    """The engine is shutting down: the HTTP layer answers 503."""


#: an idle engine's longest sleep (wall seconds): everything that gives it work wakes it at once
#: (a submission, an abort, a reconfiguration, stop), so this only bounds a missed wake-up
IDLE_WAKE_S = 1.0
#: the shortest sleep before a batching window's release (a window due now is released at once after it)
MIN_HOLD_WAIT_S = 0.0005


def idle_wait_s(hold: float | None, scale: float) -> float:
    """How long an idle engine sleeps: until a batching window releases its queue head (``hold`` model
    seconds away), else until woken. Why not a short poll: on a contended node every wake-up waits in
    the run queue, and 20 polls a second read as a host thread wanting a full core (serial_host_ceiling
    named on the batching_window scenario beside a full test run)."""
    if hold is None:
        return IDLE_WAKE_S
    return min(IDLE_WAKE_S, max(hold / scale, MIN_HOLD_WAIT_S))


def fb_used_mib(config: SimConfig) -> float:
    """Framebuffer in use per GPU: driver, weights share, KV pool share, activations."""
    geo = config.geometry
    lay = config.layout
    if lay.modelled:
        kv_rank = replica_kv_blocks(config) * rank_block_bytes(config)
        return BASE_FB_MIB + (geo.weight_bytes / lay.ranks + kv_rank) / MIB + ACTIVATION_MIB
    kv = replica_kv_blocks(config) * config.block_size * geo.kv_bytes_per_token
    return BASE_FB_MIB + (geo.weight_bytes + kv) / config.gpus / (1024 * 1024) + ACTIVATION_MIB


def rank_block_bytes(config: SimConfig) -> int:
    """Bytes one GPU holds of one KV block: its stage's layers (the largest stage), its KV heads (1/TP of
    them, or one whole head where TP exceeds their count: vLLM replicates them)."""
    geo, lay = config.geometry, config.layout
    heads = max(1, geo.kv_heads // lay.tp)
    return config.block_size * 2 * max(stage_layers(geo.layers, lay.pp)) * heads * geo.head_dim * geo.kv_dtype_bytes


def replica_kv_blocks(config: SimConfig) -> int:
    """KV-cache blocks of one replica. ``num_gpu_blocks`` is what one GPU holds beside the whole model
    (TP = PP = 1); a replica of n = TP x PP GPUs reserves that same memory on each of them (vLLM's
    --gpu-memory-utilization is a share of every GPU), and each holds only 1/n of the weights, so each
    has ``num_gpu_blocks`` blocks' worth plus the (n - 1)/n of the weights it no longer holds for KV,
    in blocks of its own slice (``rank_block_bytes``). The replica's capacity is the sum over its GPUs:
    n times the pool plus the weights freed (8B at TP 4: 39,271 blocks against 4,096). The pre-layout
    ``--gpus`` group keeps ``num_gpu_blocks`` as given.

    ``num_gpu_blocks`` measures memory in blocks of the model's own 16-bit type: an FP8 KV cache
    (``--kv-cache-dtype fp8``) holds twice as many blocks in it, as vLLM sizes its cache from memory."""
    lay = config.layout
    geo = config.geometry
    widening = geo.pool_bytes_per_token // geo.kv_bytes_per_token  # 2 for an FP8 cache, else 1
    if not lay.modelled or lay.ranks == 1:
        return config.num_gpu_blocks * widening
    whole_model_block = config.block_size * geo.pool_bytes_per_token
    per_rank = config.num_gpu_blocks * whole_model_block + geo.weight_bytes * (lay.ranks - 1) / lay.ranks
    return int(per_rank // rank_block_bytes(config))


def replica_config(config: SimConfig) -> SimConfig:
    """``config`` as one replica's scheduler sees it: its own KV pool (``replica_kv_blocks``)."""
    blocks = replica_kv_blocks(config)
    return config if blocks == config.num_gpu_blocks else dataclasses.replace(config, num_gpu_blocks=blocks)


def gpu_params(config: SimConfig) -> GpuParams:
    lay = config.layout
    return GpuParams(
        gpus=lay.tp,
        power_limit_w=config.power_limit_w,
        pcie_mib_s=config.pcie_mib_s,
        hbm_bytes_s=config.hbm_gb_s * 1e9,
        tp_imbalance=config.tp_imbalance,
        draft_share=config.spec_draft_cost,
        geometry=config.geometry,
        pp=lay.pp,
        modelled=lay.modelled,
        interconnect=lay.interconnect,
    )


def host_seconds(config: SimConfig, plan: Plan, work: StepWork) -> float:
    """Scheduler CPU time of one step (model s)."""
    return config.host_base_s + config.host_per_seq_s * len(plan.items) + config.host_per_token_s * work.tokens


#: the settings a running engine keeps as started: its GPUs (``reconfigure``)
LAYOUT_FIELDS: tuple[str, ...] = ("gpus", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "interconnect")


@dataclass
class InFlight:
    """A replica's step in progress (data parallel): its plan and the model seconds it still runs."""

    plan: Plan
    work: StepWork
    duration: float
    host_s: float
    gpu_s: float
    remaining: float


class Replica:
    """One data-parallel replica: a scheduler with its KV cache, the telemetry of its GPUs, its step in flight."""

    def __init__(self, index: int, config: SimConfig, stats: EngineStats) -> None:
        lay = config.layout
        self.index = index
        self.scheduler = Scheduler(replica_config(config), stats)
        if index:
            self.scheduler.rng = random.Random(f"{config.seed}/{index}")
        self.telemetry = GpuTelemetry(
            lay.ranks, config.gpu_window_s, fb_used_mib(config), config.power_limit_w, config.seed, first_index=index * lay.ranks
        )
        self.telemetry.static = link_readings(config)
        self.step: InFlight | None = None

    @property
    def load(self) -> int:
        """vLLM's DP load-balancing score: a waiting request weighs four running ones."""
        return 4 * len(self.scheduler.waiting) + len(self.scheduler.running)


def eager_launch_s(config: SimConfig, work: StepWork) -> float:
    """Launch time an eager step adds: a decode-only step (vLLM captures graphs for those) with graphs
    off, or with more running requests than the largest captured graph."""
    if work.decode_seqs == 0 or work.prefill_tokens:
        return 0.0
    if config.enforce_eager or work.decode_seqs > config.max_cudagraph_capture_size:
        return config.eager_launch_s
    return 0.0


@dataclass(frozen=True)
class EngineSnapshot:
    """Everything a dialect renders or /sim/state reports, copied under the engine lock."""

    config: SimConfig
    scenario: str
    model_time: float
    #: wall seconds since the engine was created (model_time / (wall * time_scale) < 1 means it lags)
    wall_elapsed: float
    start_unix: float
    running: int
    #: running requests still in (chunked) prefill
    running_prefill: int
    waiting: int
    waiting_deferred: int
    swapped: int
    kv_blocks_total: int
    kv_blocks_used: int
    kv_blocks_cached: int
    cpu_blocks_total: int
    cpu_blocks_used: int
    stats: FrozenStats
    steps: int
    busy_seconds: float
    host_seconds: float
    scheduler_cpu_seconds: float
    scheduler_thread_id: int | None
    batch_max_tokens: int
    max_seq_len: int
    last_step_seconds: float
    last_step_tokens: int
    last_step_prefill_tokens: int
    window: dict[str, float] = field(default_factory=dict)
    #: (prompt tokens, tokens decoded) of each running request, in admission order: what a
    #: slot-based engine (llama.cpp's /slots) reports per busy slot
    running_lengths: tuple[tuple[int, int], ...] = ()
    #: the host KV tier of ``kv_offload_blocks`` (0 / 0 without one)
    offload_blocks_total: int = 0
    offload_blocks_used: int = 0

    @property
    def kv_usage(self) -> float:
        return min(1.0, self.kv_blocks_used / self.kv_blocks_total) if self.kv_blocks_total else 0.0

    @property
    def idle_seconds(self) -> float:
        return max(0.0, self.model_time - self.busy_seconds)

    def state(self) -> dict[str, Any]:
        """The JSON body of ``GET /sim/state``: internal truth to compare expositions against."""
        s = self.stats
        cfg = self.config
        finished = {k: v for k, v in s.counter_by("finished", "reason").items() if k}
        hist = {}
        for name in (
            "ttft",
            "itl",
            "tpot",
            "e2e",
            "queue",
            "inference",
            "prefill",
            "decode",
            "iteration_tokens",
            "prompt_len",
            "gen_len",
            "request_preemptions",
        ):
            data = s.histogram(name)
            hist[name] = {"count": data.count, "sum": data.sum}
        return {
            "scenario": self.scenario,
            "model": cfg.model,
            "pid": os.getpid(),
            "model_time_s": self.model_time,
            "wall_time_s": self.wall_elapsed,
            "time_scale": cfg.time_scale,
            "gpus": cfg.total_gpus,
            "layout": cfg.layout.as_dict(),
            "running": self.running,
            "waiting": self.waiting,
            "waiting_by_reason": {"capacity": self.waiting - self.waiting_deferred, "deferred": self.waiting_deferred},
            "swapped": self.swapped,
            "kv": {
                "block_size": cfg.block_size,
                "blocks_total": self.kv_blocks_total,
                "blocks_used": self.kv_blocks_used,
                "blocks_cached": self.kv_blocks_cached,
                "usage": self.kv_usage,
                "capacity_tokens": self.kv_blocks_total * cfg.block_size,
                "cpu_blocks_total": self.cpu_blocks_total,
                "cpu_blocks_used": self.cpu_blocks_used,
                "offload_blocks_total": self.offload_blocks_total,
                "offload_blocks_used": self.offload_blocks_used,
            },
            "preemptions": s.counter("preemptions"),
            "prefix_cache": {
                "queried_tokens": s.counter("prefix_queries"),
                "hit_tokens": s.counter("prefix_hits"),
                "external_queried_tokens": s.counter("external_queries"),
                "external_hit_tokens": s.counter("external_hits"),
            },
            "tokens": {
                "prompt": s.counter("prompt_tokens"),
                "prompt_cached": s.counter("prompt_tokens_cached"),
                "prompt_external": s.counter("prompt_tokens_external"),
                "prompt_local_compute": s.counter("prompt_tokens_local_compute"),
                "generation": s.counter("generation_tokens"),
            },
            "requests": {
                "received": s.counter("requests_received"),
                "finished": finished,
                "rejected": {k: v for k, v in s.counter_by("rejected", "reason").items() if k},
                "validation_errors": s.counter("validation_errors"),
            },
            "spec": {
                "num_speculative_tokens": cfg.spec_tokens,
                "acceptance_probability": cfg.spec_acceptance,
                "drafts": s.counter("spec_drafts"),
                "draft_tokens": s.counter("spec_draft_tokens"),
                "accepted_tokens": s.counter("spec_accepted_tokens"),
                "accepted_per_position": [s.counter("spec_accepted_per_pos", position=str(i)) for i in range(cfg.spec_tokens)],
            },
            "swap": {
                "out_blocks": s.counter("swap_out_blocks"),
                "in_blocks": s.counter("swap_in_blocks"),
                "offload_loaded_blocks": s.counter("offload_loaded_blocks"),
                "offload_stored_blocks": s.counter("offload_stored_blocks"),
            },
            "scheduler": {
                "thread_native_id": self.scheduler_thread_id,
                "cpu_seconds": self.scheduler_cpu_seconds,
                "host_model_seconds": self.host_seconds,
                "busy_model_seconds": self.busy_seconds,
                "idle_model_seconds": self.idle_seconds,
                "steps": self.steps,
                "last_step_seconds": self.last_step_seconds,
                "last_step_tokens": self.last_step_tokens,
            },
            "histograms": hist,
            "window": self.window,
            "config": cfg.as_dict(),
        }


class Engine:
    """The simulated serving engine; ``start()`` launches its scheduler thread."""

    def __init__(self, config: SimConfig, scenario: str = "custom", buckets: Mapping[str, Iterable[float]] | None = None) -> None:
        config.validate()
        self.config = config
        self.scenario = scenario
        self.stats = EngineStats(buckets)
        self.clock = SimClock(config.time_scale)
        self.replicas = [Replica(i, config, self.stats) for i in range(config.layout.dp)]
        self._params = gpu_params(config)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stopping = threading.Event()
        #: submissions the front end made since the scheduler last looked (deque: atomic append/popleft)
        self._inbox: deque[SimRequest] = deque()
        self._front = FrontCounts()
        #: named closed-loop clients answered and due back: the model clock waits for them
        self.clients = ClientLedger()
        #: set by whatever gives an idle scheduler work: a submission, an abort, a reconfigure, stop
        self._wake = threading.Event()
        run = self._run if len(self.replicas) == 1 else self._run_replicas
        self._thread = threading.Thread(target=run, name="sim-scheduler", daemon=True)
        self._ids = itertools.count(1)
        self.start_unix = time.time()
        self._start_mono = time.monotonic()
        self.thread_native_id: int | None = None
        self._cpu = 0.0
        self._steps = 0
        self._busy = 0.0
        self._host = 0.0
        self._last_step = (0.0, 0, 0)
        self._window: deque[tuple[float, tuple[float, ...]]] = deque()
        self.fatal: BaseException | None = None

    @property
    def scheduler(self) -> Scheduler:
        """The (first) replica's scheduler: the only one without data parallelism."""
        return self.replicas[0].scheduler

    @scheduler.setter
    def scheduler(self, value: Scheduler) -> None:
        self.replicas[0].scheduler = value

    @property
    def telemetry(self) -> GpuTelemetry:
        """The (first) replica's GPU telemetry."""
        return self.replicas[0].telemetry

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Engine:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping.set()
            self._cond.notify_all()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # ------------------------------------------------------------------ requests
    def submit(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        streaming: bool,
        sink: Callable[[TokenEvent], None],
        client: str | None = None,
    ) -> SimRequest:
        """Queue a request without the engine lock; raises QueueFull (-> 429) or EngineStopped (-> 503).

        The queue bound is read without the lock: the scheduler only ever shortens the
        waiting list behind the front end's back, and one event loop submits in turn.
        ``client``: the closed-loop client that sent it (exporter/simulator/lockstep.py),
        recorded before the request enters the inbox, so a scheduler that sees the
        inbox also sees the client back.
        """
        if self._stopping.is_set() or not self._thread.is_alive():
            raise EngineStopped("the simulated engine is not running")
        waiting = sum(len(r.scheduler.waiting) for r in self.replicas) + len(self._inbox)
        if waiting >= self.config.max_queue_len:
            self._front.inc("rejected", {"reason": "queue_full"})
            if client is not None:
                self.clients.forget(client)
            raise QueueFull(f"{waiting} requests waiting (max_queue_len {self.config.max_queue_len})")
        rid = next(self._ids)
        req = SimRequest(
            id=f"sim-{rid}",
            prompt_ids=prompt_ids,
            max_tokens=max_tokens,
            streaming=streaming,
            sink=sink,
            arrival=self.clock.now(),
            seed=rid,
            client=client,
            cache_salt=f"salt-{rid}".encode() if self.config.cache_salt_per_request else b"",
        )
        if client is not None:
            self.clients.arrived(client, req.id)
        self._inbox.append(req)
        self._wake.set()
        return req

    def abort(self, req: SimRequest) -> None:
        """The client went away (disconnect or timeout): finish the request as ``abort``.

        A flag the scheduler reads at its next step (``reap_aborted``), so no lock: the
        front end calls this from its event loop.
        """
        if req.finish_reason is None:
            self.scheduler.abort(req)
            self._wake.set()

    def count(self, name: str) -> None:
        """Count an HTTP-level event (requests received, validation errors): no engine lock."""
        self._front.inc(name)

    def _take_inbox(self) -> None:
        """Under the engine lock: admit what the front end submitted, add its counts to the stats."""
        while self._inbox:
            req = self._inbox.popleft()
            target = self.replicas[0] if len(self.replicas) == 1 else min(self.replicas, key=lambda r: r.load)
            target.scheduler.admit(req)
        for (name, labels), amount in self._front.take().items():
            self.stats.inc(name, amount, dict(labels) if labels else None)

    def reconfigure(self, config: SimConfig, scenario: str) -> None:
        """Switch knobs live (POST /sim/scenario). The GPUs (count and layout) and dialect stay as started."""
        config.validate()
        started = {name: getattr(self.config, name) for name in LAYOUT_FIELDS}
        if any(getattr(config, name) != value for name, value in started.items()):
            config = _replace(config, **started)
            config.validate()
        with self._cond:
            self.config = config
            self.scenario = scenario
            now = self.clock.now()
            for rep in self.replicas:
                rep.scheduler.reconfigure(replica_config(config), now)
                rep.telemetry.configure(config.gpu_window_s, config.power_limit_w, fb_used_mib(config))
            self._params = gpu_params(config)
            self.clock.set_scale(config.time_scale)
            self._cond.notify_all()
        self._wake.set()

    # ------------------------------------------------------------------ reads
    def snapshot(self) -> EngineSnapshot:
        with self._lock:
            self._take_inbox()
            schs = [r.scheduler for r in self.replicas]
            running = [r for sch in schs for r in sch.running]
            waiting = [r for sch in schs for r in sch.waiting]
            now = self.clock.now()
            return EngineSnapshot(
                config=self.config,
                scenario=self.scenario,
                model_time=now,
                wall_elapsed=time.monotonic() - self._start_mono,
                start_unix=self.start_unix,
                running=len(running),
                running_prefill=sum(1 for r in running if not r.in_decode),
                waiting=len(waiting),
                waiting_deferred=sum(sch.waiting_deferred() for sch in schs),
                swapped=sum(1 for r in waiting if r.swapped_blocks),
                kv_blocks_total=sum(sch.pool.total for sch in schs),
                kv_blocks_used=sum(sch.pool.used for sch in schs),
                kv_blocks_cached=sum(sch.pool.cached for sch in schs),
                cpu_blocks_total=sum(sch.host.total for sch in schs),
                cpu_blocks_used=sum(sch.host.used for sch in schs),
                stats=self.stats.freeze(),
                steps=self._steps,
                busy_seconds=self._busy,
                host_seconds=self._host,
                scheduler_cpu_seconds=self._cpu,
                scheduler_thread_id=self.thread_native_id,
                batch_max_tokens=sum(r.prompt_len + r.max_tokens for r in running),
                max_seq_len=max(sch.max_seq_len for sch in schs),
                last_step_seconds=self._last_step[0],
                last_step_tokens=self._last_step[1],
                last_step_prefill_tokens=self._last_step[2],
                window=self._window_rates(now),
                running_lengths=tuple((r.prompt_len, len(r.output_ids)) for r in running),
                offload_blocks_total=sum(sch.offload.total for sch in schs),
                offload_blocks_used=sum(sch.offload.used for sch in schs),
            )

    def gpu_readings(self) -> list[dict[str, object]]:
        """One reading per GPU: replica by replica, stage by stage, TP rank by TP rank."""
        return [reading for rep in self.replicas for reading in rep.telemetry.readings()]

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        self.thread_native_id = threading.get_native_id()
        cpu0 = time.thread_time()
        try:
            while not self._stopping.is_set():
                self._wake.clear()  # before the inbox is read: a submission after this sets it again
                with self._cond:
                    self._take_inbox()
                    now = self.clock.now()
                    for gone in self.scheduler.reap_aborted(now):
                        self._answered(gone)
                    idle_wait: float | None = None
                    if self.clients.awaited():  # a closed-loop client is due back: model time waits for it
                        self.clock.hold()
                        idle_wait = self.clients.wait_s()
                        self._cpu = time.thread_time() - cpu0
                    elif (plan := self.scheduler.schedule(now)).empty:
                        self.clock.begin_idle()
                        self.telemetry.idle(self.clock.scale)
                        idle_wait = idle_wait_s(self.scheduler.hold_remaining(now), self.clock.scale)
                        self._cpu = time.thread_time() - cpu0
                    else:
                        cfg = self.config
                        work = plan.work(cfg.spec_tokens)
                        work.eager_launch_s = eager_launch_s(cfg, work)
                        gpu_steps = step_cost(work, self._params)
                        gpu_s = max(s.span_s for s in gpu_steps)
                        host_s = host_seconds(cfg, plan, work)
                        duration = max(host_s, gpu_s) if cfg.overlap_host else host_s + gpu_s
                        self.clock.begin_step(duration)
                        scale = self.clock.scale
                        self.telemetry.record(duration, scale, gpu_steps)
                if idle_wait is not None:
                    if not self._inbox:  # outside the lock: a submission wakes it at once
                        self._wake.wait(idle_wait)
                    continue
                burn_cpu(host_s / scale)
                delay = self.clock.step_wall_deadline() - time.monotonic()
                if delay > 0:
                    self._stopping.wait(delay)
                with self._cond:
                    t1 = self.clock.end_step()
                    events = self.scheduler.apply(plan, t1)
                    for req, event in events:
                        if event.finish_reason:
                            self._answered(req)
                    self._account(plan, work.prefill_tokens, work.decode_tokens, duration, host_s, gpu_s, t1)
                    self._cpu = time.thread_time() - cpu0
                deliver(events, self.abort)
        except BaseException as err:  # pragma: no cover - surfaced through /health (503)
            self.fatal = err
            log.exception("simulated engine stopped")
            raise

    def _run_replicas(self) -> None:
        """The loop of a data-parallel engine: one thread drives every replica, event by event in model time.

        Each pass starts a step on every idle replica that has work, lets model time run to the end of the
        first step in flight (or, while a replica idles, until a submission wakes it: an idle replica takes
        a new request at once) and finishes the steps that ended there; a step still running keeps its
        remaining model seconds. Host work of every replica is burnt on this one thread (vLLM gives each
        DP rank an engine-core process of its own).
        """
        self.thread_native_id = threading.get_native_id()
        cpu0 = time.thread_time()
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                idle_wait: float | None = None
                host_total, t0, any_idle = 0.0, 0.0, False
                scale = self.clock.scale
                with self._cond:
                    self._take_inbox()
                    now = self.clock.now()
                    for rep in self.replicas:
                        for gone in rep.scheduler.reap_aborted(now):
                            self._answered(gone)
                    if self.clients.awaited():  # a closed-loop client is due back: model time waits for it
                        self.clock.hold()
                        idle_wait = self.clients.wait_s()
                    else:
                        host_total = self._start_steps(now, scale)
                        flying = [rep.step.remaining for rep in self.replicas if rep.step is not None]
                        if flying:
                            t0 = self.clock.begin_step(min(flying))
                            any_idle = any(rep.step is None for rep in self.replicas)
                        else:
                            self.clock.begin_idle()
                            holds = [h for rep in self.replicas if (h := rep.scheduler.hold_remaining(now)) is not None]
                            idle_wait = idle_wait_s(min(holds) if holds else None, scale)
                    self._cpu = time.thread_time() - cpu0
                if idle_wait is not None:
                    if not self._inbox:  # outside the lock: a submission wakes it at once
                        self._wake.wait(idle_wait)
                    continue
                burn_cpu(host_total / scale)
                delay = self.clock.step_wall_deadline() - time.monotonic()
                # with a replica idle, a submission (or an abort, or stop) ends the wait early
                woken = delay > 0 and (self._wake if any_idle else self._stopping).wait(delay)
                with self._cond:
                    t1 = self.clock.cut_step() if woken else self.clock.end_step()
                    events = self._finish_steps(t1, t1 - t0)
                    self._cpu = time.thread_time() - cpu0
                deliver(events, self.abort)
        except BaseException as err:  # pragma: no cover - surfaced through /health (503)
            self.fatal = err
            log.exception("simulated engine stopped")
            raise

    def _start_steps(self, now: float, scale: float) -> float:
        """Under the lock: plan a step on every replica not stepping; returns their host seconds together."""
        cfg = self.config
        host_total = 0.0
        for rep in self.replicas:
            if rep.step is not None:
                continue
            plan = rep.scheduler.schedule(now)
            if plan.empty:
                rep.telemetry.idle(scale)
                continue
            work = plan.work(cfg.spec_tokens)
            work.eager_launch_s = eager_launch_s(cfg, work)
            gpu_steps = step_cost(work, self._params)
            gpu_s = max(s.span_s for s in gpu_steps)
            host_s = host_seconds(cfg, plan, work)
            duration = max(host_s, gpu_s) if cfg.overlap_host else host_s + gpu_s
            rep.step = InFlight(plan, work, duration, host_s, gpu_s, duration)
            rep.telemetry.record(duration, scale, gpu_steps)
            host_total += host_s
        return host_total

    def _finish_steps(self, t1: float, elapsed: float) -> list[tuple[SimRequest, TokenEvent]]:
        """Under the lock: model time ran ``elapsed`` seconds to ``t1``; apply the steps that ended."""
        events: list[tuple[SimRequest, TokenEvent]] = []
        for rep in self.replicas:
            st = rep.step
            if st is None:
                continue
            st.remaining -= elapsed
            if st.remaining > 1e-9:
                continue
            rep.step = None
            done = rep.scheduler.apply(st.plan, t1)
            for req, event in done:
                if event.finish_reason:
                    self._answered(req)
            self._account(st.plan, st.work.prefill_tokens, st.work.decode_tokens, st.duration, st.host_s, st.gpu_s, t1)
            events.extend(done)
        return events

    def _answered(self, req: SimRequest) -> None:
        """``req`` finished or was aborted: its closed-loop client, if named, is due back."""
        if req.client is not None:
            self.clients.answered(req.client, req.id)

    def _account(self, plan: Plan, prefill: int, decode: int, duration: float, host_s: float, gpu_s: float, t1: float) -> None:
        st = self.stats
        tokens = prefill + decode
        method = "prefill" if prefill else "decode"
        mode = "mixed" if prefill and decode else ("extend" if prefill else "decode")
        st.observe("iteration_tokens", tokens)
        st.observe("batch_size", len(plan.items))
        st.observe("forward", gpu_s, {"method": method})
        st.observe("step", duration, {"method": method})
        st.inc("steps", labels={"method": method})
        st.inc("forward_seconds", gpu_s, {"mode": mode})
        if tokens:
            st.inc("prompt_seconds", duration * prefill / tokens)
            st.inc("predicted_seconds", duration * decode / tokens)
        if not prefill and plan.items:
            st.inc("decode_steps")
            st.inc("decode_batch", len(plan.items))
        self._steps += 1
        self._busy += duration / len(self.replicas)  # data parallel: the replicas' mean busy time
        self._host += host_s
        self._last_step = (duration, tokens, prefill)
        self._window.append((t1, tuple(st.total(k) for k in _WINDOW_KEYS)))
        while len(self._window) > 2 and self._window[0][0] < t1 - RATE_WINDOW_S:
            self._window.popleft()

    def _window_rates(self, now: float) -> dict[str, float]:
        """Engine-computed windowed gauges (as SGLang / llama.cpp / TRT-LLM publish them)."""
        if len(self._window) < 2:
            return {
                "generation_tokens_per_s": 0.0,
                "prompt_tokens_per_s": 0.0,
                "cache_hit_rate": 0.0,
                "spec_accept_rate": 0.0,
                "spec_accept_length": 0.0,
                "busy_slots_per_decode": 0.0,
            }
        (t_a, a), (t_b, b) = self._window[0], self._window[-1]
        span = max(now - t_a, t_b - t_a, 1e-9)
        d = {k: b[i] - a[i] for i, k in enumerate(_WINDOW_KEYS)}
        return {
            "generation_tokens_per_s": d["generation_tokens"] / span,
            "prompt_tokens_per_s": d["prompt_tokens_local_compute"] / span,
            "cache_hit_rate": d["prefix_hits"] / d["prefix_queries"] if d["prefix_queries"] else 0.0,
            "spec_accept_rate": d["spec_accepted_tokens"] / d["spec_draft_tokens"] if d["spec_draft_tokens"] else 0.0,
            "spec_accept_length": 1.0 + d["spec_accepted_tokens"] / d["spec_drafts"] if d["spec_drafts"] else 0.0,
            "busy_slots_per_decode": d["decode_batch"] / d["decode_steps"] if d["decode_steps"] else 0.0,
        }


def _replace(config: SimConfig, **changes: Any) -> SimConfig:
    import dataclasses

    return dataclasses.replace(config, **changes)
