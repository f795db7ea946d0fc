"""Read and rewrite an engine command line: which engine it is, where it listens, a flag's value, a move applied.

Why a parser of our own rather than each engine's: the tuner must not import the
engines (they are not installed here), and it only needs four things of a command
line — the engine, the URL, a flag's current value, and a copy with one flag
changed — for flags written ``--flag VALUE``, ``--flag=VALUE``, bare ``--flag``,
and leading ``NAME=VALUE`` environment assignments (``VLLM_CPU_KVCACHE_SPACE=4 vllm serve ...``).
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from functools import cache

from exporter.engines import settings
from exporter.tune.knobs import Move

#: flags ``tune`` moves that are no launch setting the runtime reads, with their other spellings;
#: every other flag's spellings come from the runtime's one flag table (exporter/engines/settings.py
#: FLAGS, through ``settings.aliases``), so the tuner and the exporter agree on what a flag is called
TUNE_ONLY_SPELLINGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "llamacpp": (
        ("-ub", "--ubatch-size"),
        ("-t", "--threads"),
        ("--cache-type-v", "-ctv"),
        ("--split-mode", "-sm"),
        ("-m", "--model"),
    ),
    "sglang": (("--ep-size", "--ep", "--expert-parallel-size"), ("--model-path", "--model")),
    # the simulator takes vLLM's layout spellings (exporter/simulator/settings.py aliases)
    "simulator": (
        ("--tensor-parallel-size", "-tp"),
        ("--pipeline-parallel-size", "-pp"),
        ("--data-parallel-size", "-dp"),
    ),
}
#: the flag naming the served model, per engine (vLLM and trtllm-serve also take it as the first argument)
MODEL_FLAGS: dict[str, tuple[str, ...]] = {
    "vllm": ("--model",),
    "sglang": ("--model-path",),
    "tgi": ("--model-id",),
    "trtllm": (),
    "llamacpp": ("-m",),
    "simulator": (),
}
#: the positional model argument's name in a change (``model=PATH`` in apply mode's ``{changes}``)
MODEL_ARGUMENT = "model"


@cache
def flag_aliases(engine: str) -> dict[str, tuple[str, ...]]:
    """Every spelling of ``engine``'s flags -> its other spellings (``-np`` -> ``--parallel``)."""
    out = dict(settings.aliases(engine))
    for names in TUNE_ONLY_SPELLINGS.get(engine, ()):
        for sp in names:
            out[sp] = tuple(n for n in names if n != sp)
    return out


def _representative(engine: str, name: str) -> str:
    """One spelling per flag, so a flag written two ways in two commands is one change (the shortest)."""
    return min((name, *flag_aliases(engine).get(name, ())), key=lambda n: (len(n), n))


#: default port when the command does not give one
DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "tgi": 3000, "trtllm": 8000, "llamacpp": 8080, "simulator": 8000}
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class ArgvError(ValueError):
    """An engine command line the tuner cannot use: one line, named reason."""


@dataclass
class EngineCommand:
    """An engine command: environment assignments, then the program and its arguments."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    engine: str = ""

    @classmethod
    def parse(cls, tokens: list[str], engine: str | None = None) -> EngineCommand:
        rest = list(tokens)
        if rest and rest[0] == "env":
            rest = rest[1:]
        env: dict[str, str] = {}
        while rest and _ENV.match(rest[0]):
            name, _, value = rest.pop(0).partition("=")
            env[name] = value
        if not rest:
            raise ArgvError("no engine command after --")
        found = engine or identify(rest)
        if found is None:
            raise ArgvError(f"cannot tell which engine {os.path.basename(rest[0])!r} is: pass --engine-type")
        return cls(rest, env, found)

    # ------------------------------------------------------------------ reading

    def _spellings(self, flag: str) -> tuple[str, ...]:
        return (flag, *flag_aliases(self.engine).get(flag, ()))

    def _find(self, flag: str) -> tuple[int, str | None] | None:
        """(index of the flag, its value or None when bare/joined-less) — the last occurrence wins."""
        names = self._spellings(flag)
        found: tuple[int, str | None] | None = None
        for i, tok in enumerate(self.argv):
            head, eq, tail = tok.partition("=")
            if tok in names:
                nxt = self.argv[i + 1] if i + 1 < len(self.argv) else None
                found = (i, None if nxt is None or _is_flag(nxt) else nxt)
            elif eq and head in names:
                found = (i, tail)
        return found

    def has(self, flag: str) -> bool:
        return flag in self.env if _is_env(flag) else self._find(flag) is not None

    def get(self, flag: str) -> str | None:
        if _is_env(flag):
            return self.env.get(flag)
        found = self._find(flag)
        return None if found is None else found[1]

    # ------------------------------------------------------------------ writing

    def copy(self) -> EngineCommand:
        return EngineCommand(list(self.argv), dict(self.env), self.engine)

    def set(self, flag: str, value: str) -> None:
        if _is_env(flag):
            self.env[flag] = value
            return
        found = self._find(flag)
        if found is None:
            self.argv += [flag, value]
            return
        i, old = found
        tok = self.argv[i]
        if "=" in tok and tok.partition("=")[0] in self._spellings(flag):
            self.argv[i] = f"{tok.partition('=')[0]}={value}"
        elif old is None:
            self.argv.insert(i + 1, value)
        else:
            self.argv[i + 1] = value

    def add_bare(self, flag: str) -> None:
        if self._find(flag) is None:
            self.argv.append(flag)

    def drop(self, flag: str) -> None:
        while (found := self._find(flag)) is not None:
            i, value = found
            del self.argv[i : i + (2 if value is not None and "=" not in self.argv[i] else 1)]

    # ------------------------------------------------------------------ output

    def full(self) -> list[str]:
        """The command as one argv (environment assignments first, as ``env`` takes them)."""
        if not self.env:
            return list(self.argv)
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), *self.argv]

    def shell(self) -> str:
        return shlex.join(self.full())

    def args_text(self) -> str:
        """The engine's arguments (without the program), shell-quoted: what apply mode's ``$LLM_TUNE_ARGS`` holds."""
        return shlex.join(self.argv[1:])

    def url(self) -> str:
        """Where the command listens, from its own --host/--port (or the engine's defaults)."""
        if self.engine == "simulator":
            listen = self.get("--listen-address") or f"127.0.0.1:{DEFAULT_PORTS['simulator']}"
            host, _, port = listen.rpartition(":")
        else:
            host = self.get("--hostname" if self.engine == "tgi" else "--host") or "127.0.0.1"
            port = self.get("--port") or str(DEFAULT_PORTS[self.engine])
        if host in ("", "0.0.0.0", "::", "[::]"):
            host = "127.0.0.1"
        return f"http://{host}:{port}"


def _is_flag(tok: str) -> bool:
    if not tok.startswith("-") or tok == "-":
        return False
    try:
        float(tok)  # a negative number is a value
    except ValueError:
        return True
    return False


def _is_env(flag: str) -> bool:
    return not flag.startswith("-")


def identify(argv: list[str]) -> str | None:
    """The engine a command line starts, from its program and module; None when unknown."""
    prog = os.path.basename(argv[0])
    words = [os.path.basename(a) for a in argv[:4]]
    joined = " ".join(argv[:4])
    if "simulate" in argv[:4] and ("llm-layer-exporter" in words or "exporter" in argv[:4]) or "exporter.simulator" in joined:
        return "simulator"
    if prog == "llama-server" or prog.startswith("llama-server"):
        return "llamacpp"
    if prog == "text-generation-launcher":
        return "tgi"
    if prog == "trtllm-serve":
        return "trtllm"
    if prog == "vllm" or "vllm.entrypoints" in joined:
        return "vllm"
    if "sglang" in joined:
        return "sglang"
    return None


@dataclass(frozen=True)
class Change:
    flag: str
    old: str | None
    new: str | None

    def as_dict(self) -> dict[str, str | None]:
        return {"flag": self.flag, "from": self.old, "to": self.new}


def _number(text: str | float | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _fmt(value: float, integer: bool) -> str:
    if integer:
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def engine_default(cmd: EngineCommand, move: Move) -> float | str | None:
    """The value the engine runs with when the flag is absent: the simulator's scenario knows it; else the table's."""
    if cmd.engine == "simulator" and move.flag.startswith("--"):
        from exporter.simulator.scenarios import SCENARIOS
        from exporter.simulator.settings import SimConfig

        name = move.flag[2:].replace("-", "_")
        scenario = SCENARIOS.get(cmd.get("--scenario") or "healthy")
        settings = dict(scenario.settings) if scenario else {}
        if name in settings:
            return str(settings[name])
        if hasattr(SimConfig, name):
            return str(getattr(SimConfig(), name))
    return move.default


def running_value(cmd: EngineCommand, move: Move) -> float | str | None:
    """The value of ``move``'s flag the engine runs with: as the command line sets it, else ``engine_default``."""
    return cmd.get(move.flag) if cmd.has(move.flag) else engine_default(cmd, move)


def apply_move(cmd: EngineCommand, move: Move) -> tuple[EngineCommand, list[Change]] | None:
    """``cmd`` with ``move`` applied and the changes made; None when the move does not apply (at a bound, absent)."""
    out = cmd.copy()
    default = engine_default(cmd, move)
    current = cmd.get(move.flag)
    present = cmd.has(move.flag)
    if move.op in ("on", "off"):
        if present == (move.op == "on"):
            return None
        out.add_bare(move.flag) if move.op == "on" else out.drop(move.flag)
        return out, [Change(move.flag, "on" if present else None, "on" if move.op == "on" else None)]
    if move.op == "set":
        base = current if present else (None if default is None else str(default))
        if base is not None and str(base).lower() == str(move.by).lower():
            return None
        out.set(move.flag, str(move.by))
        return out, [Change(move.flag, current, str(move.by))]
    cur = _number(current) if present else _number(default)
    if cur is None or move.by is None:
        return None
    by = float(move.by)
    new = cur * by if move.op == "mul" else cur + by
    if move.integer:
        new = float(math.floor(new)) if new < cur else float(math.ceil(new))
    if move.low is not None:
        new = max(new, move.low)
    if move.high is not None:
        new = min(new, move.high)
    if move.integer:
        new = float(round(new))
    if abs(new - cur) < 1e-9:
        return None
    out.set(move.flag, _fmt(new, move.integer))
    changes = [Change(move.flag, current, _fmt(new, move.integer))]
    if move.couple is not None and cur > 0:
        coupled = _number(cmd.get(move.couple))
        if coupled is not None and coupled > 0:  # -c 0 (the model's own context) is left alone
            scaled = _fmt(round(coupled * new / cur), True)
            out.set(move.couple, scaled)
            changes.append(Change(move.couple, cmd.get(move.couple), scaled))
    return out, changes


@dataclass(frozen=True)
class ModelArgument:
    """Where a command names its model: a flag (``--model-path``), TGI's ``MODEL_ID`` or a positional argument."""

    #: the flag, the environment variable, or MODEL_ARGUMENT for a positional argument
    flag: str
    value: str
    #: the positional argument's index in ``argv`` (None: a flag or a variable)
    index: int | None = None


def model_argument(cmd: EngineCommand) -> ModelArgument | None:
    """The model ``cmd`` serves and where it is written; None where it cannot be read."""
    for flag in MODEL_FLAGS.get(cmd.engine, ()):
        value = cmd.get(flag)
        if value is not None:
            return ModelArgument(flag, value)
    if cmd.engine == "tgi" and cmd.env.get("MODEL_ID"):
        return ModelArgument("MODEL_ID", cmd.env["MODEL_ID"])
    if cmd.engine in ("vllm", "trtllm"):
        at = 2 if len(cmd.argv) > 1 and cmd.argv[1] == "serve" else 1
        if cmd.engine == "vllm" and at != 2:
            return None  # python -m vllm.entrypoints... names it with --model only
        if len(cmd.argv) > at and not _is_flag(cmd.argv[at]):
            return ModelArgument(MODEL_ARGUMENT, cmd.argv[at], at)
    return None


def set_model(cmd: EngineCommand, where: ModelArgument, value: str) -> None:
    """Write ``value`` where ``cmd`` names its model (``where``: ``model_argument(cmd)``)."""
    if where.index is not None:
        cmd.argv[where.index] = value
    else:
        cmd.set(where.flag, value)


def changes_between(before: EngineCommand, after: EngineCommand) -> list[Change]:
    """Every flag (and environment variable) whose value differs, in the order of ``after``; a positional
    model argument that differs first (``model``)."""
    out: list[Change] = []
    was, now = model_argument(before), model_argument(after)
    if was is not None and now is not None and was.index is not None and was.value != now.value:
        out.append(Change(MODEL_ARGUMENT, was.value, now.value))
    names = _flag_names(after) + [n for n in _flag_names(before) if n not in _flag_names(after)]
    for name in names:
        a, b = before.has(name), after.has(name)
        va, vb = before.get(name), after.get(name)
        if (a, va) != (b, vb):
            out.append(Change(name, (va or "on") if a else None, (vb or "on") if b else None))
    for name in sorted(set(before.env) | set(after.env)):
        if before.env.get(name) != after.env.get(name):
            out.append(Change(name, before.env.get(name), after.env.get(name)))
    return out


def _flag_names(cmd: EngineCommand) -> list[str]:
    names: list[str] = []
    for tok in cmd.argv[1:]:
        if _is_flag(tok):
            name = _representative(cmd.engine, tok.partition("=")[0])
            if name not in names:
                names.append(name)
    return names


__all__ = [
    "MODEL_ARGUMENT",
    "MODEL_FLAGS",
    "TUNE_ONLY_SPELLINGS",
    "ArgvError",
    "Change",
    "EngineCommand",
    "ModelArgument",
    "apply_move",
    "changes_between",
    "identify",
    "model_argument",
    "set_model",
]
