"""The knob tables: per engine, per cause id, the knob group, the candidate moves with bounds, and why.

Why data, like exporter/engines/mappings/: the tuner never tries a knob blindly;
the primary cause at the knee picks an entry here, and a test checks that every
cause id of exporter/diagnosis/rules.py has, for every engine, either moves or an
explicit "no knob" entry (``limit``: the hardware limit, capacity, an outage, or no
move for this cause on this engine). Each move cites the section of docs/tune.md
(knob reference) that quotes the engine's own documentation for that flag.

Why a fourth stop kind (``no_move``, issue 32): "no flag will help" is true only of
the GPU at its compute, bandwidth or power limit. Where the diagnosis advises
something the tuner cannot do by itself (a draft closer to the target, pinned host
memory, graphs on an engine whose capture is set in a file), the stop quotes that
advice, fragment by fragment and word for word from rules.py (``advice``; a test
checks the quote), and says the tuner has no automatic move, instead of telling
the operator to scale out while the diagnosis names a flag.

Flag spellings, and where a move was left out (a stop with the advice instead of a
flag the tuner could not stand behind):

* TGI ``--cuda-graphs``: a comma-separated list of batch sizes, "0" off, default
  ``1,2,4,8,16,32`` (launcher reference). Moves set a doubling list, each only when it
  reaches past the largest size the engine runs with (``LARGER_CAPTURE``): a list the
  operator wrote is never shrunk.
* Speculative decoding (op ``draft``): vLLM ``--speculative-config`` (or ``-sc``) JSON,
  key ``num_speculative_tokens``, or its shorthand ``--spec-tokens`` (vLLM 0.32's
  arg_utils; the two are mutually exclusive; the old ``--num-speculative-tokens`` is gone);
  SGLang ``--speculative-num-steps`` (with ``--speculative-eagle-topk 1`` SGLang sets
  ``--speculative-num-draft-tokens`` to steps + 1 itself); llama.cpp
  ``--spec-draft-n-max`` (builds since the rename; the cached b11434 rejects the old
  name) or ``--draft-max``/``--draft``/``--draft-n`` (older builds); the simulator
  ``--spec-tokens``. Only a length already on the command line is changed (llama.cpp's
  default differs by build, vLLM derives one from the draft model): the draft model,
  method and drafting on/off stay the operator's. TGI ``--speculate`` and
  trtllm-serve's ``speculative_config`` (an ``--extra_llm_api_options`` file) are not
  moved: TGI reports no draft-token count to judge acceptance by, and a file is not a flag.
* API-server processes and host threads: vLLM ``--api-server-count``, SGLang
  ``--tokenizer-worker-num`` (default 1), TGI ``--validation-workers`` (the router's
  tokenizer workers, default 2), llama.cpp ``-t``. trtllm-serve's
  ``--num_postprocess_workers`` is marked a prototype in its reference: left out.

Why some "no knob" entries carry moves of their own (``Knob.before``, issue 33): the GPU at its
bandwidth or compute limit, a group waiting on its link or on one GPU, still leave the engine a
setting worth one measurement — a larger running batch, an FP8 KV cache, a longer draft where the
acceptance pays, the quantised build the deployment names, another layout inside the same GPUs
(exporter/tune/layout.py), the engine's own balancing. They are tried first; the entry's stop,
unchanged, ends the search once none applies. Each names its trade, throughput per GPU against
latency per user (``TRADE_*``), which tune.json and report.md carry. Spellings, verified against the
engines' references (docs/tune.md, "Layouts and GPU-bound causes"): vLLM ``--tensor-parallel-size``,
``--data-parallel-size``, ``--pipeline-parallel-size``, ``--enable-eplb`` (with
``--enable-expert-parallel``); SGLang ``--tp-size``, ``--dp-size``, ``--pp-size``, ``--enable-eplb``,
``--load-balance-method``, ``--kv-cache-dtype fp8_e5m2``; TGI ``--num-shard`` (no replicas or stages
in one launcher), ``--kv-cache-dtype fp8_e5m2``; trtllm-serve ``--tp_size``, ``--pp_size`` (its
KV-cache dtype, attention DP and expert balancing live in the ``--extra_llm_api_options`` file, not
flags); llama.cpp ``--split-mode``.

Groups follow the method's order (docs/tune.md): ``resource`` (memory ceiling,
maximum concurrency) before ``strategy`` (batching, scheduling) before
``optimisation`` (graph capture, compilation, cache policy).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

GROUPS: tuple[str, ...] = ("resource", "strategy", "optimisation")
#: the stop kind of a cause the engine has no move for: the sentence quotes the diagnosis's advice
NO_MOVE = "no_move"
#: what a "no knob" entry says stops the search
LIMITS: tuple[str, ...] = ("hardware", "capacity", "outage", NO_MOVE)
ENGINES: tuple[str, ...] = ("vllm", "sglang", "tgi", "trtllm", "llamacpp", "simulator")
#: a move that sets the speculative draft length to what the measured acceptance pays for (decide.py)
DRAFT = "draft"
#: a move that lengthens the draft to the positions the measured acceptance pays for (a memory-bound decode)
DRAFT_MORE = "draft_more"
#: a layout move (exporter/tune/layout.py): the tensor-parallel size (``flag``) times ``by``; a ``couple``
#: dimension (data or pipeline parallel) divided by it, so the GPUs stay; without one the GPUs change with TP
LAYOUT = "layout"
#: a move that serves the quantised build the deployment names (``tune --quantized-model PATH``) instead of the model
QUANTISED = "quantised"
#: the ``op`` of a move: multiply, add, set a value, add a boolean flag, drop a boolean flag, the draft length
#: (shorter; longer), the layout, the quantised build
OPS: tuple[str, ...] = ("mul", "add", "set", "on", "off", DRAFT, DRAFT_MORE, LAYOUT, QUANTISED)
#: a move whose ``when`` is this is tried only while the running requests fill the slots
SLOTS_FULL = "slots_full"
#: a move whose ``when`` is this is tried only when its list of captured batch sizes reaches past the current one
LARGER_CAPTURE = "larger_capture"
#: ... only when the running requests were measured filling the slots and the KV cache at most half full at and
#: beyond the knee (twice the sequences fit): a larger running batch on a memory-bound decode
BATCH_ROOM = "batch_room"
#: ... only when the KV cache was not full at and beyond the knee (unknown: not full): fewer tensor-parallel ranks
#: and more replicas hold more copies of the weights and so less KV in all
KV_NOT_FULL = "kv_not_full"
#: ... only when the command runs expert parallelism (vLLM --enable-expert-parallel, SGLang --ep-size above 1)
EXPERT_PARALLEL = "expert_parallel"
#: ... only when the command runs two or more data-parallel replicas
DATA_PARALLEL = "data_parallel"

HARDWARE_STOP = "the engine runs at its hardware limit; no flag will help — scale out"
CAPACITY_STOP = "every layer has headroom: the service gets more load than it serves; no flag will help — add replicas"
OUTAGE_STOP = "the engine stopped answering: an outage, not a setting; restart it and file a dump (docs/diagnosis.md)"
STOPS = {"hardware": HARDWARE_STOP, "capacity": CAPACITY_STOP, "outage": OUTAGE_STOP}
#: the fourth kind: ``why`` is empty or " (the reason)", ``advice`` the diagnosis's own words
NO_MOVE_STOP = "the tuner has no automatic move for this cause on {engine}{why}; the diagnosis advises: {advice}"
#: what joins the fragments of the diagnosis's advice a quote leaves out text between
QUOTE_GAP = " … "


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
    #: the key the move changes inside the flag's JSON value (vLLM --speculative-config)
    key: str | None = None
    #: the trade the move makes, throughput per GPU against latency per user (tune.json ``trade``, report.md)
    trade: str = ""


@dataclass(frozen=True)
class Knob:
    """What to change for one cause on one engine; ``limit`` set means no knob (the search stops).

    ``before``: on a "no knob" entry, the moves tried before its stop (issue 33: the GPU at its compute or
    bandwidth limit, its group waiting on the link or on one GPU) — a larger batch, an FP8 KV cache, another
    layout inside the GPUs the deployment has. The entry stays a stop: once none of them applies or all were
    measured, the search ends with the limit's sentence.
    """

    group: str
    reason: str
    moves: tuple[Move, ...] = ()
    limit: str | None = None
    #: the diagnosis's advice, quoted (QUOTE_GAP between fragments): what a no-move stop says instead
    advice: str = ""
    before: Knob | None = None


def _hw(why: str) -> Knob:
    return Knob("none", f"no knob: hardware limit — {why}", limit="hardware")


def _cap(why: str) -> Knob:
    return Knob("none", f"no knob: capacity — {why}", limit="capacity")


def _no_move(why: str, advice: str) -> Knob:
    """A cause this engine has no automatic move for: the stop names what the diagnosis advises instead."""
    return Knob("none", f"no knob: no automatic move — {why}", limit=NO_MOVE, advice=advice)


def _quote(*fragments: str) -> str:
    """Fragments of one rules.py advice, in its order and words, joined where text is left out."""
    return QUOTE_GAP.join(fragments)


def no_move_stop(engine: str, advice: str, why: str = "") -> str:
    """The fourth stop's sentence; the advice's closing full stop is dropped (the callers end the sentence)."""
    return NO_MOVE_STOP.format(engine=engine, why=f" ({why})" if why else "", advice=advice.rstrip("."))


def stop_sentence(engine: str, knob: Knob, why: str = "") -> str:
    """Why the search ends on a "no knob" entry: its kind's sentence, the no-move one with the advice quoted;
    ``why``: why none of the entry's ``before`` moves was proposed (in brackets)."""
    if knob.limit == NO_MOVE:
        return no_move_stop(engine, knob.advice, why)
    return STOPS[knob.limit or "capacity"] + (f" ({why})" if why else "")


def with_before(knob: Knob, group: str, reason: str, *moves: Move) -> Knob:
    """``knob`` (a "no knob" entry) with ``moves`` tried before its stop."""
    return replace(knob, before=Knob(group, reason, moves))


#: the diagnosis's advice (exporter/diagnosis/rules.py), quoted where an engine has no move for it
_ADVICE_GRAPHS = _quote(
    "Turn graphs on",
    "or capture larger batches",
    "up to the batch sizes that run (llm_scheduler_batch_size). Each captured size costs GPU memory taken from the KV cache.",
)
_ADVICE_LAUNCH = _quote(
    "Enable CUDA graphs", "torch.compile, fuse small ops, avoid per-step .item()/host syncs, and batch more work per launch."
)
_ADVICE_HOST = (
    "Enable CUDA graphs, use an engine with an overlapped/async scheduler (vLLM V1, SGLang), batch more requests per "
    "step, or run more replicas (data parallel) on the same GPU. If the thread's CPU demand is near a core but its CPU "
    "is not, it is starved: give the server dedicated cores or a higher CPU limit."
)
_ADVICE_SPEC = (
    "Propose fewer speculative tokens, use a draft closer to the target (same family, EAGLE heads trained for it), "
    "keep n-gram drafting for repetitive text, or turn it off for this traffic."
)
_ADVICE_PCIE = (
    "Look for KV-cache swap or CPU offload, weights streamed from host memory, unpinned host buffers or per-step tensor "
    "copies; keep data resident on the GPU, pin host memory, or give the KV cache more GPU memory."
)
_ADVICE_FRONT = _quote(
    "Look at what sits between clients and the engine: a gateway, proxy or load balancer",
    "the network, and the engine's own API-server process (HTTP parsing, chat templates, tokenisation). If the serving "
    "process's busiest thread is at a full core, the API server is the ceiling: run more API-server processes",
    "replicas, or move tokenisation off that thread",
)
_ADVICE_MEMORY = "Lower gpu_memory_utilization, max_model_len or max_num_seqs, quantise weights or KV cache, or shard the model over more GPUs."
_ADVICE_TENSOR = (
    "Check the dtype (FP32 weights or activations instead of BF16/FP16/FP8), TF32 disabled, an attention backend or "
    "custom kernel without tensor-core support, or matrix shapes that are not multiples of 8/16."
)
_ADVICE_IMBALANCE = "Check uneven pipeline stages, MoE expert load skew (hot experts), data-parallel routing, or another process sharing that GPU."
_ADVICE_COMMUNICATION = _quote(
    "Use fewer tensor-parallel ranks and more data-parallel replicas where the model fits (TP 2 x DP 2 instead of TP 4), "
    "pipeline parallelism across GPUs without NVLink, or a faster interconnect (NVLink, GPUs on one PCIe switch with "
    "peer-to-peer on). Check NCCL: NCCL_DEBUG=INFO shows the transport (P2P, SHM or NET) and NCCL_P2P_DISABLE must not be set",
)
#: the prefix-cache advice per engine: the engine's own flag where it has one, the others' left out
_PREFIX_CHECK = (
    "Check that prefix caching is still enabled on the engine after the last deployment (llm_engine_config_info{prefix_caching}"
)
_PREFIX_REST = (
    "that the router still sends a session or conversation to the same replica (session affinity, prefix-aware "
    "routing); and whether the system prompt or a template changed so prompts no longer share their beginning (a "
    "timestamp, request id or per-user text at the start, a per-request cache salt)."
)
_ADVICE_PREFIX = _quote(_PREFIX_CHECK, _PREFIX_REST)
#: no move: turning prefix caching back on is the operator's deployment; the router and prompts are no flags
_PREFIX_WHY = "prefix sharing broke in a deployment, the router or the prompts, found by hand"
_ADVICE_PREFIX_VLLM = _quote(_PREFIX_CHECK + "; vLLM: --enable-prefix-caching, on by default", _PREFIX_REST)
_ADVICE_PREFIX_SGLANG = _quote(_PREFIX_CHECK, "SGLang: no --disable-radix-cache); " + _PREFIX_REST)


#: every engine's entry unless its own table has one: the GPU at its limit, symptoms (capacity), an outage,
#: and the causes whose remedy the diagnosis names but the tuner does not carry out by itself (no move)
_COMMON: dict[str, Knob] = {
    "compute_bound": _hw("the GPU's math units are busy at the knee"),
    "memory_bandwidth_bound": _hw("every decode step streams weights and KV at the GPU's memory bandwidth"),
    "power_or_thermal_throttling": _hw("the board's power or thermal limit sets the clock, not the engine"),
    "gpu_imbalance": _no_move("placement, routing and expert load across the group, found by hand", _ADVICE_IMBALANCE),
    # the engines with layout flags try another layout first (``before``, issue 33); the interconnect stays the deployment's
    "communication_bound": _no_move(
        "the parallel layout and the interconnect are the deployment's where no layout move applies", _ADVICE_COMMUNICATION
    ),
    "tensor_cores_unused": _no_move("the dtype and kernels are a model and build choice", _ADVICE_TENSOR),
    "queue_backlog": _cap("a symptom with no cause behind it"),
    "slo_breach": _cap("a symptom with no cause behind it"),
    "retries_and_timeouts": _cap("clients give up and retry; their timeouts, not the engine's flags"),
    "front_end_overhead": _no_move("time spent in front of the engine's scheduler; no API-server process count", _ADVICE_FRONT),
    "prefix_cache_hit_drop": _no_move(_PREFIX_WHY, _ADVICE_PREFIX),
    "capacity_nearly_used": _cap("load at or past the capacity the profile measured: replicas, not flags"),
    "engine_unresponsive": Knob("none", "no knob: outage — the engine accepts requests but answers none", limit="outage"),
    "memory_capacity_exhausted": _no_move(
        "the framebuffer is full: which of the memory settings gives is a choice", _ADVICE_MEMORY
    ),
    "pcie_transfer_bound": _no_move("what is copied (swap, offload, host buffers) is found by hand", _ADVICE_PCIE),
    "launch_bound_small_kernels": _no_move("no graph-capture flag on this engine", _ADVICE_LAUNCH),
    "serial_host_ceiling": _no_move("no flag adds host threads on this engine", _ADVICE_HOST),
    "low_acceptance": _no_move("no speculative-decoding flag the tuner moves on this engine", _ADVICE_SPEC),
    "cuda_graphs_not_covering_batches": _no_move("no graph-capture flag on this engine", _ADVICE_GRAPHS),
}

_V = "docs/tune.md#vllm"
_S = "docs/tune.md#sglang"
_T = "docs/tune.md#tgi"
_R = "docs/tune.md#trtllm-serve"
_L = "docs/tune.md#llamacpp"
_M = "docs/tune.md#simulator"
#: the layout moves and the moves tried before the GPU-bound stops (issue 33)
_G = "docs/tune.md#layouts-and-gpu-bound-causes"

# --- the trade each move of issue 33 makes: throughput per GPU against latency per user ------------------
TRADE_FEWER_TP = (
    "throughput per GPU up, latency per user up: the replicas no longer wait on each other's all-reduces, "
    "but each request runs on fewer GPUs, so each of its decode steps reads more of the weights per GPU"
)
TRADE_PIPELINE = (
    "throughput per GPU up where the link is the limit, latency per user up: a pipeline hop per stage and its "
    "bubble for fewer all-reduces over the link; each GPU holds the same share of the weights"
)
TRADE_MORE_TP = (
    "more KV cache per replica and latency per user down, throughput per GPU down: more GPUs share each request "
    "and their all-reduces grow with them"
)
TRADE_BATCH = (
    "throughput per GPU up, latency per user up: more sequences share each read of the weights, and each decode "
    "step carries more of them"
)
TRADE_FP8_KV = (
    "throughput per GPU up, latency per user about the same, for some accuracy: half the KV bytes read per decode "
    "step and twice the tokens the cache holds"
)
TRADE_DRAFT = (
    "latency per user down, throughput per GPU down where drafts are rejected: more tokens per target step, and "
    "each draft costs GPU time"
)
TRADE_QUANTISED = (
    "throughput per GPU up and latency per user down, for accuracy: the quantised build does less math and reads "
    "fewer bytes per token"
)
TRADE_EPLB = (
    "throughput per GPU up, latency per user up while experts move: the hot experts are spread over the GPUs, "
    "with a pause at each rebalancing"
)
TRADE_BALANCE = "throughput per GPU up, latency per user about the same: no replica idles while another queues"
TRADE_LAYER_SPLIT = (
    "throughput per GPU up, latency per user up: the GPUs hold whole layers in turn instead of a slice of every "
    "matrix, so no layer waits on an exchange, and a token crosses the GPUs one after another"
)

_WHY_COMMUNICATION = (
    "the group waits on its link: fewer tensor-parallel ranks and more data-parallel replicas, or pipeline stages, "
    "inside the same GPUs"
)
_WHY_BANDWIDTH = (
    "every decode step streams the weights and the KV cache: a larger running batch while the KV cache has room, "
    "an FP8 KV cache, a longer draft where the measured acceptance pays for it, the quantised build named"
)
_WHY_COMPUTE = "the math units are busy: the quantised build the deployment names (tune --quantized-model)"
_WHY_IMBALANCE = "one GPU of an expert- or data-parallel group works harder: the engine's own balancing"
_WHY_MORE_TP = "with GPUs to spare (tune --gpus above the GPUs in use): more tensor-parallel ranks hold more KV"


def _fewer_tp(tp: str, other: str, doc: str = _G, when: str | None = KV_NOT_FULL) -> Move:
    """TP halved, ``other`` doubled: the GPUs kept."""
    trade = TRADE_FEWER_TP if "data" in other or "dp" in other else TRADE_PIPELINE
    return Move(tp, LAYOUT, 0.5, low=1, default=1, couple=other, when=when, doc=doc, trade=trade)


def _more_tp(tp: str, default: float | None = 1) -> Move:
    """TP doubled: more GPUs, allowed only inside the budget (tune --gpus)."""
    return Move(tp, LAYOUT, 2, high=64, default=default, doc=_G, trade=TRADE_MORE_TP)


def _batch(flag: str, default: float | None, high: float = 1024, couple: str | None = None) -> Move:
    return Move(flag, "mul", 2, high=high, default=default, couple=couple, when=BATCH_ROOM, doc=_G, trade=TRADE_BATCH)


def _fp8_kv(flag: str, value: str, default: str | None = "auto") -> Move:
    return Move(flag, "set", value, default=default, doc=_G, trade=TRADE_FP8_KV)


def _longer_draft(flag: str, key: str | None = None, high: float = 8) -> Move:
    return Move(flag, DRAFT_MORE, low=1, high=high, key=key, doc=_G, trade=TRADE_DRAFT)


#: the quantised build, where the deployment names one (the flag is the engine's model argument, exporter/tune/argv.py)
_QUANTISED = Move("model", QUANTISED, doc=_G, trade=TRADE_QUANTISED)

_VLLM: dict[str, Knob] = {
    "prefix_cache_hit_drop": _no_move(_PREFIX_WHY, _ADVICE_PREFIX_VLLM),
    "communication_bound": with_before(
        _COMMON["communication_bound"],
        "resource",
        _WHY_COMMUNICATION,
        _fewer_tp("--tensor-parallel-size", "--data-parallel-size"),
        _fewer_tp("--tensor-parallel-size", "--pipeline-parallel-size", when=None),
    ),
    "memory_bandwidth_bound": with_before(
        _COMMON["memory_bandwidth_bound"],
        "strategy",
        _WHY_BANDWIDTH,
        _batch("--max-num-seqs", 256),
        _fp8_kv("--kv-cache-dtype", "fp8"),
        _longer_draft("--speculative-config", "num_speculative_tokens"),
        _longer_draft("-sc", "num_speculative_tokens"),
        _longer_draft("--spec-tokens"),
        _QUANTISED,
    ),
    "compute_bound": with_before(_COMMON["compute_bound"], "optimisation", _WHY_COMPUTE, _QUANTISED),
    "gpu_imbalance": with_before(
        _COMMON["gpu_imbalance"],
        "strategy",
        _WHY_IMBALANCE,
        Move("--enable-eplb", "on", when=EXPERT_PARALLEL, doc=_G, trade=TRADE_EPLB),
    ),
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
            _more_tp("--tensor-parallel-size"),
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
            _more_tp("--tensor-parallel-size"),
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
    "low_acceptance": Knob(
        "optimisation",
        "most draft tokens are rejected: draft only as many as the measured acceptance pays for",
        (
            Move("--speculative-config", DRAFT, low=1, key="num_speculative_tokens", doc=_V),
            Move("-sc", DRAFT, low=1, key="num_speculative_tokens", doc=_V),
            Move("--spec-tokens", DRAFT, low=1, doc=_V),
        ),
        advice=_ADVICE_SPEC,
    ),
}

_SGLANG: dict[str, Knob] = {
    "prefix_cache_hit_drop": _no_move(_PREFIX_WHY, _ADVICE_PREFIX_SGLANG),
    "communication_bound": with_before(
        _COMMON["communication_bound"],
        "resource",
        _WHY_COMMUNICATION,
        _fewer_tp("--tp-size", "--dp-size"),
        _fewer_tp("--tp-size", "--pp-size", when=None),
    ),
    "memory_bandwidth_bound": with_before(
        _COMMON["memory_bandwidth_bound"],
        "strategy",
        _WHY_BANDWIDTH,
        _batch("--max-running-requests", 128, high=4096),
        _fp8_kv("--kv-cache-dtype", "fp8_e5m2"),
        _longer_draft("--speculative-num-steps"),
        _QUANTISED,
    ),
    "compute_bound": with_before(_COMMON["compute_bound"], "optimisation", _WHY_COMPUTE, _QUANTISED),
    "gpu_imbalance": with_before(
        _COMMON["gpu_imbalance"],
        "strategy",
        _WHY_IMBALANCE,
        Move("--enable-eplb", "on", when=EXPERT_PARALLEL, doc=_G, trade=TRADE_EPLB),
        Move(
            "--load-balance-method",
            "set",
            "shortest_queue",
            default="round_robin",
            when=DATA_PARALLEL,
            doc=_G,
            trade=TRADE_BALANCE,
        ),
    ),
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
            _more_tp("--tp-size"),
            Move("--max-running-requests", "mul", 0.5, low=1, doc=_S),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while the KV pool is mostly free: allow more running requests",
        (
            Move("--max-running-requests", "mul", 2, high=4096, default=128, when=SLOTS_FULL, doc=_S),
            _more_tp("--tp-size"),
        ),
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
    "serial_host_ceiling": Knob(
        "strategy",
        "one host thread at a core caps every step: the overlapped scheduler, CUDA graphs, more tokenizer processes",
        (
            Move("--disable-overlap-schedule", "off", doc=_S),
            Move("--disable-cuda-graph", "off", doc=_S),
            Move("--tokenizer-worker-num", "mul", 2, high=16, default=1, doc=_S),
        ),
    ),
    "front_end_overhead": Knob(
        "strategy",
        "the tokenizer manager delays the first token: more tokenizer processes",
        (Move("--tokenizer-worker-num", "mul", 2, high=16, default=1, doc=_S),),
    ),
    "low_acceptance": Knob(
        "optimisation",
        "most draft tokens are rejected: fewer draft steps, as many as the measured acceptance pays for",
        (Move("--speculative-num-steps", DRAFT, low=1, doc=_S),),
        advice=_ADVICE_SPEC,
    ),
}


def _tgi_graphs(largest: int) -> str:
    """TGI's --cuda-graphs list: its default sizes 1, 2, 4 … doubled up to ``largest``."""
    return ",".join(str(1 << i) for i in range(largest.bit_length()))


#: graphs on (from "0"), then each doubling of the largest captured batch; never a list smaller than the current
_TGI_GRAPHS: tuple[Move, ...] = tuple(
    Move("--cuda-graphs", "set", _tgi_graphs(n), default=_tgi_graphs(32), when=LARGER_CAPTURE, doc=_T) for n in (32, 64, 128, 256)
)

_TGI: dict[str, Knob] = {
    "communication_bound": _no_move(
        "TGI shards one model over --num-shard GPUs and runs no data-parallel replicas or pipeline stages: more "
        "replicas with fewer shards each are more launchers behind a router, the deployment's",
        _ADVICE_COMMUNICATION,
    ),
    "memory_bandwidth_bound": with_before(
        _COMMON["memory_bandwidth_bound"],
        "strategy",
        _WHY_BANDWIDTH,
        _batch("--max-batch-size", None),
        _fp8_kv("--kv-cache-dtype", "fp8_e5m2", default=None),
        _QUANTISED,
    ),
    "compute_bound": with_before(_COMMON["compute_bound"], "optimisation", _WHY_COMPUTE, _QUANTISED),
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
            # absent, TGI shards over every visible GPU: a count the tuner cannot read, so it needs the flag
            _more_tp("--num-shard", default=None),
            Move("--max-concurrent-requests", "mul", 0.5, low=1, default=128, doc=_T),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while memory is free: a larger batch token budget",
        (Move("--max-batch-total-tokens", "mul", 2, high=1 << 22, doc=_T), _more_tp("--num-shard", default=None)),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "new requests wait for the running batch: let waiting requests in sooner",
        (
            Move("--waiting-served-ratio", "mul", 0.5, low=0.05, default=0.3, doc=_T, integer=False),
            Move("--max-waiting-tokens", "mul", 0.5, low=1, default=20, doc=_T),
        ),
    ),
    "cuda_graphs_not_covering_batches": Knob(
        "optimisation",
        "the decode runs eager or above the largest captured graph: graphs on, capture larger batches",
        _TGI_GRAPHS,
    ),
    "launch_bound_small_kernels": Knob(
        "optimisation",
        "small decode batches launch kernel by kernel: capture CUDA graphs, for larger batches too",
        _TGI_GRAPHS,
    ),
    "serial_host_ceiling": Knob(
        "optimisation",
        "one host thread at a core caps every step: CUDA graphs on, so a step is one launch",
        _TGI_GRAPHS[:1],
    ),
    "front_end_overhead": Knob(
        "strategy",
        "the router's tokenizer workers delay the first token: more of them",
        (Move("--validation-workers", "mul", 2, high=32, default=2, doc=_T),),
    ),
}

_TRTLLM: dict[str, Knob] = {
    "communication_bound": with_before(
        _COMMON["communication_bound"],
        "resource",
        "the group waits on its link: pipeline stages instead of tensor-parallel ranks inside the same GPUs "
        "(attention data parallelism is set in an --extra_llm_api_options file, not a flag)",
        _fewer_tp("--tp_size", "--pp_size", when=None),
    ),
    "memory_bandwidth_bound": with_before(
        _COMMON["memory_bandwidth_bound"],
        "strategy",
        "every decode step streams the weights and the KV cache: a larger running batch while the KV cache has room, "
        "the quantised build named (the KV-cache dtype and speculation are set in an --extra_llm_api_options file)",
        _batch("--max_batch_size", 2048, high=4096),
        _QUANTISED,
    ),
    "compute_bound": with_before(_COMMON["compute_bound"], "optimisation", _WHY_COMPUTE, _QUANTISED),
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
            _more_tp("--tp_size"),
            Move("--max_batch_size", "mul", 0.5, low=1, default=2048, doc=_R),
        ),
    ),
    "kv_fragmentation_or_capacity_misjudged": Knob(
        "resource",
        "requests wait while the KV cache is free: a larger batch and token budget",
        (
            Move("--max_batch_size", "mul", 2, high=4096, default=2048, when=SLOTS_FULL, doc=_R),
            Move("--max_num_tokens", "mul", 2, high=65536, default=8192, doc=_R),
            _more_tp("--tp_size"),
        ),
    ),
    "batching_window_too_large": Knob(
        "strategy",
        "prefill waits behind large token budgets: a smaller per-step token budget",
        (Move("--max_num_tokens", "mul", 0.5, low=512, default=8192, doc=_R),),
    ),
}

_LLAMACPP: dict[str, Knob] = {
    "communication_bound": with_before(
        _COMMON["communication_bound"],
        "resource",
        "the GPUs exchange every layer's slices (--split-mode row): whole layers per GPU instead",
        Move("--split-mode", "set", "layer", default="layer", doc=_G, trade=TRADE_LAYER_SPLIT),
    ),
    "memory_bandwidth_bound": with_before(
        _COMMON["memory_bandwidth_bound"],
        "strategy",
        "every decode step streams the weights and the KV cache: more slots while the context has room, an 8-bit "
        "KV cache, a longer draft where the measured acceptance pays for it, the quantised build named",
        _batch("-np", 1, high=64, couple="-c"),
        Move("--cache-type-k", "set", "q8_0", default="f16", doc=_G, trade=TRADE_FP8_KV),
        Move("--cache-type-v", "set", "q8_0", default="f16", doc=_G, trade=TRADE_FP8_KV),
        *(_longer_draft(flag, high=16) for flag in ("--spec-draft-n-max", "--draft-max", "--draft", "--draft-n")),
        _QUANTISED,
    ),
    "compute_bound": with_before(_COMMON["compute_bound"], "optimisation", _WHY_COMPUTE, _QUANTISED),
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
    "low_acceptance": Knob(
        "optimisation",
        "most draft tokens are rejected: draft only as many as the measured acceptance pays for",
        # the first spelling on the command line is the one moved: the current name, then the older builds' three
        tuple(Move(flag, DRAFT, low=1, doc=_L) for flag in ("--spec-draft-n-max", "--draft-max", "--draft", "--draft-n")),
        advice=_ADVICE_SPEC,
    ),
}

_SIMULATOR: dict[str, Knob] = {
    "communication_bound": with_before(
        _COMMON["communication_bound"],
        "resource",
        _WHY_COMMUNICATION,
        _fewer_tp("--tensor-parallel-size", "--data-parallel-size"),
        _fewer_tp("--tensor-parallel-size", "--pipeline-parallel-size", when=None),
    ),
    # no quantised weights in the simulator's model: the batch, an FP8 KV cache (its --kv-cache-dtype), a longer draft
    "memory_bandwidth_bound": with_before(
        _COMMON["memory_bandwidth_bound"],
        "strategy",
        "every decode step streams the weights and the KV cache: a larger running batch while the KV cache has room, "
        "an FP8 KV cache, a longer draft where the measured acceptance pays for it",
        _batch("--max-num-seqs", 64, high=4096),
        _fp8_kv("--kv-cache-dtype", "fp8"),
        _longer_draft("--spec-tokens", high=16),
    ),
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
            _more_tp("--tensor-parallel-size"),
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
            _more_tp("--tensor-parallel-size"),
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
    "launch_bound_small_kernels": Knob(
        "optimisation",
        "eager decode steps launch op by op: graphs on, larger capture sizes (the simulator's eager launch time)",
        (
            Move("--enforce-eager", "set", "false", default="false", doc=_M),
            Move("--max-cudagraph-capture-size", "mul", 2, high=4096, default=512, doc=_M),
        ),
    ),
    "low_acceptance": Knob(
        "optimisation",
        "most draft tokens are rejected: draft only as many as the measured acceptance pays for (0: off)",
        (Move("--spec-tokens", DRAFT, low=0, default=0, doc=_M),),
        advice=_ADVICE_SPEC,
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


__all__ = [
    "BATCH_ROOM",
    "DATA_PARALLEL",
    "DRAFT",
    "DRAFT_MORE",
    "ENGINES",
    "EXPERT_PARALLEL",
    "KV_NOT_FULL",
    "LAYOUT",
    "QUANTISED",
    "TRADE_BALANCE",
    "TRADE_BATCH",
    "TRADE_DRAFT",
    "TRADE_EPLB",
    "TRADE_FEWER_TP",
    "TRADE_FP8_KV",
    "TRADE_LAYER_SPLIT",
    "TRADE_MORE_TP",
    "TRADE_PIPELINE",
    "TRADE_QUANTISED",
    "GROUPS",
    "HARDWARE_STOP",
    "LARGER_CAPTURE",
    "LIMITS",
    "NO_MOVE",
    "NO_MOVE_STOP",
    "QUOTE_GAP",
    "STOPS",
    "TABLES",
    "Knob",
    "Move",
    "group_rank",
    "lookup",
    "no_move_stop",
    "stop_sentence",
    "with_before",
]
