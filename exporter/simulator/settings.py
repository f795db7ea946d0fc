"""Every knob of the simulated server, with its default, unit and validation.

Why a dataclass with metadata: the ``simulate`` CLI derives one flag per field
from it, scenarios override a subset of it by name, and ``/sim/state`` reports
it; one table keeps the three from drifting. Durations are *model* seconds
(what a real engine would take); ``time_scale`` only decides how fast they
pass on the wall clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DIALECTS: tuple[str, ...] = ("vllm", "vllm-legacy", "sglang", "tgi", "trtllm", "llamacpp")
PREEMPTION_MODES: tuple[str, ...] = ("recompute", "swap")
#: the link between the GPUs of one replica (``interconnect``): exporter/simulator/roofline.py argues their figures
INTERCONNECTS: tuple[str, ...] = ("nvlink", "pcie")
#: KV-cache element types (vLLM's ``--kv-cache-dtype`` spellings) and their bytes: ``auto`` is the model's own
#: 16-bit type; the FP8 formats store one byte an element
KV_CACHE_DTYPES: dict[str, int] = {"auto": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
#: the most GPUs one simulated server models (its /sim/gpu list)
MAX_GPUS = 64


def _k(help: str, **extra: Any) -> dict[str, Any]:
    return {"help": help, **extra}


@dataclass
class ModelGeometry:
    """The served model's shape: what the roofline model needs (a Llama-3-8B by default)."""

    params_b: float = 8.0
    layers: int = 32
    hidden: int = 4096
    kv_heads: int = 8
    head_dim: int = 128
    dtype_bytes: int = 2
    #: bytes of one KV-cache element (``--kv-cache-dtype``): the model's own type unless an FP8 cache is asked for
    kv_dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer: 2 * layers * kv_heads * head_dim * KV element bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def pool_bytes_per_token(self) -> int:
        """What one token's KV took at the model's own type: the unit ``num_gpu_blocks`` measures memory in."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def heads(self) -> int:
        """Attention (query) heads: hidden size over head dimension (32 for the Llama-3-8B default)."""
        return self.hidden // self.head_dim


@dataclass(frozen=True)
class Layout:
    """How one simulated server spreads the model over its GPUs (vLLM's parallel config).

    ``tp`` GPUs share every layer (tensor parallel), ``pp`` stages hold a slice of the layers
    each (pipeline parallel): one replica is ``tp * pp`` GPUs, ranked stage by stage
    (GPU ``stage * tp + tp_rank``). ``dp`` replicas (data parallel) serve behind the one
    endpoint, each with its own scheduler and KV cache: ``tp * pp * dp`` GPUs in all, replica
    by replica on /sim/gpu. ``modelled`` is False for the pre-layout ``--gpus N`` group (a
    tensor-parallel group of N with the KV pool as given, kept bit for bit).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    interconnect: str = "nvlink"
    modelled: bool = False

    @property
    def ranks(self) -> int:
        """GPUs of one replica."""
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def as_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel_size": self.tp,
            "pipeline_parallel_size": self.pp,
            "data_parallel_size": self.dp,
            "interconnect": self.interconnect,
            "gpus": self.gpus,
            "modelled": self.modelled,
        }


@dataclass
class SimConfig:
    """Knobs of one simulated server. Field metadata ``help`` becomes the flag's help."""

    model: str = field(default="sim-llama-8b", metadata=_k("served model name (the model_name label)"))
    gpus: int = field(
        default=1,
        metadata=_k(
            "GPUs in the tensor-parallel group of the pre-layout model (KV pool as given, NVLink, no per-call latency: "
            "the tp_imbalance scenario); any layout flag above 1 replaces it"
        ),
    )
    # --- parallel layout (vLLM spellings: the exporter reads them from the command line) ----
    tensor_parallel_size: int = field(
        default=1,
        metadata=_k(
            "GPUs every layer is split over (vLLM -tp): each reads 1/TP of the weights and KV, two all-reduces per "
            "layer over --interconnect",
            aliases=("-tp",),
        ),
    )
    pipeline_parallel_size: int = field(
        default=1,
        metadata=_k("stages the layers are split over (vLLM -pp): micro-batches and a pipeline bubble", aliases=("-pp",)),
    )
    data_parallel_size: int = field(
        default=1,
        metadata=_k(
            "replicas behind the one endpoint (vLLM -dp), each its own scheduler and KV cache; requests go to the least loaded",
            aliases=("-dp",),
        ),
    )
    interconnect: str = field(
        default="nvlink",
        metadata=_k("link between the GPUs of a replica: nvlink (450 GB/s per direction) or pcie (--pcie-mib-s)"),
    )
    # --- scheduler -------------------------------------------------------------------
    max_num_seqs: int = field(default=64, metadata=_k("most requests in the running batch"))
    max_num_batched_tokens: int = field(default=2048, metadata=_k("per-step token budget (chunked prefill)"))
    max_model_len: int = field(default=8192, metadata=_k("longest prompt + output, tokens"))
    max_queue_len: int = field(default=256, metadata=_k("most waiting requests; beyond it requests get 429"))
    batch_wait_s: float = field(
        default=0.0, metadata=_k("batching window: hold new requests until the oldest waited this long (model s)")
    )
    batch_min_requests: int = field(
        default=0, metadata=_k("with a batching window: admit early once this many wait (0 = max_num_seqs)")
    )
    stop_probability: float = field(
        default=0.0, metadata=_k("chance per output token that the request stops (finish_reason stop)")
    )
    # --- KV cache --------------------------------------------------------------------
    block_size: int = field(default=16, metadata=_k("tokens per KV-cache block"))
    num_gpu_blocks: int = field(
        default=4096,
        metadata=_k(
            "KV-cache blocks on the GPU at the model's own 16-bit type (the pool's memory: an FP8 cache holds twice "
            "as many blocks in it)"
        ),
    )
    kv_cache_dtype: str = field(
        default="auto",
        metadata=_k(
            "KV-cache element type (vLLM --kv-cache-dtype): auto (the model's 16-bit type) or fp8 / fp8_e4m3 / "
            "fp8_e5m2 (one byte: half the KV bytes every decode step reads, twice the blocks in the same memory)"
        ),
    )
    num_cpu_blocks: int = field(default=4096, metadata=_k("KV blocks of host memory (swap space / offload tier)"))
    enable_prefix_caching: bool = field(default=True, metadata=_k("reuse KV blocks of identical prompt prefixes"))
    cache_salt_per_request: bool = field(
        default=False,
        metadata=_k(
            "every new request carries a cache salt of its own (vLLM cache_salt): its prompt is still looked up in the "
            "prefix cache and shares no block with any other, as when prefix sharing breaks (POST /sim/prefix_cache)"
        ),
    )
    preemption_mode: str = field(default="recompute", metadata=_k("what preemption does: recompute or swap (over PCIe)"))
    kv_watermark: float = field(default=0.01, metadata=_k("share of blocks kept free when admitting"))
    kv_reserve_full: bool = field(default=False, metadata=_k("admission reserves blocks for prompt + max_tokens up front"))
    kv_offload: bool = field(default=False, metadata=_k("prefix cache lives in host memory: hits are copied over PCIe"))
    kv_offload_blocks: int = field(
        default=0,
        metadata=_k(
            "host KV tier of this many blocks (0 = none): cached blocks the GPU evicts are copied there instead of "
            "dropped, and a later prefix hit on them is loaded back over PCIe (a host-tier hit)"
        ),
    )
    # --- speculative decoding ----------------------------------------------------------
    spec_tokens: int = field(default=0, metadata=_k("draft tokens per step (0 = no speculative decoding)"))
    spec_acceptance: float = field(default=0.7, metadata=_k("probability that each draft token is accepted"))
    spec_draft_cost: float = field(default=0.05, metadata=_k("draft model size as a share of the target model"))
    # --- host (CPU) work per step -------------------------------------------------------
    host_base_s: float = field(default=0.0006, metadata=_k("scheduler CPU time per step (model s)"))
    host_per_seq_s: float = field(default=0.00002, metadata=_k("scheduler CPU time per running request per step (model s)"))
    host_per_token_s: float = field(default=0.0000005, metadata=_k("scheduler CPU time per scheduled token (model s)"))
    overlap_host: bool = field(default=True, metadata=_k("host work of a step overlaps the GPU work (async scheduling)"))
    # --- CUDA graphs (vLLM spellings: the exporter reads them from the command line) ----------
    enforce_eager: bool = field(
        default=False, metadata=_k("CUDA graphs off (vLLM --enforce-eager): every decode step launches its kernels one by one")
    )
    max_cudagraph_capture_size: int = field(
        default=512, metadata=_k("largest running batch a CUDA graph is captured for; larger decode batches run eager")
    )
    eager_launch_s: float = field(
        default=0.004,
        metadata=_k("kernel-launch time an eager decode step adds, SMs idle meanwhile (model s; ~300 launches of ~13 us)"),
    )
    # --- GPU ---------------------------------------------------------------------------
    power_limit_w: float = field(default=700.0, metadata=_k("enforced board power limit, W"))
    pcie_mib_s: float = field(default=55981.5, metadata=_k("PCIe host<->device bandwidth, MiB/s"))
    hbm_gb_s: float = field(default=4800.0, metadata=_k("GPU memory (HBM) bandwidth, GB/s (H200: 4800; L4-class: 300)"))
    tp_imbalance: float = field(default=1.0, metadata=_k("work of GPU 0 relative to the other GPUs of the group"))
    gpu_window_s: float = field(default=1.0, metadata=_k("averaging window of /sim/gpu, wall seconds"))
    # --- model shape ---------------------------------------------------------------------
    params_b: float = field(default=8.0, metadata=_k("model parameters, billions"))
    layers: int = field(default=32, metadata=_k("transformer layers"))
    hidden: int = field(default=4096, metadata=_k("hidden size"))
    kv_heads: int = field(default=8, metadata=_k("KV heads (GQA)"))
    head_dim: int = field(default=128, metadata=_k("head dimension"))
    # --- run -----------------------------------------------------------------------------
    time_scale: float = field(default=1.0, metadata=_k("wall-clock speed-up: 10 runs ten model seconds per wall second"))
    seed: int = field(default=0, metadata=_k("random seed (stop and acceptance draws)"))

    @property
    def geometry(self) -> ModelGeometry:
        return ModelGeometry(
            self.params_b,
            self.layers,
            self.hidden,
            self.kv_heads,
            self.head_dim,
            kv_dtype_bytes=KV_CACHE_DTYPES.get(self.kv_cache_dtype, 2),
        )

    @property
    def layout(self) -> Layout:
        """The parallel layout: the layout flags when any is above 1, else the pre-layout ``gpus`` group."""
        tp, pp, dp = self.tensor_parallel_size, self.pipeline_parallel_size, self.data_parallel_size
        if tp == pp == dp == 1:
            return Layout(tp=self.gpus, interconnect=self.interconnect)
        return Layout(tp, pp, dp, self.interconnect, modelled=True)

    @property
    def total_gpus(self) -> int:
        """GPUs the server models (one /sim/gpu entry each)."""
        return self.layout.gpus

    def validate(self) -> None:
        """Raise ValueError naming the first bad knob."""
        positive_ints = (
            "gpus",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "data_parallel_size",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "block_size",
            "num_gpu_blocks",
            "max_queue_len",
            "layers",
            "hidden",
            "kv_heads",
            "head_dim",
            "max_cudagraph_capture_size",
        )
        for name in positive_ints:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected a positive integer, got {getattr(self, name)!r}")
        for name in ("num_cpu_blocks", "spec_tokens", "batch_min_requests", "kv_offload_blocks"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name}: expected 0 or more, got {getattr(self, name)!r}")
        for name in ("stop_probability", "spec_acceptance", "kv_watermark"):
            value = float(getattr(self, name))
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: expected a value from 0 to 1, got {value!r}")
        for name in ("time_scale", "power_limit_w", "pcie_mib_s", "hbm_gb_s", "tp_imbalance", "gpu_window_s", "params_b"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name}: expected a positive number, got {getattr(self, name)!r}")
        for name in ("batch_wait_s", "spec_draft_cost", "host_base_s", "host_per_seq_s", "host_per_token_s", "eager_launch_s"):
            if float(getattr(self, name)) < 0:
                raise ValueError(f"{name}: expected 0 or more, got {getattr(self, name)!r}")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise ValueError(f"preemption_mode: expected one of {', '.join(PREEMPTION_MODES)}, got {self.preemption_mode!r}")
        if self.kv_offload_blocks and self.kv_offload:
            raise ValueError("kv_offload_blocks: not with kv_offload (the prefix cache is either offloaded whole or tiered)")
        if self.spec_tokens > 16:
            raise ValueError(f"spec_tokens: at most 16, got {self.spec_tokens}")
        if self.gpus > MAX_GPUS:
            raise ValueError(f"gpus: at most {MAX_GPUS}, got {self.gpus}")
        self._validate_layout()

    def _validate_layout(self) -> None:
        """The layout flags as vLLM checks them (vllm/config: heads must split evenly over TP)."""
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype: expected one of {', '.join(KV_CACHE_DTYPES)}, got {self.kv_cache_dtype!r}")
        if self.interconnect not in INTERCONNECTS:
            raise ValueError(f"interconnect: expected one of {', '.join(INTERCONNECTS)}, got {self.interconnect!r}")
        lay = self.layout
        if not lay.modelled:
            if self.gpus > 1 and self.interconnect != "nvlink":
                raise ValueError(
                    "interconnect: --gpus is the pre-layout NVLink group; give --tensor-parallel-size for a layout over pcie"
                )
            return
        if lay.gpus > MAX_GPUS:
            raise ValueError(
                f"tensor_parallel_size x pipeline_parallel_size x data_parallel_size: at most {MAX_GPUS} GPUs, got {lay.gpus}"
            )
        heads, kv = self.hidden // self.head_dim, self.kv_heads
        if heads < 1 or heads % lay.tp:
            raise ValueError(
                f"tensor_parallel_size: the model's {heads} attention heads (hidden / head_dim) do not split over {lay.tp} GPUs"
            )
        if (kv % lay.tp) if lay.tp <= kv else (lay.tp % kv):
            raise ValueError(
                f"tensor_parallel_size: {kv} KV heads neither split over {lay.tp} GPUs nor replicate evenly onto them"
            )
        if lay.pp > self.layers:
            raise ValueError(f"pipeline_parallel_size: {lay.pp} stages for {self.layers} layers")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def knob_fields() -> list[dataclasses.Field[Any]]:
    """The fields the CLI exposes as flags (all of them)."""
    return list(dataclasses.fields(SimConfig))


def apply_overrides(config: SimConfig, overrides: dict[str, Any]) -> SimConfig:
    """A copy of ``config`` with ``overrides`` applied, each converted to the field's type."""
    types = {f.name: f.type for f in dataclasses.fields(SimConfig)}
    values = {}
    for name, value in overrides.items():
        if name not in types:
            raise ValueError(f"unknown simulator setting {name!r}")
        values[name] = _convert(types[name], value, name)
    new = dataclasses.replace(config, **values)
    new.validate()
    return new


def _convert(type_name: object, value: Any, name: str) -> Any:
    kind = str(type_name)
    try:
        if kind == "bool":
            if isinstance(value, str):
                lowered = value.strip().lower()
                if lowered in ("1", "true", "yes", "on"):
                    return True
                if lowered in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            return bool(value)
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind == "float":
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected {kind}, got {value!r}") from None
