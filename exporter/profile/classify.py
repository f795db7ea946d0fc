"""Which kind of operator a profiled event is, and the time shares of one profile.

Why a name table: a Chrome trace names each GPU kernel (``flash_fwd_splitkv_kernel``,
``sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize...``,
``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``) and each CPU operator (``aten::mm``,
``aten::scaled_dot_product_attention``) but says nothing about what it does; the
name is the only evidence. The table is ordered: the first kind whose pattern
matches wins, so a fused attention kernel built on CUTLASS (``cutlass...flash...``)
reads as attention, not gemm, and an all-reduce written as a GEMM epilogue reads
as communication. A name nothing matches is ``other``, never guessed.

Why GPU kernels first: the kernels are the time the GPU spent; CPU operators
overlap the kernels they launch, so where a trace has kernels their split is the
one published. A trace without GPU kernels (a CPU-only engine) is split by its CPU
operators instead (``CpuOpSplit``): there they are where the time goes. By *self*
time, since they nest (``aten::linear`` holds ``aten::addmm``) and adding
durations would count one matmul twice.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.schema import OPERATOR_KINDS

#: trace categories of GPU activity (torch.profiler / Kineto): kernels, copies, fills
GPU_CATEGORIES: frozenset[str] = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: categories that are memory movement whatever the name says
COPY_CATEGORIES: frozenset[str] = frozenset({"gpu_memcpy", "gpu_memset"})

#: (kind, pattern), first match wins; matched case-insensitively against the event's name
KIND_PATTERNS: tuple[tuple[str, str], ...] = (
    # collectives first: their names carry dtypes and algorithms, nothing else matches
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|c10d::|broadcast_kernel"),
    # copies and fills: Memcpy HtoD/DtoH/DtoD, Memset, the CPU-side copy operators
    ("memory_copy", r"memcpy|memset|aten::copy_|aten::to\b|aten::_to_copy|aten::contiguous|aten::clone|cudamemcpy"),
    # attention: FlashAttention/FlashInfer/xFormers/paged kernels, the KV-cache writes, SDPA
    (
        "attention",
        r"flash|attn|attention|paged|fmha|\bmha|xformers|reshape_and_cache|batchprefill|batchdecode|"
        r"merge_attn|scaled_dot_product|unified_attention|kv_cache_update|mla_|_fwd_kernel_stage",
    ),
    # sampling: top-k/top-p, argmax, the softmax over logits, multinomial draws
    ("sampling", r"sampl|top_?k|top_?p|argmax|softmax|multinomial|gumbel|logit|bitonicsort|radixsort|sort_kernel"),
    # matrix multiplies: cuBLAS/cuBLASLt/CUTLASS kernels by their family names, CPU matmul operators
    (
        "gemm",
        r"gemm|gemv|cutlass|cublas|matmul|xmma|wgmma|hmma|splitkreduce|sm\d\d_|ampere_|volta_|turing_|"
        r"aten::mm\b|aten::addmm|aten::bmm|aten::linear|aten::baddbmm|onednn|mkldnn|_mm_kernel",
    ),
)
_COMPILED: tuple[tuple[str, re.Pattern[str]], ...] = tuple((k, re.compile(p, re.IGNORECASE)) for k, p in KIND_PATTERNS)
#: longest kernel name kept in a result (CUTLASS template names run to kilobytes)
MAX_NAME_CHARS = 200
#: distinct kernel names tallied per profile; later new names are added up as ``OVERFLOW_NAME``
MAX_NAMES = 5000
OVERFLOW_NAME = "(more kernel names than tallied)"
#: top kernels listed per kind in a result
TOP_PER_KIND = 5

assert {k for k, _ in KIND_PATTERNS} | {"other"} == set(OPERATOR_KINDS)


def kind_of(name: str, category: str = "") -> str:
    """The operator kind of one event, by its category and name (``other`` when nothing matches)."""
    if category.lower() in COPY_CATEGORIES:
        return "memory_copy"
    for kind, pattern in _COMPILED:
        if pattern.search(name):
            return kind
    return "other"


def is_gpu_event(event: Mapping[str, Any]) -> bool:
    """A complete ("X") event of GPU activity with a usable duration."""
    if event.get("ph") != "X":
        return False
    cat = event.get("cat")
    if not isinstance(cat, str) or cat.lower() not in GPU_CATEGORIES:
        return False
    dur = event.get("dur")
    return isinstance(dur, (int, float)) and not isinstance(dur, bool) and 0 <= dur < 1e15


@dataclass
class KernelTally:
    """Time and count of one kernel name."""

    kind: str
    count: int = 0
    time_us: float = 0.0


@dataclass
class Split:
    """The GPU kernel time of a profile, by kind and by kernel name (bounded)."""

    kernels: int = 0
    time_us: float = 0.0
    by_kind: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OPERATOR_KINDS, 0.0))
    names: dict[str, KernelTally] = field(default_factory=dict)
    #: events seen that were not GPU activity (CPU operators, annotations, flows)
    other_events: int = 0

    def add(self, event: Mapping[str, Any]) -> None:
        """Count one trace event (non-GPU ones only tallied as ``other_events``)."""
        if not is_gpu_event(event):
            self.other_events += 1
            return
        raw = event.get("name")
        name = raw[:MAX_NAME_CHARS] if isinstance(raw, str) else ""
        cat = str(event.get("cat", ""))
        dur = float(event["dur"])
        tally = self.names.get(name)
        if tally is None:
            kind = kind_of(name, cat)
            if len(self.names) >= MAX_NAMES:  # a flood of distinct names: the time still counts by kind
                tally = self.names.setdefault(OVERFLOW_NAME, KernelTally("other"))
            else:
                tally = self.names[name] = KernelTally(kind)
        else:
            kind = kind_of(name, cat) if name == OVERFLOW_NAME else tally.kind
        tally.count += 1
        tally.time_us += dur
        self.kernels += 1
        self.time_us += dur
        self.by_kind[kind] += dur

    def shares(self) -> dict[str, float]:
        """kind -> share of the kernel time (they add up to 1); empty without kernel time."""
        if self.time_us <= 0:
            return {}
        return {k: v / self.time_us for k, v in self.by_kind.items()}

    def top(self, per_kind: int = TOP_PER_KIND) -> dict[str, list[dict[str, Any]]]:
        """kind -> its longest kernels by total time: name, count, seconds, share of all kernel time."""
        out: dict[str, list[dict[str, Any]]] = {}
        ranked = sorted(self.names.items(), key=lambda item: -item[1].time_us)
        for name, tally in ranked:
            if name == OVERFLOW_NAME:
                continue
            listed = out.setdefault(tally.kind, [])
            if len(listed) < per_kind:
                share = tally.time_us / self.time_us if self.time_us > 0 else 0.0
                listed.append({"name": name, "count": tally.count, "seconds": tally.time_us / 1e6, "share": share})
        return out


#: CPU operator events kept for the self-time split (4 arrays: about 21 bytes each)
MAX_CPU_OPS = 200_000
_KIND_INDEX = {k: i for i, k in enumerate(OPERATOR_KINDS)}


class CpuOpSplit:
    """The self time of the CPU operators (``cat: cpu_op``), by kind, per thread's nesting.

    Why self time: a parent operator's duration includes its children's; what is
    left after taking them out is the time spent in it alone, and those add up to
    the thread's busy time. Past ``MAX_CPU_OPS`` events the rest are left out
    (``truncated``): the split is of the first ones.
    """

    def __init__(self, limit: int = MAX_CPU_OPS) -> None:
        self.limit = limit
        self._ts = array("d")
        self._dur = array("d")
        self._kind = array("b")
        self._thread = array("q")
        self._threads: dict[tuple[str, str], int] = {}
        self._kinds: dict[str, int] = {}
        self.truncated = 0

    def add(self, event: Mapping[str, Any]) -> None:
        if event.get("ph") != "X" or event.get("cat") != "cpu_op":
            return
        ts, dur = event.get("ts"), event.get("dur")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e18 for v in (ts, dur)):
            return
        if len(self._ts) >= self.limit:
            self.truncated += 1
            return
        raw = event.get("name")
        name = raw[:MAX_NAME_CHARS] if isinstance(raw, str) else ""
        kind = self._kinds.get(name)
        if kind is None:
            kind = _KIND_INDEX[kind_of(name, "cpu_op")]
            if len(self._kinds) < MAX_NAMES:
                self._kinds[name] = kind
        key = (str(event.get("pid", ""))[:40], str(event.get("tid", ""))[:40])
        thread = self._threads.setdefault(key, len(self._threads)) if len(self._threads) < MAX_NAMES else -1
        self._ts.append(float(ts))  # type: ignore[arg-type]
        self._dur.append(float(dur))  # type: ignore[arg-type]
        self._kind.append(kind)
        self._thread.append(thread)

    @property
    def events(self) -> int:
        return len(self._ts)

    def self_time_us(self) -> dict[str, float]:
        """kind -> microseconds of self time."""
        out = dict.fromkeys(OPERATOR_KINDS, 0.0)
        order = sorted(range(len(self._ts)), key=lambda i: (self._thread[i], self._ts[i], -self._dur[i]))
        stack: list[tuple[float, int]] = []  # (end, index) of the open operators of this thread
        own = array("d", self._dur)
        thread = None
        for i in order:
            if self._thread[i] != thread:
                thread, stack = self._thread[i], []
            start, end = self._ts[i], self._ts[i] + self._dur[i]
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:
                parent = stack[-1][1]
                own[parent] -= min(self._dur[i], stack[-1][0] - start)
            stack.append((end, i))
        for i, kind in enumerate(self._kind):
            out[OPERATOR_KINDS[kind]] += max(0.0, own[i])
        return out

    def shares(self, us: Mapping[str, float] | None = None) -> dict[str, float]:
        """kind -> share of the CPU operators' self time (``us``: already computed); empty without any."""
        us = self.self_time_us() if us is None else us
        total = sum(us.values())
        return {k: v / total for k, v in us.items()} if total > 0 else {}
