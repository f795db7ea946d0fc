"""The bottleneck scenarios (names are a contract): knobs plus the load that reveals them.

Why knobs *and* load: a bottleneck is a property of a configuration under a
load. ``kv_pressure`` needs long outputs from many concurrent clients,
``batching_window`` needs a trickle of requests, ``queue_backlog`` needs
clients that time out and retry. Each scenario therefore names the settings it
changes and the load profile (in model seconds) that the demo, the tests and
the diagnosis benchmark drive it with; ``load_spec()`` turns that into a
:class:`exporter.loadgen.LoadSpec` for a given time scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.loadgen.spec import LoadSpec
from exporter.simulator import lockstep
from exporter.simulator.settings import SimConfig, apply_overrides


@dataclass(frozen=True)
class LoadProfile:
    """Load that shows a scenario's signature. Durations and rates are in model seconds."""

    concurrency: int = 8
    #: open-loop arrivals per model second (None: closed loop, ``concurrency`` clients back to back)
    rate: float | None = None
    prompt_tokens: tuple[tuple[int, float], ...] = ((128, 0.5), (512, 0.4), (1024, 0.1))
    max_tokens: tuple[tuple[int, float], ...] = ((64, 0.5), (128, 0.5))
    shared_prefix_ratio: float = 0.3
    shared_prefix_tokens: int = 256
    prefix_groups: int = 4
    timeout_s: float = 120.0
    retries: int = 0
    #: closed loop: spread the clients' first requests over this many model seconds
    ramp_up_s: float = 0.0
    stream: bool = True
    #: closed loop driven in model time: the simulator holds its clock until an answered client is back
    #: (exporter/simulator/lockstep.py). Off where the scenario's evidence is the scheduler thread's real
    #: CPU (host_bound: a thread that waits for clients is not at a full core, whatever the model says)
    #: or clients that time out and retry (queue_backlog)
    lockstep: bool = True


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    #: what the simulator's own outputs show (the tests assert it)
    signature: str
    settings: dict[str, Any] = field(default_factory=dict)
    load: LoadProfile = field(default_factory=LoadProfile)
    #: launch settings given as command-line flags (vLLM spellings, which the simulator shares), not
    #: applied by ``config``: the exporter reads an engine's launch settings from its command line
    #: (/proc/PID/cmdline, --engine-pid; exporter/engines/settings.py), never from the simulator's
    #: state, so a setting the diagnosis must see is started as a flag: ``simulate --scenario NAME
    #: *launch`` (and ``tune`` changes it there, as on a real engine)
    launch: tuple[str, ...] = ()
    #: the engine dialect whose behaviour the scenario shows (``simulate --dialect``); None: any
    dialect: str | None = None

    def config(self, base: SimConfig | None = None, overrides: dict[str, Any] | None = None) -> SimConfig:
        """``base`` (defaults) with this scenario's settings, then explicit ``overrides`` on top."""
        cfg = apply_overrides(base or SimConfig(), self.settings)
        return apply_overrides(cfg, overrides or {})

    def launch_settings(self) -> dict[str, str]:
        """``launch`` as settings (``--enforce-eager true`` -> ``{"enforce_eager": "true"}``), for an
        in-process simulator that has no command line."""
        flags = list(self.launch)
        if len(flags) % 2 or not all(f.startswith("--") for f in flags[::2]):
            raise ValueError(f"scenario {self.name}: launch flags must be --flag value pairs, got {flags}")
        return {f[2:].replace("-", "_"): v for f, v in zip(flags[::2], flags[1::2])}

    def load_spec(
        self,
        base_url: str,
        time_scale: float = 1.0,
        duration_s: float | None = None,
        max_requests: int | None = None,
        seed: int = 0,
        model: str | None = None,
        model_time_rate: bool = False,
    ) -> LoadSpec:
        """The load generator settings for this scenario; wall-clock values follow ``time_scale``.

        ``model_time_rate``: the load is driven in the simulator's model time: the arrival rate
        stays per model second, for a load paced on the simulator's model clock
        (``exporter/simulator/pacing.py``; otherwise it is per wall second, the model rate times
        ``time_scale``), client timeouts count model seconds on that clock, and closed-loop clients
        name themselves so the simulator holds its model clock until an answered client is back
        (``exporter/simulator/lockstep.py``)."""
        p = self.load
        return LoadSpec(
            base_url=base_url,
            model=model,
            concurrency=p.concurrency,
            rate=None if p.rate is None else p.rate * (1.0 if model_time_rate else time_scale),
            prompt_tokens=p.prompt_tokens,
            max_tokens=p.max_tokens,
            shared_prefix_ratio=p.shared_prefix_ratio,
            shared_prefix_tokens=p.shared_prefix_tokens,
            prefix_groups=p.prefix_groups,
            timeout_s=p.timeout_s if model_time_rate else p.timeout_s / time_scale,
            timeout_on_clock=model_time_rate,
            retries=p.retries,
            retry_backoff_s=0.2 / time_scale,
            ramp_up_s=p.ramp_up_s / time_scale,
            stream=p.stream,
            duration_s=duration_s,
            max_requests=max_requests,
            seed=seed,
            client_header=lockstep.HEADER if model_time_rate and p.rate is None and p.lockstep else None,
        )


#: an overload of mixed requests (about 580 tokens each at most 896): 64 of them fill a 3584-block
#: KV cache to 60-80 %, neither slots-with-free-memory nor a full cache
_MIXED_PROMPTS = ((384, 0.3), (512, 0.4), (640, 0.3))
_MIXED_OUTPUTS = ((64, 0.3), (128, 0.4), (192, 0.3))

_SCENARIOS: list[Scenario] = [
    Scenario(
        "healthy",
        "moderate open-loop load well inside every limit",
        "no preemptions, waiting near 0, KV usage low, GPU partly idle, no throttling",
        {},
        # ~1 request/s of 64-128 tokens: the GPU decodes about a quarter of the time
        LoadProfile(concurrency=16, rate=1.0, max_tokens=((64, 0.5), (96, 0.5))),
    ),
    Scenario(
        "healthy_busy",
        "heavy but sustainable load: 64 long-context decodes keep HBM busy while every SLO is met",
        "DRAM active high, GPU util high, ITL and TTFT well inside the SLOs, nothing waiting",
        {"num_gpu_blocks": 16384, "max_num_seqs": 128, "max_num_batched_tokens": 8192},
        # the old memory_bandwidth_bound load: the decode shape of a busy, healthy server
        LoadProfile(
            concurrency=64,
            prompt_tokens=((7168, 1.0),),
            max_tokens=((512, 1.0),),
            shared_prefix_ratio=1.0,
            shared_prefix_tokens=7040,
            prefix_groups=1,
        ),
    ),
    Scenario(
        "shared_prefix",
        "a chat service whose prompts open with one long shared system prompt: the prefix cache serves most of each",
        "prefix-cache hit ratio near 90 % of prompt tokens, TTFT a few tens of model ms, nothing waiting; after POST "
        '/sim/prefix_cache {"shared": false} (every request salted) hits fall to 0 and TTFT grows several-fold; '
        'after {"enabled": false} nothing is looked up any more, with the same TTFT',
        # one step holds a whole prompt: a request waits at most for the step running when it arrives, so
        # recomputed prompts raise TTFT without a queue
        {"max_num_batched_tokens": 8192},
        # one request per model second of 4,096 tokens, 3,584 of them the shared system prompt: cached, a
        # prompt prefills 512 tokens; with sharing broken all 4,096
        LoadProfile(
            concurrency=16,
            rate=1.0,
            prompt_tokens=((4096, 1.0),),
            max_tokens=((32, 1.0),),
            shared_prefix_ratio=1.0,
            shared_prefix_tokens=3584,
            prefix_groups=1,
        ),
    ),
    Scenario(
        "kv_pressure",
        "KV cache far too small for the concurrent sequences: a preemption storm",
        "preemptions rising, waiting > 0, KV usage near 1",
        {"num_gpu_blocks": 768, "max_num_seqs": 64},
        LoadProfile(concurrency=48, prompt_tokens=((512, 1.0),), max_tokens=((512, 1.0),), shared_prefix_ratio=0.0),
    ),
    Scenario(
        "kv_fragmentation",
        "admission reserves prompt + max_tokens per request while outputs stop early",
        "requests waiting while KV usage stays well below full, no preemptions",
        {"num_gpu_blocks": 2048, "kv_reserve_full": True, "stop_probability": 0.005},
        LoadProfile(concurrency=48, prompt_tokens=((256, 1.0),), max_tokens=((2048, 1.0),), shared_prefix_ratio=0.0),
    ),
    Scenario(
        "host_bound",
        "a serial scheduler loop with heavy per-request CPU work (the serving.csv decode phases)",
        "one scheduler thread near 100 % of a core, SM active < 30 %, queue growing",
        {"host_base_s": 0.002, "host_per_seq_s": 0.0004, "max_num_seqs": 64},
        LoadProfile(
            concurrency=96, prompt_tokens=((128, 1.0),), max_tokens=((256, 1.0),), shared_prefix_ratio=0.0, lockstep=False
        ),
    ),
    Scenario(
        "memory_bandwidth_bound",
        "long-context decode of 128 sequences on a bandwidth-poor GPU (200 GB/s): every step streams weights and KV",
        "GPU busy, DRAM active high, tensor active low, ITL p95 over the 0.2 s SLO, nothing waiting",
        {"num_gpu_blocks": 16384, "max_num_seqs": 192, "max_num_batched_tokens": 8192, "hbm_gb_s": 200.0},
        # one long shared document: prefill is mostly prefix-cache hits, decode reads ~7k tokens of KV per sequence
        LoadProfile(
            concurrency=128,
            prompt_tokens=((7168, 1.0),),
            max_tokens=((512, 1.0),),
            shared_prefix_ratio=1.0,
            shared_prefix_tokens=7040,
            prefix_groups=1,
        ),
    ),
    Scenario(
        "power_throttled",
        "board power limit lowered to 400 W while more clients arrive than the batch holds",
        "throttle reason 0x4 (SW power cap), SM clock well below max, power at the cap, requests queue",
        # the KV cache sized for the batch (about 75 % used at 64 running): slots, not memory, fill.
        # Twice the batch in clients: the 64 waiting need 4,608 free blocks to be admitted where 1,536
        # are free, so the queue is the slow clock's, not "slots with memory to spare". With 96 clients
        # a host too busy to send each client's next request at once left a few waiting that the free
        # blocks would hold, and the verdict rightly became the slots (found as a flaky primary in CI)
        {"power_limit_w": 400.0, "num_gpu_blocks": 6144},
        LoadProfile(concurrency=128, prompt_tokens=((1024, 1.0),), max_tokens=((128, 1.0),), shared_prefix_ratio=0.0),
    ),
    Scenario(
        "pcie_bound",
        "prefix cache offloaded to host memory over a narrow PCIe link: every hit is a copy",
        "NVML GPU util high while SM active is low, PCIe receive traffic high",
        {"kv_offload": True, "pcie_mib_s": 8000.0, "num_cpu_blocks": 16384},
        LoadProfile(
            concurrency=32,
            prompt_tokens=((6144, 1.0),),
            max_tokens=((16, 1.0),),
            shared_prefix_ratio=1.0,
            shared_prefix_tokens=6016,
            prefix_groups=8,
            # whole answers, as a batch job of long documents asks for them: the diagnosis reads the
            # engine's own histograms either way, and at ~110 requests/s (time scale 4) streaming cost
            # the load generator 4.9 ms a request against 2.8 ms, CPU that a 2-core host then took
            # from the simulator, whose queue emptied (found as a flaky primary in CI)
            stream=False,
        ),
    ),
    Scenario(
        "low_spec_acceptance",
        "speculative decoding whose drafts are mostly rejected, under more clients than the batch holds",
        "spec acceptance rate (accepted / draft tokens) far below 0.5, throughput saturated, requests queue",
        {"spec_tokens": 4, "spec_acceptance": 0.2, "spec_draft_cost": 0.1, "num_gpu_blocks": 3584},
        # mixed lengths and staggered starts: the clients do not finish (and return) in lock-step waves
        LoadProfile(
            concurrency=160, prompt_tokens=_MIXED_PROMPTS, max_tokens=_MIXED_OUTPUTS, shared_prefix_ratio=0.0, ramp_up_s=8.0
        ),
    ),
    Scenario(
        "tp_imbalance",
        "one GPU of a 4-way tensor-parallel group does 2.5x the work of the others, under more clients than it serves",
        "SM active of GPU 0 far above the other GPUs (max / mean skew > 1.5), requests queue",
        {"gpus": 4, "tp_imbalance": 2.5, "num_gpu_blocks": 3584},
        LoadProfile(
            concurrency=160, prompt_tokens=_MIXED_PROMPTS, max_tokens=_MIXED_OUTPUTS, shared_prefix_ratio=0.0, ramp_up_s=8.0
        ),
    ),
    Scenario(
        "batching_window",
        "the scheduler holds new requests for a 0.8 s batching window",
        "TTFT high (mostly queue time) while the GPU idles",
        {"batch_wait_s": 0.8},
        LoadProfile(concurrency=8, rate=3.0, prompt_tokens=((256, 1.0),), max_tokens=((32, 1.0),), shared_prefix_ratio=0.0),
    ),
    Scenario(
        "queue_backlog",
        "a server sized right (batch and KV cache matched, both well used) under more clients than it serves",
        "waiting near the queue limit, aborts (client timeouts) and 429 rejections piling up, no layer at its limit",
        # 8 slots and a KV cache that holds them at 60-80 %: neither slots-with-free-memory nor a full cache
        {"max_num_seqs": 8, "max_queue_len": 64, "num_gpu_blocks": 480},
        LoadProfile(
            concurrency=96,
            prompt_tokens=((512, 1.0),),
            max_tokens=((256, 1.0),),
            shared_prefix_ratio=0.0,
            timeout_s=6.0,
            retries=2,
            ramp_up_s=3.0,
            # its evidence is the clients' timeouts and retries: with the model clock held for returning
            # clients, a client that times out is out of the engine while the clock waits for it, so the
            # timeouts, not the backlog, become the story. Its timeouts count model seconds on the pacing
            # clock (LoadSpec.timeout_on_clock), so a starved host does not turn them into more aborts
            lockstep=False,
        ),
    ),
]

# ---------------------------------------------------------------- launch settings against what the engine sees (issue 23)
_SCENARIOS += [
    Scenario(
        "eager_decode",
        "CUDA graphs off (started with --enforce-eager true): every decode step launches its kernels one by one",
        "steps about twice as long as with graphs, SM active near 35 % while stepping, ITL doubled; the exporter "
        "reads enforce_eager from the command line",
        {},
        # a decode-dominated closed loop: short prompts, long outputs
        LoadProfile(concurrency=16, prompt_tokens=((128, 1.0),), max_tokens=((256, 1.0),), shared_prefix_ratio=0.0),
        launch=("--enforce-eager", "true"),
    ),
    Scenario(
        "long_prompts_small_chunk",
        "12k-token prompts under a 128-token per-step budget (started with --max-num-batched-tokens 128)",
        "prompt p90 near 100 step budgets: each prompt prefills over ~94 memory-bound steps before its first token",
        {"max_model_len": 16384},
        LoadProfile(concurrency=4, prompt_tokens=((12000, 1.0),), max_tokens=((32, 1.0),), shared_prefix_ratio=0.0),
        # small enough that each chunk streams the weights (memory-bound), not a compute-bound prefill
        launch=("--max-num-batched-tokens", "128"),
    ),
    Scenario(
        "over_reserved_context",
        "llama.cpp-style slots (dialect llamacpp): a 32k-token KV cache split into 4 slots of 8192 while "
        "requests use under 400 tokens (started with --max-model-len 8192)",
        "all 4 slots busy and requests deferred while the slots' context is about 4 % used; /props reports "
        "total_slots 4 and n_ctx 8192 per slot",
        # 2048 blocks x 16 = 32768 tokens of KV: 4 slots of 8192 in full (exporter/simulator/dialects/llamacpp.py)
        {"num_gpu_blocks": 2048},
        LoadProfile(concurrency=16, prompt_tokens=((256, 1.0),), max_tokens=((128, 1.0),), shared_prefix_ratio=0.0),
        launch=("--max-model-len", "8192"),
        dialect="llamacpp",
    ),
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in _SCENARIOS}
NAMES: tuple[str, ...] = tuple(SCENARIOS)


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; expected one of {', '.join(NAMES)}") from None
