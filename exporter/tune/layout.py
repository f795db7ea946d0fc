"""The layout of an engine command (TP x PP x DP, its GPUs), the GPU budget a candidate stays inside, and the
layout moves and the quantised build (issue 33).

Why the GPUs are counted from the command line: ``tune`` starts (or applies) the command, so its layout
flags are what the candidate occupies — the same count tune.json records per configuration
(exporter/capacity/layout.py: ``gpus`` = TP x PP x DP). A candidate never asks for more GPUs than the
deployment has: the baseline's, or ``tune --gpus N`` where the operator gives more. A command whose count
cannot be read (llama.cpp, TGI without ``--num-shard``: it shards over every visible GPU) is not held to
a number it does not state, and no layout move is made on it.

Why a layout move halves TP and doubles the other dimension: the all-reduces of tensor parallelism cross
the link twice per layer and step; a TP 4 group over PCIe spends most of each step in them
(exporter/simulator/roofline.py; docs/diagnosis.md, communication_bound). TP 2 x DP 2 on the same four
GPUs all-reduces over half the ranks and serves two batches at once; TP 2 x PP 2 keeps each GPU's share
of the weights (where the model needs all four GPUs' memory) for a pipeline hop instead. One halving per
trial: the accept rule judges each, and the next is proposed from the new best if the link still limits.

Why the fit is checked where it can be: fewer ranks hold more of the weights each. The simulator's
(``--params-b`` and its framebuffer, exporter/simulator/engine.py) are known here, and its own validation
refuses a layout the model's heads do not split over — the same refusal its start would give, without the
start. A real engine's weights are not published: a layout that does not fit fails to start or runs out
of memory, and the accept rule rejects it with that reason (docs/tune.md, accept rule). A KV cache that was
full at the knee says more replicas (more copies of the weights, less KV in all) would preempt: the DP move
is not made then (``KV_NOT_FULL``), the pipeline one, which keeps the memory per GPU, still is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.tune.argv import Change, EngineCommand, model_argument, running_value, set_model
from exporter.tune.knobs import Move

#: engine -> dimension -> the flag tune reads and writes (its other spellings: exporter/tune/argv.py)
LAYOUT_FLAGS: dict[str, dict[str, str]] = {
    "vllm": {"tp": "--tensor-parallel-size", "pp": "--pipeline-parallel-size", "dp": "--data-parallel-size"},
    "sglang": {"tp": "--tp-size", "pp": "--pp-size", "dp": "--dp-size"},
    "tgi": {"tp": "--num-shard"},
    "trtllm": {"tp": "--tp_size", "pp": "--pp_size"},
    "simulator": {"tp": "--tensor-parallel-size", "pp": "--pipeline-parallel-size", "dp": "--data-parallel-size"},
}
#: engines whose absent TP flag is not 1 (TGI shards over every visible GPU): their GPUs are unknown without it
TP_REQUIRED: frozenset[str] = frozenset({"tgi"})
#: TGI's environment spelling of --num-shard
TGI_SHARDS_ENV = "NUM_SHARD"


@dataclass(frozen=True)
class Deployment:
    """What a candidate must stay inside: the GPUs (None: unknown, not checked) and the quantised build named."""

    gpus: int | None = None
    #: ``tune --gpus N`` was given (else ``gpus`` is the baseline's own count)
    gpus_given: bool = False
    #: ``tune --quantized-model PATH``: the quantised build of the served model
    quantized_model: str | None = None

    @classmethod
    def of(cls, base: EngineCommand, gpus: int | None = None, quantized_model: str | None = None) -> Deployment:
        return cls(gpus if gpus is not None else gpus_of(base), gpus is not None, quantized_model)

    def describe(self) -> str:
        if self.gpus is None:
            return "GPUs unknown"
        return f"{self.gpus} GPU{'s' if self.gpus != 1 else ''} ({'tune --gpus' if self.gpus_given else 'the baseline'})"


def _whole(text: str | float | None) -> int | None:
    try:
        value = float(text) if text is not None else None
    except (TypeError, ValueError):
        return None
    if value is None or not math.isfinite(value) or value < 1 or value != int(value):
        return None
    return int(value)


def dimension(cmd: EngineCommand, dim: str) -> int | None:
    """``cmd``'s tensor/pipeline/data-parallel size: its flag, else the engine's default (1; TGI's TP unknown)."""
    flag = LAYOUT_FLAGS.get(cmd.engine, {}).get(dim)
    if flag is None:
        return 1 if cmd.engine in LAYOUT_FLAGS else None
    if cmd.has(flag):
        return _whole(cmd.get(flag))
    if cmd.engine == "tgi" and TGI_SHARDS_ENV in cmd.env:
        return _whole(cmd.env[TGI_SHARDS_ENV])
    if cmd.engine in TP_REQUIRED and dim == "tp":
        return None
    return _whole(running_value(cmd, Move(flag, "set", default=1)))


def dp_attention(cmd: EngineCommand) -> bool:
    """SGLang's DP attention: its data-parallel ranks share the tensor-parallel GPUs (no more GPUs, no replicas)."""
    return cmd.engine == "sglang" and cmd.has("--enable-dp-attention")


def gpus_of(cmd: EngineCommand) -> int | None:
    """The GPUs ``cmd`` occupies: TP x PP x DP (SGLang with DP attention: TP x PP; the simulator's pre-layout
    ``--gpus N`` where its layout flags are all 1); None where the command does not say."""
    if cmd.engine not in LAYOUT_FLAGS:
        return None
    tp, pp, dp = (dimension(cmd, d) for d in ("tp", "pp", "dp"))
    if tp is None or pp is None or dp is None:
        return None
    if dp_attention(cmd):
        dp = 1
    if cmd.engine == "simulator" and tp == pp == dp == 1:
        return _whole(running_value(cmd, Move("--gpus", "set", default=1))) or 1
    return tp * pp * dp


def expert_parallel(cmd: EngineCommand) -> bool:
    """The command runs expert parallelism: vLLM ``--enable-expert-parallel``; SGLang ``--ep-size`` above 1 (or
    the older releases' ``--enable-ep-moe``)."""
    if cmd.engine == "vllm":
        return cmd.has("--enable-expert-parallel")
    if cmd.engine == "sglang":
        return cmd.has("--enable-ep-moe") or (_whole(cmd.get("--ep-size")) or 1) > 1
    return False


def data_parallel(cmd: EngineCommand) -> bool:
    return (dimension(cmd, "dp") or 1) > 1


# ---------------------------------------------------------------------- the moves


def _simulator_refusal(cmd: EngineCommand) -> str | None:
    """Why the simulator would refuse ``cmd``'s layout (its own validation), or its weights would not fit one
    GPU's framebuffer beside the driver and activations; None when it starts."""
    import dataclasses

    from exporter.simulator import calibration as cal
    from exporter.simulator.engine import ACTIVATION_MIB, BASE_FB_MIB
    from exporter.simulator.scenarios import SCENARIOS
    from exporter.simulator.settings import SimConfig, apply_overrides

    scenario = SCENARIOS.get(cmd.get("--scenario") or "healthy")
    overrides = dict(scenario.settings) if scenario else {}
    for f in dataclasses.fields(SimConfig):
        flag = "--" + f.name.replace("_", "-")
        if cmd.has(flag) and cmd.get(flag) is not None:
            overrides[f.name] = cmd.get(flag)
    try:
        config = apply_overrides(SimConfig(), overrides)
    except ValueError as err:
        return f"the simulator refuses it: {err}"
    lay = config.layout
    weights_mib = config.geometry.weight_bytes / lay.ranks / (1024 * 1024)
    if BASE_FB_MIB + weights_mib + ACTIVATION_MIB > cal.FB_TOTAL_MIB:
        return f"{weights_mib:.0f} MiB of weights per GPU do not fit its {cal.FB_TOTAL_MIB} MiB"
    return None


def apply_layout(cmd: EngineCommand, move: Move) -> tuple[EngineCommand, list[Change]] | str:
    """``cmd`` with TP times ``move.by`` (and ``move.couple`` divided by it); else why not."""
    tp = dimension(cmd, "tp")
    flag = move.flag
    if tp is None:
        return f"{flag} unknown (absent, the engine picks its own)"
    by = float(move.by if isinstance(move.by, (int, float)) else 1.0)
    new_tp = tp * by
    if new_tp != int(new_tp) or new_tp < (move.low or 1) or (move.high is not None and new_tp > move.high):
        return f"{flag} {tp}: no {'fewer' if by < 1 else 'more'} ranks"
    out = cmd.copy()
    out.set(flag, str(int(new_tp)))
    changes = [Change(flag, cmd.get(flag), str(int(new_tp)))]
    if move.couple is not None:
        if "dp" in move.couple or "data" in move.couple:
            if dp_attention(cmd):
                return "SGLang's DP attention shares the tensor-parallel GPUs: no replicas to add"
            dim = "dp"
        else:
            dim = "pp"
        other = dimension(cmd, dim)
        if other is None:
            return f"{move.couple} unknown"
        new_other = other / by
        if new_other != int(new_other):
            return f"{move.couple} {other} does not scale by {1 / by:g}"
        out.set(move.couple, str(int(new_other)))
        changes.append(Change(move.couple, cmd.get(move.couple), str(int(new_other))))
    if cmd.engine == "simulator":
        refused = _simulator_refusal(out)
        if refused is not None:
            return refused
    return out, changes


def apply_quantised(cmd: EngineCommand, deployment: Deployment) -> tuple[EngineCommand, list[Change]] | str:
    """``cmd`` serving the quantised build the deployment names; else why not."""
    path = deployment.quantized_model
    if not path:
        return "no quantised build named: tune --quantized-model PATH"
    found = model_argument(cmd)
    if found is None:
        return "the command's model argument cannot be read"
    if found.value == path:
        return "the quantised build is served already"
    out = cmd.copy()
    set_model(out, found, path)
    return out, [Change(found.flag, found.value, path)]


__all__ = [
    "LAYOUT_FLAGS",
    "Deployment",
    "apply_layout",
    "apply_quantised",
    "data_parallel",
    "dimension",
    "dp_attention",
    "expert_parallel",
    "gpus_of",
]
