"""The knob tables: per engine, per cause id, the knob group, the candidate moves with bounds, and why.

Why data, like exporter/engines/mappings/: the tuner never tries a knob blindly;
the primary cause at the knee picks an entry here, and a test checks that every
cause id of exporter/diagnosis/rules.py has, for every engine, either moves or an
explicit "no knob" entry (``limit``: the hardware limit, capacity, or an outage).
Each move cites the section of docs/tune.md (knob reference) that quotes the
engine's own documentation for that flag.

Groups follow the method's order (docs/tune.md): ``resource`` (memory ceiling,
maximum concurrency) before ``strategy`` (batching, scheduling) before
``optimisation`` (graph capture, compilation, cache policy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GROUPS: tuple[str, ...] = ("resource", "strategy", "optimisation")
#: what a "no knob" entry says stops the search
LIMITS: tuple[str, ...] = ("hardware", "capacity", "outage")
ENGINES: tuple[str, ...] = ("vllm", "sglang", "tgi", "trtllm", "llamacpp", "simulator")
#: the ``op`` of a move: multiply, add, set a value, add a boolean flag, drop a boolean flag
OPS: tuple[str, ...] = ("mul", "add", "set", "on", "off")
#: a move whose ``when`` is this is tried only while the running requests fill the slots
SLOTS_FULL = "slots_full"

HARDWARE_STOP = "the engine runs at its hardware limit; no flag will help — scale out"
CAPACITY_STOP = "every layer has headroom: the service gets more load than it serves; no flag will help — add replicas"
OUTAGE_STOP = "the engine stopped answering: an outage, not a setting; restart it and file a dump (docs/diagnosis.md)"
STOPS = {"hardware": HARDWARE_STOP, "capacity": CAPACITY_STOP, "outage": OUTAGE_STOP}


@dataclass(frozen=True)
class Move:
    """One candidate change of one flag (or environment variable)."""

    flag: str
    op: str
    #: factor (mul), addend (add), value (set); unused for on/off
    by: float | str | None = None
    low: float | None = None
    high: float | None = None
    #: the engine's value when the flag is absent (None: the move needs the flag present)
    default: float | str | None = None
    #: a flag scaled by the same ratio (llama.cpp: -c with -np keeps the context per slot)
    couple: str | None = None
    when: str | None = None
    #: the section of docs/tune.md citing the engine's documentation of this knob
    doc: str = ""
    #: an environment variable of the engine process, not a command-line flag
    env: bool = False
    integer: bool = True


@dataclass(frozen=True)
class Knob:
    """What to change for one cause on one engine; ``limit`` set means no knob (the search stops)."""

    group: str
    reason: str
    moves: tuple[Move, ...] = ()
    limit: str | None = None


def _hw(why: str) -> Knob:
    return Knob("none", f"no knob: hardware limit — {why}", limit="hardware")


def _cap(why: str) -> Knob:
    return Knob("none", f"no knob: capacity — {why}", limit="capacity")


#: the causes no engine flag changes, the same on every engine
_COMMON: dict[str, Knob] = {
    "compute_bound": _hw("the GPU's math units are busy at the knee"),
    "memory_bandwidth_bound": _hw("every decode step streams weights and KV at the GPU's memory bandwidth"),
    "power_or_thermal_throttling": _hw("the board's power or thermal limit sets the clock, not the engine"),
    "gpu_imbalance": _hw("one GPU of the group does more work: placement and topology, not an engine flag"),
    "tensor_cores_unused": _hw("the kernels the model's dtype selects; a different model build, not a flag"),
    "queue_backlog": _cap("a symptom with no cause behind it"),
    "slo_breach": _cap("a symptom with no cause behind it"),
    "retries_and_timeouts": _cap("clients give up and retry; their timeouts, not the engine's flags"),
    "front_end_overhead": _cap("time spent in front of the engine (gateway, proxy, network)"),
    "capacity_nearly_used": _cap("load at or past the capacity the profile measured: replicas, not flags"),
    "engine_unresponsive": Knob("none", "no knob: outage — the engine accepts requests but answers none", limit="outage"),
    "memory_capacity_exhausted": _hw("the framebuffer is full: a smaller model, quantised weights or more GPUs"),
    "pcie_transfer_bound": _hw("host<->device copies at the link's bandwidth"),
    "launch_bound_small_kernels": _hw("no graph-capture flag on this engine"),
    "serial_host_ceiling": _hw("no flag adds host threads on this engine"),
    "low_acceptance": _hw("no speculative-decoding flag on this engine"),
    "cuda_graphs_not_covering_batches": _hw("no graph-capture flag on this engine"),
}

_V = "docs/tune.md#vllm"
_S = "docs/tune.md#sglang"
_T = "docs/tune.md#tgi"
_R = "docs/tune.md#trtllm-serve"
_L = "docs/tune.md#llamacpp"
_M = "docs/tune.md#simulator"

_VLLM: dict[str, Knob] = {
    "context_reserved_not_used": Knob(
        "resource",
        "each sequence reserves the configured maximum context, far above what requests use: a shorter one",
        (Move("--max-model-len", "mul", 0.5, low=256, doc=_V),),
    ),
    "prefill_chunk_too_small": Knob(
        "strategy",
        "prompts are prefilled over many steps: a larger per-step token budget",
        (Move("--max-num-batched-tokens", "mul", 2, high=65536, default=2048, doc=_V),),
    ),
    "cuda_graphs_not_covering_batches": Knob(
        "optimisation",
        "the decode runs eager or above the largest captured graph: graphs on, larger capture sizes",
        (
            Move("--enforce-eager", "off", doc=_V),
            Move("--max-cudagraph-capture-size", "mul", 2, high=2048, default=512, doc=_V),
        ),
    ),
    "kv_cache_pressure": Knob(
        "resource",
        "the KV cache is full or preempting: give it more memory, or run fewer sequences",
        (
            Move("--gpu-memory-utilization", "add", 0.05, high=0.95, default=0.9, doc=_V, integer=False),
            Move("VLLM_CPU_KVCACHE_SPACE", "mul", 2, high=64, doc=_V, env=True),
            Move("--num-gpu-blocks-override", "mul", 2, high=1 << 20, doc=_V),
            Move("--kv-cache-dtype", "set", "fp8", default="auto", doc=_V),
            Move("--max-num-seqs", "mul", 0.5, low=1, default=256, doc=_V),
            Move("--max-model-len", "mul", 0.5, low=256, doc=_V),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while the KV cache is mostly free: more sequence slots, or a finer block size",
        (
            Move("--max-num-seqs", "mul", 2, high=1024, default=256, when=SLOTS_FULL, doc=_V),
            Move("--max-num-batched-tokens", "mul", 2, high=65536, default=2048, doc=_V),
            Move("--block-size", "mul", 0.5, low=8, default=16, doc=_V),
            Move("--max-model-len", "mul", 0.5, low=256, doc=_V),
        ),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "prefill waits behind long chunks: chunked prefill with a smaller per-step token budget",
        (
            Move("--enable-chunked-prefill", "on", doc=_V),
            Move("--max-num-batched-tokens", "mul", 0.5, low=512, default=2048, doc=_V),
        ),
    ),
    "serial_host_ceiling": Knob(
        "strategy",
        "one host thread at a core caps every step: more API-server processes, async scheduling",
        (Move("--api-server-count", "mul", 2, high=16, default=1, doc=_V), Move("--async-scheduling", "on", doc=_V)),
    ),
    "front_end_overhead": Knob(
        "strategy",
        "the API server delays the first token: more API-server processes",
        (Move("--api-server-count", "mul", 2, high=16, default=1, doc=_V),),
    ),
    "launch_bound_small_kernels": Knob(
        "optimisation",
        "many small kernel launches per step: capture CUDA graphs, compile",
        (Move("--enforce-eager", "off", doc=_V), Move("-O", "set", "3", default="0", doc=_V)),
    ),
    "pcie_transfer_bound": Knob(
        "optimisation",
        "copies over PCIe: reuse prompt prefixes on the GPU instead of recomputing or moving them",
        (Move("--enable-prefix-caching", "on", doc=_V),),
    ),
}

_SGLANG: dict[str, Knob] = {
    "context_reserved_not_used": Knob(
        "resource",
        "requests use far less than the configured context: a shorter context length",
        (Move("--context-length", "mul", 0.5, low=256, doc=_S),),
    ),
    "prefill_chunk_too_small": Knob(
        "strategy",
        "prompts are prefilled over many chunks: larger chunks",
        (Move("--chunked-prefill-size", "mul", 2, high=65536, default=8192, doc=_S),),
    ),
    "cuda_graphs_not_covering_batches": Knob(
        "optimisation",
        "batches run above the largest captured graph: graphs on, capture larger batches",
        (Move("--disable-cuda-graph", "off", doc=_S), Move("--cuda-graph-max-bs", "mul", 2, high=1024, default=160, doc=_S)),
    ),
    "kv_cache_pressure": Knob(
        "resource",
        "the KV pool is full: a larger static memory fraction, or fewer running requests",
        (
            Move("--mem-fraction-static", "add", 0.05, high=0.95, default=0.85, doc=_S, integer=False),
            Move("--max-running-requests", "mul", 0.5, low=1, doc=_S),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while the KV pool is mostly free: allow more running requests",
        (Move("--max-running-requests", "mul", 2, high=4096, default=128, when=SLOTS_FULL, doc=_S),),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "the first token waits for large prefill chunks: smaller chunks, prefix-aware scheduling",
        (
            Move("--chunked-prefill-size", "mul", 0.5, low=512, default=8192, doc=_S),
            Move("--schedule-policy", "set", "lpm", default="fcfs", doc=_S),
        ),
    ),
    "launch_bound_small_kernels": Knob(
        "optimisation",
        "small decode batches launch kernel by kernel: capture CUDA graphs for larger batches",
        (Move("--disable-cuda-graph", "off", doc=_S), Move("--cuda-graph-max-bs", "mul", 2, high=1024, default=160, doc=_S)),
    ),
}

_TGI: dict[str, Knob] = {
    "context_reserved_not_used": Knob(
        "resource",
        "requests use far less than the configured total tokens: a smaller per-request maximum",
        (Move("--max-total-tokens", "mul", 0.5, low=256, doc=_T),),
    ),
    "prefill_chunk_too_small": Knob(
        "strategy",
        "prompts are prefilled over many steps: a larger prefill token budget",
        (Move("--max-batch-prefill-tokens", "mul", 2, high=65536, default=4096, doc=_T),),
    ),
    "kv_cache_pressure": Knob(
        "resource",
        "the token budget of the batch is exhausted: more CUDA memory, or fewer concurrent requests",
        (
            Move("--cuda-memory-fraction", "add", 0.05, high=1.0, default=0.95, doc=_T, integer=False),
            Move("--max-concurrent-requests", "mul", 0.5, low=1, default=128, doc=_T),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while memory is free: a larger batch token budget",
        (Move("--max-batch-total-tokens", "mul", 2, high=1 << 22, doc=_T),),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "new requests wait for the running batch: let waiting requests in sooner",
        (
            Move("--waiting-served-ratio", "mul", 0.5, low=0.05, default=0.3, doc=_T, integer=False),
            Move("--max-waiting-tokens", "mul", 0.5, low=1, default=20, doc=_T),
        ),
    ),
}

_TRTLLM: dict[str, Knob] = {
    "context_reserved_not_used": Knob(
        "resource",
        "requests use far less than the configured sequence length: a shorter maximum",
        (Move("--max_seq_len", "mul", 0.5, low=256, doc=_R),),
    ),
    "prefill_chunk_too_small": Knob(
        "strategy",
        "prompts are prefilled over many steps: a larger per-step token budget",
        (Move("--max_num_tokens", "mul", 2, high=65536, default=8192, doc=_R),),
    ),
    "kv_cache_pressure": Knob(
        "resource",
        "the KV cache is full: a larger free-memory fraction for it, or a smaller batch",
        (
            Move("--kv_cache_free_gpu_memory_fraction", "add", 0.05, high=0.95, default=0.9, doc=_R, integer=False),
            Move("--max_batch_size", "mul", 0.5, low=1, default=2048, doc=_R),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while the KV cache is free: a larger batch and token budget",
        (
            Move("--max_batch_size", "mul", 2, high=4096, default=2048, when=SLOTS_FULL, doc=_R),
            Move("--max_num_tokens", "mul", 2, high=65536, default=8192, doc=_R),
        ),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "prefill waits behind large token budgets: a smaller per-step token budget",
        (Move("--max_num_tokens", "mul", 0.5, low=512, default=8192, doc=_R),),
    ),
}

_LLAMACPP: dict[str, Knob] = {
    "context_reserved_not_used": Knob(
        "resource",
        "each slot holds -c / -np of context, far above what requests use: more slots in the same -c",
        (Move("-np", "mul", 2, high=64, default=1, doc=_L),),
    ),
    "prefill_chunk_too_small": Knob(
        "strategy",
        "prompts are processed over many logical batches: a larger -b",
        (Move("-b", "mul", 2, high=8192, default=2048, doc=_L),),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "every slot is busy while the context has room: more slots, -c scaled so each keeps its context",
        (
            # x4, the first step issue 21 names (-np 1 -> 4): a slot is cheap, and a doubling would need
            # three trials to reach the clients a server is usually sized for
            Move("-np", "mul", 4, high=64, default=1, couple="-c", when=SLOTS_FULL, doc=_L),
            Move("-ub", "mul", 2, high=4096, default=512, doc=_L),
        ),
    ),
    "kv_cache_pressure": Knob(
        "resource",
        "the slots' context is full: a quantised KV cache (needs flash attention), or fewer slots",
        (
            Move("--cache-type-k", "set", "q8_0", default="f16", doc=_L),
            Move("--cache-type-v", "set", "q8_0", default="f16", doc=_L),
            Move("-np", "mul", 0.5, low=1, default=1, couple="-c", doc=_L),
        ),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "prompts are processed in small logical batches: a larger -b",
        (Move("-b", "mul", 2, high=8192, default=2048, doc=_L),),
    ),
    "serial_host_ceiling": Knob(
        "strategy",
        "generation is bound by the host threads doing the math: more threads",
        (Move("-t", "mul", 2, high=256, default=4, doc=_L),),
    ),
    "launch_bound_small_kernels": Knob(
        "optimisation",
        "attention runs as many small kernels: flash attention, a larger physical batch",
        (Move("-fa", "set", "on", default="auto", doc=_L), Move("-ub", "mul", 2, high=4096, default=512, doc=_L)),
    ),
}

_SIMULATOR: dict[str, Knob] = {
    "cuda_graphs_not_covering_batches": Knob(
        "optimisation",
        "the decode runs eager or above the largest captured graph: graphs on, larger capture sizes",
        (
            Move("--enforce-eager", "set", "false", default="false", doc=_M),
            Move("--max-cudagraph-capture-size", "mul", 2, high=4096, default=512, doc=_M),
        ),
    ),
    "context_reserved_not_used": Knob(
        "resource",
        "each sequence reserves far more context than requests use: a shorter maximum length",
        (Move("--max-model-len", "mul", 0.5, low=256, doc=_M),),
    ),
    "prefill_chunk_too_small": Knob(
        "strategy",
        "prompts are prefilled over many steps: a larger per-step token budget",
        (Move("--max-num-batched-tokens", "mul", 2, high=65536, doc=_M),),
    ),
    "kv_cache_pressure": Knob(
        "resource",
        "the KV cache is full or preempting: more KV blocks, or fewer sequences",
        (
            Move("--num-gpu-blocks", "mul", 2, high=1 << 20, default=4096, doc=_M),
            Move("--max-num-seqs", "mul", 0.5, low=1, default=64, doc=_M),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while the KV cache is mostly free: more slots, or more blocks for what admission reserves",
        (
            Move("--max-num-seqs", "mul", 2, high=4096, default=64, when=SLOTS_FULL, doc=_M),
            Move("--num-gpu-blocks", "mul", 2, high=1 << 20, default=4096, doc=_M),
            Move("--kv-reserve-full", "set", "false", default="false", doc=_M),
        ),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "new requests are held for the batching window: a shorter window",
        (Move("--batch-wait-s", "mul", 0.25, low=0.0, default=0.0, doc=_M, integer=False),),
    ),
    "serial_host_ceiling": Knob(
        "strategy",
        "the host loop serialises every step: overlap it with the GPU (async scheduling)",
        (Move("--overlap-host", "set", "true", default="true", doc=_M),),
    ),
    "pcie_transfer_bound": Knob(
        "optimisation",
        "prefix-cache hits are copied over PCIe: keep the prefix cache on the GPU",
        (Move("--kv-offload", "set", "false", default="false", doc=_M),),
    ),
    "low_acceptance": Knob(
        "optimisation",
        "most draft tokens are rejected: draft fewer",
        (Move("--spec-tokens", "mul", 0.5, low=0, default=0, doc=_M),),
    ),
}

TABLES: dict[str, dict[str, Knob]] = {
    name: {**_COMMON, **table}
    for name, table in (
        ("vllm", _VLLM),
        ("sglang", _SGLANG),
        ("tgi", _TGI),
        ("trtllm", _TRTLLM),
        ("llamacpp", _LLAMACPP),
        ("simulator", _SIMULATOR),
    )
}


@dataclass
class Lookup:
    """The table entry for (engine, cause); a cause the table does not know is a capacity stop."""

    knob: Knob
    known: bool = True
    notes: list[str] = field(default_factory=list)


def lookup(engine: str, cause: str) -> Lookup:
    table = TABLES[engine]
    if cause in table:
        return Lookup(table[cause])
    return Lookup(_cap(f"cause {cause!r} has no entry in the {engine} knob table"), known=False)


def group_rank(group: str) -> int:
    return GROUPS.index(group) if group in GROUPS else len(GROUPS)


__all__ = ["ENGINES", "GROUPS", "HARDWARE_STOP", "LIMITS", "STOPS", "TABLES", "Knob", "Move", "group_rank", "lookup"]
