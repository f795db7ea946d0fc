"""The engine's launch settings: what it was started with, read from the engine itself.

Why: the operator and memory causes compare the settings (the per-step token
budget, the largest captured CUDA graph, the reserved context) with the lengths
and batch sizes the engine really sees; ``tune`` needs the same settings to know
what it changes from. One vocabulary serves both: ``FLAGS`` maps each engine's
flag spellings onto a closed set of setting names (``NUMBER_SETTINGS``,
``TEXT_SETTINGS``); the first spelling of a flag is the one ``tune`` writes (what
``tune`` writes into a command line).

Where a setting comes from, first found wins:

1. what the engine serves: vLLM's ``vllm:cache_config_info`` labels, SGLang's
   ``sglang:context_len`` / ``sglang:page_size`` gauges (``from_exposition``),
   llama.cpp's ``GET /props`` (``from_llamacpp_props``), SGLang's
   ``GET /get_server_info`` and TGI's ``GET /info`` (``from_info``, ``INFO_ROUTES``):
   the effective values, defaults included;
2. the serving process's command line (``/proc/PID/cmdline``, ``from_argv``):
   only flags written out, so a default stays unknown;
3. its environment (``/proc/PID/environ`` where readable, ``from_environ``):
   only the variables named in ``ENV``; every other variable is dropped as it is
   read and never kept, logged or published (they hold secrets).

Unknown stays absent: a flag not written and not served publishes nothing, never
a guessed default. Flag spellings are cited from each engine's own argument
definitions: vLLM ``vllm/engine/arg_utils.py`` (0.32), SGLang
``python/sglang/srt/server_args.py`` (docs/backend/server_arguments.md), TGI
``launcher/src/main.rs`` (its clap options, each also an environment variable),
trtllm-serve ``tensorrt_llm/commands/serve.py`` (click options with
underscores), llama.cpp ``common/arg.cpp`` (``LLAMA_ARG_*`` variables).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from exporter.samples import Sample
from exporter.schema import ENGINE_SETTINGS

#: Numeric settings: name -> what it means (published as ``llm_engine_setting{setting}``).
NUMBER_SETTINGS: dict[str, str] = {
    "max_num_seqs": "the most requests in the running batch (vLLM --max-num-seqs, SGLang --max-running-requests, "
    "TGI --max-batch-size, trtllm-serve --max_batch_size)",
    "max_num_batched_tokens": "the most tokens one engine step computes, the prefill chunk budget (vLLM "
    "--max-num-batched-tokens, SGLang --chunked-prefill-size, TGI --max-batch-prefill-tokens, trtllm-serve "
    "--max_num_tokens, llama.cpp -b)",
    "max_model_len": "the longest sequence (prompt + output) a request may have (vLLM --max-model-len, SGLang "
    "--context-length, TGI --max-total-tokens, trtllm-serve --max_seq_len)",
    "max_input_tokens": "the longest prompt a request may have (TGI --max-input-tokens)",
    "cuda_graph_max_batch_size": "the largest batch a captured CUDA graph covers (vLLM --max-cudagraph-capture-size "
    "or the largest --cudagraph-capture-sizes, SGLang --cuda-graph-max-bs, TGI the largest --cuda-graphs)",
    "gpu_memory_utilization": "share of GPU memory the engine reserves for weights and KV cache (vLLM "
    "--gpu-memory-utilization, SGLang --mem-fraction-static, trtllm-serve --kv_cache_free_gpu_memory_fraction: "
    "the free memory share given to the KV cache)",
    "slots": "sequence slots served at once (llama.cpp -np, /props total_slots)",
    "context_per_slot": "context tokens each slot holds (llama.cpp /props n_ctx, else -c divided by -np)",
    "context_size": "context tokens of all slots together (llama.cpp -c)",
    "block_size": "tokens per KV-cache block or page (vLLM --block-size, SGLang --page-size)",
    "tensor_parallel_size": "GPUs one model is sharded over (vLLM -tp, SGLang --tp-size, TGI --num-shard, "
    "trtllm-serve --tp_size)",
    "num_speculative_tokens": "draft tokens proposed per target step under speculative decoding, what each step "
    "pays the draft for (vLLM --speculative-config / -sc num_speculative_tokens or --spec-tokens, SGLang "
    "--speculative-num-steps or its sglang:spec_num_steps gauge, TGI --speculate, llama.cpp --spec-draft-n-max or "
    "the older --draft-max / --draft / --draft-n: an upper bound)",
    "pipeline_parallel_size": "pipeline stages the model's layers are split over, one GPU group each (vLLM -pp / "
    "--pipeline-parallel-size, SGLang --pp-size, trtllm-serve --pp_size)",
    "data_parallel_size": "replicas of the whole model inside one engine, each on its own GPUs (vLLM -dp / "
    "--data-parallel-size, SGLang --dp-size / --dp)",
}
#: Text settings: name -> what it means (labels of ``llm_engine_config_info``).
TEXT_SETTINGS: dict[str, str] = {
    "enforce_eager": '"true" when CUDA graphs are off (vLLM --enforce-eager, SGLang --disable-cuda-graph, TGI --cuda-graphs 0)',
    "chunked_prefill": '"true"/"false": long prompts are split over steps (vLLM --[no-]enable-chunked-prefill)',
    "compile_level": "the torch.compile / optimisation level (vLLM -O / --optimization-level / "
    "--compilation-config level, SGLang --enable-torch-compile: 1)",
    "attention_backend": "the attention kernel family (vLLM --attention-backend or VLLM_ATTENTION_BACKEND, SGLang "
    "--attention-backend, TGI ATTENTION, llama.cpp -fa)",
    "kv_cache_dtype": "KV-cache element type (vLLM/SGLang/TGI --kv-cache-dtype, llama.cpp -ctk)",
}
if tuple(NUMBER_SETTINGS) != ENGINE_SETTINGS:  # the schema declares the set; this module says what each means
    raise RuntimeError("exporter/engines/settings.py NUMBER_SETTINGS differs from exporter/schema.py ENGINE_SETTINGS")

#: the most arguments of one command line read, the longest value kept
MAX_ARGS = 1024
MAX_VALUE = 64
#: the most bytes of /proc/PID/cmdline and /proc/PID/environ read
MAX_PROC_BYTES = 256 << 10
#: a text value is kept only when it is made of these (a backend name, a dtype, a level)
_TEXT_OK = re.compile(r"^[A-Za-z0-9_.:+-]{1,64}$")

Kind = Literal["number", "text", "set", "list_max", "zero_is", "json"]


@dataclass(frozen=True)
class Flag:
    """One engine flag and the setting it sets.

    ``kind``: ``number`` (a value, ``--x 8`` or ``--x=8``), ``text`` (a value kept
    as text), ``set`` (present: the setting becomes ``value``), ``list_max`` (a
    list of numbers, space- or comma-separated: their largest), ``zero_is`` (a
    number list whose largest is 0 sets the setting to ``value``: TGI
    ``--cuda-graphs 0``), ``json`` (a JSON object whose ``keys`` map onto
    settings: vLLM ``--compilation-config``). ``joined``: the value may follow a
    short flag directly (vLLM ``-O3``).
    """

    spellings: tuple[str, ...]
    setting: str
    kind: Kind = "number"
    value: str = ""
    joined: bool = False
    keys: Mapping[str, tuple[str, Kind]] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvVar:
    """One environment variable the engine reads a setting from."""

    name: str
    setting: str
    kind: Kind = "text"
    value: str = ""


def _f(spellings: str, setting: str, kind: Kind = "number", value: str = "", **kw: Any) -> Flag:
    return Flag(tuple(spellings.split()), setting, kind, value, **kw)


#: vLLM ``--speculative-config`` (a JSON object): the number of draft tokens per step
_VLLM_SPECULATIVE_KEYS: dict[str, tuple[str, Kind]] = {"num_speculative_tokens": ("num_speculative_tokens", "number")}

_VLLM_COMPILATION_KEYS: dict[str, tuple[str, Kind]] = {
    "level": ("compile_level", "text"),
    "mode": ("compile_level", "text"),
    "cudagraph_capture_sizes": ("cuda_graph_max_batch_size", "list_max"),
    "max_cudagraph_capture_size": ("cuda_graph_max_batch_size", "number"),
}

#: engine family -> its flags (first spelling: the one ``tune`` writes)
FLAGS: dict[str, tuple[Flag, ...]] = {
    "vllm": (
        _f("--max-num-seqs", "max_num_seqs"),
        _f("--max-num-batched-tokens", "max_num_batched_tokens"),
        _f("--max-model-len", "max_model_len"),
        _f("--gpu-memory-utilization", "gpu_memory_utilization"),
        _f("--block-size", "block_size"),
        _f("--tensor-parallel-size -tp", "tensor_parallel_size"),
        _f("--pipeline-parallel-size -pp", "pipeline_parallel_size"),
        _f("--data-parallel-size -dp", "data_parallel_size"),
        _f("--max-cudagraph-capture-size", "cuda_graph_max_batch_size"),
        _f("--cudagraph-capture-sizes", "cuda_graph_max_batch_size", "list_max"),
        _f("--enforce-eager", "enforce_eager", "set", "true"),
        _f("--no-enforce-eager", "enforce_eager", "set", "false"),
        _f("--enable-chunked-prefill", "chunked_prefill", "set", "true"),
        _f("--no-enable-chunked-prefill", "chunked_prefill", "set", "false"),
        _f("--optimization-level -O", "compile_level", "text", joined=True),
        _f("--compilation-config -cc", "compile_level", "json", keys=_VLLM_COMPILATION_KEYS),
        _f("--attention-backend", "attention_backend", "text"),
        _f("--kv-cache-dtype", "kv_cache_dtype", "text"),
        # separate entries, not aliases: each is its own flag to tune (exporter/tune/knobs.py moves them one by one)
        _f("--speculative-config", "num_speculative_tokens", "json", keys=_VLLM_SPECULATIVE_KEYS),
        _f("-sc", "num_speculative_tokens", "json", keys=_VLLM_SPECULATIVE_KEYS),
        _f("--spec-tokens", "num_speculative_tokens"),
    ),
    "sglang": (
        _f("--max-running-requests", "max_num_seqs"),
        _f("--chunked-prefill-size", "max_num_batched_tokens"),
        _f("--context-length", "max_model_len"),
        _f("--mem-fraction-static", "gpu_memory_utilization"),
        _f("--page-size", "block_size"),
        _f("--tp-size --tp --tensor-parallel-size", "tensor_parallel_size"),
        _f("--pp-size --pipeline-parallel-size", "pipeline_parallel_size"),
        _f("--dp-size --dp --data-parallel-size", "data_parallel_size"),
        _f("--cuda-graph-max-bs", "cuda_graph_max_batch_size"),
        _f("--disable-cuda-graph", "enforce_eager", "set", "true"),
        _f("--enable-torch-compile", "compile_level", "set", "1"),
        _f("--attention-backend", "attention_backend", "text"),
        _f("--kv-cache-dtype", "kv_cache_dtype", "text"),
        _f("--speculative-num-steps", "num_speculative_tokens"),
    ),
    "tgi": (
        _f("--max-batch-size", "max_num_seqs"),
        _f("--max-batch-prefill-tokens", "max_num_batched_tokens"),
        _f("--max-total-tokens", "max_model_len"),
        _f("--max-input-tokens --max-input-length", "max_input_tokens"),
        _f("--num-shard", "tensor_parallel_size"),
        _f("--cuda-graphs", "cuda_graph_max_batch_size", "list_max"),
        _f("--cuda-graphs", "enforce_eager", "zero_is", "true"),
        _f("--kv-cache-dtype", "kv_cache_dtype", "text"),
        _f("--speculate", "num_speculative_tokens"),
    ),
    "trtllm": (
        _f("--max_batch_size", "max_num_seqs"),
        _f("--max_num_tokens", "max_num_batched_tokens"),
        _f("--max_seq_len", "max_model_len"),
        _f("--tp_size", "tensor_parallel_size"),
        _f("--pp_size", "pipeline_parallel_size"),
        _f("--kv_cache_free_gpu_memory_fraction", "gpu_memory_utilization"),
    ),
    "llamacpp": (
        _f("--parallel -np", "slots"),
        _f("--ctx-size -c", "context_size"),
        _f("--batch-size -b", "max_num_batched_tokens"),
        _f("--flash-attn -fa", "attention_backend", "text"),
        _f("--cache-type-k -ctk", "kv_cache_dtype", "text"),
        # the renamed flag and the older spellings (exporter/tune/knobs.py): separate entries, as tune moves each
        _f("--spec-draft-n-max", "num_speculative_tokens"),
        _f("--draft-max", "num_speculative_tokens"),
        _f("--draft", "num_speculative_tokens"),
        _f("--draft-n", "num_speculative_tokens"),
    ),
}

#: engine family -> the environment variables read (nothing else of the environment is kept)
ENV: dict[str, tuple[EnvVar, ...]] = {
    "vllm": (EnvVar("VLLM_ATTENTION_BACKEND", "attention_backend"),),
    "sglang": (),
    "tgi": (
        EnvVar("ATTENTION", "attention_backend"),
        EnvVar("MAX_BATCH_SIZE", "max_num_seqs", "number"),
        EnvVar("MAX_BATCH_PREFILL_TOKENS", "max_num_batched_tokens", "number"),
        EnvVar("MAX_TOTAL_TOKENS", "max_model_len", "number"),
        EnvVar("MAX_INPUT_TOKENS", "max_input_tokens", "number"),
        EnvVar("NUM_SHARD", "tensor_parallel_size", "number"),
        EnvVar("CUDA_GRAPHS", "cuda_graph_max_batch_size", "list_max"),
        EnvVar("CUDA_GRAPHS", "enforce_eager", "zero_is", "true"),
        EnvVar("KV_CACHE_DTYPE", "kv_cache_dtype"),
        EnvVar("SPECULATE", "num_speculative_tokens", "number"),
    ),
    "trtllm": (),
    "llamacpp": (
        EnvVar("LLAMA_ARG_N_PARALLEL", "slots", "number"),
        EnvVar("LLAMA_ARG_CTX_SIZE", "context_size", "number"),
        EnvVar("LLAMA_ARG_BATCH", "max_num_batched_tokens", "number"),
        EnvVar("LLAMA_ARG_FLASH_ATTN", "attention_backend"),
        EnvVar("LLAMA_ARG_CACHE_TYPE_K", "kv_cache_dtype"),
        EnvVar("LLAMA_ARG_DRAFT_MAX", "num_speculative_tokens", "number"),
    ),
}

#: engines whose parser accepts ``--max_num_seqs`` for ``--max-num-seqs`` (vLLM's FlexibleArgumentParser)
_UNDERSCORE_FLAGS = frozenset({"vllm"})

#: what an engine serves on /metrics that is a setting: (family, sample name, label or None, setting, kind)
_SERVED: tuple[tuple[str, str, str | None, str, Kind], ...] = (
    ("vllm", "vllm:cache_config_info", "block_size", "block_size", "number"),
    ("vllm", "vllm:cache_config_info", "gpu_memory_utilization", "gpu_memory_utilization", "number"),
    ("vllm", "vllm:cache_config_info", "cache_dtype", "kv_cache_dtype", "text"),
    ("sglang", "sglang:context_len", None, "max_model_len", "number"),
    ("sglang", "sglang:page_size", None, "block_size", "number"),
    ("sglang", "sglang_context_len", None, "max_model_len", "number"),
    ("sglang", "sglang_page_size", None, "block_size", "number"),
    ("sglang", "sglang:spec_num_steps", None, "num_speculative_tokens", "number"),
    ("sglang", "sglang_spec_num_steps", None, "num_speculative_tokens", "number"),
)


@dataclass
class EngineSettings:
    """Settings found so far: numbers and texts by setting name (absent: unknown)."""

    numbers: dict[str, float] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    def put(self, setting: str, kind: Kind, raw: str, value: str = "") -> None:
        """Record ``raw`` for ``setting`` as ``kind``; a value that does not parse is left unknown."""
        if setting in self.numbers or setting in self.texts:
            return  # the first found wins
        if kind == "set":
            self.texts[setting] = value
        elif kind == "text":
            text = raw.strip()
            if _TEXT_OK.match(text) and text.lower() not in ("none", "null"):
                self.texts[setting] = text
        elif kind == "number":
            number = _number(raw)
            if number is not None:
                self.numbers[setting] = number
        elif kind in ("list_max", "zero_is"):
            numbers = [_number(x) for x in re.split(r"[,\s\[\]]+", raw) if x]
            if not numbers or any(n is None for n in numbers):
                return
            top = max(n for n in numbers if n is not None)
            if kind == "list_max" and top > 0:
                self.numbers[setting] = top
            elif kind == "zero_is" and top == 0:
                self.texts[setting] = value

    def merged(self, other: EngineSettings) -> EngineSettings:
        """These settings, with what ``other`` knows and these do not."""
        out = EngineSettings(dict(self.numbers), dict(self.texts))
        for k, v in other.numbers.items():
            out.numbers.setdefault(k, v)
        for k, t in other.texts.items():
            out.texts.setdefault(k, t)
        return out


def _number(raw: str) -> float | None:
    try:
        x = float(raw.strip())
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


def aliases(family: str) -> dict[str, tuple[str, ...]]:
    """Every spelling of ``family``'s flags -> its other spellings (vLLM also accepts ``--max_num_seqs``
    for ``--max-num-seqs``): what ``tune`` finds and rewrites a flag by, whichever spelling it writes."""
    out: dict[str, tuple[str, ...]] = {}
    for flag in FLAGS.get(family, ()):
        names = list(flag.spellings)
        if family in _UNDERSCORE_FLAGS:
            names += ["--" + sp[2:].replace("-", "_") for sp in flag.spellings if sp.startswith("--") and "-" in sp[2:]]
        for sp in names:
            out[sp] = tuple(dict.fromkeys(out.get(sp, ()) + tuple(n for n in names if n != sp)))
    return out


def _canonical(family: str, arg: str) -> str:
    if family in _UNDERSCORE_FLAGS and arg.startswith("--"):
        return "--" + arg[2:].replace("_", "-")
    return arg


def from_argv(family: str, argv: Sequence[str]) -> EngineSettings:
    """Settings written on a command line (``argv`` as /proc/PID/cmdline splits it).

    A flag written twice takes its last value, as every engine's parser does;
    ``--enforce-eager`` then ``--no-enforce-eager`` leaves graphs on.
    """
    flags = FLAGS.get(family, ())
    by_spelling: dict[str, list[Flag]] = {}
    for flag in flags:
        for sp in flag.spellings:
            by_spelling.setdefault(sp, []).append(flag)
    joined = [(sp, f) for f in flags if f.joined for sp in f.spellings if not sp.startswith("--")]
    args = list(argv[:MAX_ARGS])
    last: dict[str, tuple[Flag, str]] = {}
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        matches = by_spelling.get(_canonical(family, name))
        if matches is None:
            for sp, f in joined:
                if arg.startswith(sp) and len(arg) > len(sp) and not arg.startswith("--"):
                    last[f.setting] = (f, arg[len(sp) :])
            continue
        for f in matches:
            if f.kind == "set":
                raw = ""
            elif eq:
                raw = inline
            elif f.kind in ("list_max", "zero_is"):
                raw = " ".join(_values_after(args, i))
            elif i + 1 < len(args):
                raw = args[i + 1]
            else:
                continue
            last["json:" + f.spellings[0] if f.kind == "json" else f.setting] = (f, raw[:4096])
    out = EngineSettings()
    for f, raw in last.values():
        if f.kind == "json":
            _put_json(out, raw, f.keys)
        else:
            out.put(f.setting, f.kind, raw, f.value)
    if family == "llamacpp":
        _derive_llamacpp(out)
    return out


def _values_after(args: Sequence[str], i: int) -> list[str]:
    """The values of a list flag (``--cudagraph-capture-sizes 1 2 4``): up to the next flag."""
    values: list[str] = []
    for nxt in args[i + 1 : i + 1 + 256]:
        if nxt.startswith("-"):
            break
        values.append(nxt)
    return values


def _put_json(out: EngineSettings, raw: str, keys: Mapping[str, tuple[str, Kind]]) -> None:
    try:
        doc = json.loads(raw) if len(raw) <= 4096 else None
    except ValueError:
        return
    if not isinstance(doc, dict):
        return
    for key, (setting, kind) in keys.items():
        value = doc.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, list):
            out.put(setting, kind, " ".join(str(x) for x in value if isinstance(x, (int, float))))
        elif isinstance(value, (int, float, str)):
            out.put(setting, "text" if kind == "text" else kind, str(value))


def _derive_llamacpp(out: EngineSettings) -> None:
    """llama.cpp splits -c over the -np slots: each slot holds ``ctx / np`` (what /props reports)."""
    ctx, slots = out.numbers.get("context_size"), out.numbers.get("slots")
    if ctx and slots and "context_per_slot" not in out.numbers:
        out.numbers["context_per_slot"] = float(int(ctx // slots))
    backend = out.texts.get("attention_backend")
    if backend is not None:  # -fa on|off|auto: name the kernel family, as the other engines do
        out.texts["attention_backend"] = {"on": "flash_attn", "1": "flash_attn", "off": "default", "0": "default"}.get(
            backend.lower(), backend
        )


def from_environ(family: str, environ: Mapping[str, str]) -> EngineSettings:
    """Settings from the engine's environment: only the variables named in ``ENV`` are read."""
    out = EngineSettings()
    for var in ENV.get(family, ()):
        raw = environ.get(var.name)
        if raw is not None:
            out.put(var.setting, var.kind, raw[:4096], var.value)
    if family == "llamacpp":
        _derive_llamacpp(out)
    return out


def from_exposition(family: str, text: str) -> EngineSettings:
    """Settings an engine serves on /metrics (vLLM's cache_config_info labels, SGLang's gauges).

    Reads only the first line of each named family (every data-parallel rank
    reports the same settings), found with ``str.find``: no second parse of the body.
    """
    from exporter.engines.textparse import ParseError, parse

    out = EngineSettings()
    for fam, name, label, setting, kind in _SERVED:
        if fam != family:
            continue
        line = _first_line(text, name)
        if line is None:
            continue
        try:
            exp = parse(line + "\n", {name})
        except ParseError:
            continue
        for labels, value in exp.samples.get(name, ())[:1]:
            raw = labels.get(label) if label is not None else repr(value)
            if raw is not None:
                out.put(setting, kind, raw)
    return out


def _first_line(text: str, name: str) -> str | None:
    for opener in (name + "{", name + " "):
        at = 0 if text.startswith(opener) else text.find("\n" + opener)
        if at < 0:
            continue
        start = at if at == 0 and text.startswith(opener) else at + 1
        end = text.find("\n", start)
        line = text[start : end if end >= 0 else len(text)]
        return line if len(line) <= 8192 else None
    return None


def from_llamacpp_props(doc: Any) -> EngineSettings:
    """Slots and context per slot from a decoded llama.cpp /props body (``total_slots``,
    ``default_generation_settings.n_ctx``)."""
    out = EngineSettings()
    if not isinstance(doc, dict):
        return out
    slots = doc.get("total_slots")
    if isinstance(slots, int) and not isinstance(slots, bool) and 0 < slots < 1 << 31:
        out.numbers["slots"] = float(slots)
    gen = doc.get("default_generation_settings")
    n_ctx = gen.get("n_ctx") if isinstance(gen, dict) else None
    if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and 0 < n_ctx < 1 << 40:
        out.numbers["context_per_slot"] = float(n_ctx)
    return out


#: the engine's own info route and its fields -> (setting, kind): SGLang's ``GET /get_server_info``
#: answers its ServerArgs by their field names (python/sglang/srt/server_args.py; a field left to
#: its derived default is null there, and stays unknown), TGI's ``GET /info`` its router Info
#: (router/src/lib.rs: ``max_input_tokens``, ``max_total_tokens``; ``max_input_length`` before 2.1)
INFO_ROUTES: dict[str, tuple[str, Mapping[str, tuple[str, Kind]]]] = {
    "sglang": (
        "/get_server_info",
        {
            "max_running_requests": ("max_num_seqs", "number"),
            "chunked_prefill_size": ("max_num_batched_tokens", "number"),
            "context_length": ("max_model_len", "number"),
            "mem_fraction_static": ("gpu_memory_utilization", "number"),
            "page_size": ("block_size", "number"),
            "tp_size": ("tensor_parallel_size", "number"),
            "pp_size": ("pipeline_parallel_size", "number"),
            "dp_size": ("data_parallel_size", "number"),
            "cuda_graph_max_bs": ("cuda_graph_max_batch_size", "number"),
            "disable_cuda_graph": ("enforce_eager", "set"),
            "attention_backend": ("attention_backend", "text"),
            "kv_cache_dtype": ("kv_cache_dtype", "text"),
            "speculative_num_steps": ("num_speculative_tokens", "number"),
        },
    ),
    "tgi": (
        "/info",
        {
            "max_total_tokens": ("max_model_len", "number"),
            "max_input_tokens": ("max_input_tokens", "number"),
            "max_input_length": ("max_input_tokens", "number"),
        },
    ),
}


def from_info(family: str, doc: Any) -> EngineSettings:
    """Settings from a decoded info-route body (``INFO_ROUTES``); anything not as documented is unknown."""
    out = EngineSettings()
    route = INFO_ROUTES.get(family)
    if route is None or not isinstance(doc, dict):
        return out
    for key, (setting, kind) in route[1].items():
        value = doc.get(key)
        if kind == "set":
            if isinstance(value, bool):
                out.put(setting, "set", "", "true" if value else "false")
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, (int, float)) and abs(value) < 1 << 53:
            out.put(setting, kind, repr(value) if isinstance(value, float) else str(value))
        elif isinstance(value, str) and kind == "text":
            out.put(setting, kind, value[:MAX_VALUE])
    return out


def read_process(pid: int, family: str, proc_root: str = "/proc") -> EngineSettings:
    """Settings from ``/proc/PID/cmdline`` and, where readable, ``/proc/PID/environ``.

    A process that is gone or unreadable gives nothing (not an error: the
    settings are evidence, not the scrape). Of the environment only the names in
    ``ENV[family]`` are looked at; the rest is dropped as it is split.
    """
    argv = _read_nul_list(f"{proc_root}/{pid}/cmdline")
    settings = from_argv(family, argv) if argv else EngineSettings()
    wanted = {v.name for v in ENV.get(family, ())}
    if wanted:
        env: dict[str, str] = {}
        for item in _read_nul_list(f"{proc_root}/{pid}/environ"):
            name, eq, value = item.partition("=")
            if eq and name in wanted:
                env[name] = value[:4096]
        settings = settings.merged(from_environ(family, env))
    return settings


def _read_nul_list(path: str) -> list[str]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_PROC_BYTES)
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in data.split(b"\0")[:MAX_ARGS] if part]


def setting_points(settings: EngineSettings, labels: Mapping[str, str]) -> list[Sample]:
    """``llm_engine_setting`` samples of the numeric settings (labels: the engine's, plus ``setting``)."""
    return [
        Sample("llm_engine_setting", {**labels, "setting": name}, value)
        for name, value in sorted(settings.numbers.items())
        if name in NUMBER_SETTINGS
    ]


def config_labels(settings: EngineSettings) -> dict[str, str]:
    """The text settings as ``llm_engine_config_info`` labels."""
    return {name: text for name, text in sorted(settings.texts.items()) if name in TEXT_SETTINGS}


def known(settings: Iterable[str]) -> list[str]:
    """The names in ``settings`` that are in the closed vocabulary (for checks and docs)."""
    return [s for s in settings if s in NUMBER_SETTINGS or s in TEXT_SETTINGS]
