"""Every bad configuration value is one line naming the setting and exit status 2, never a traceback.

The settings are enumerated from the code, not listed here, so a key added later is
fuzzed too: every option of the `serve` parser (and its LLM_EXPORTER_<DEST> variable),
every top-level, `engines[]`, `probe:`, `basic_auth:`, `kubernetes:`, `sources:`, `metrics:` and
`diagnosis:` key of the YAML file, and every key of the web config. Each gets huge
integers (10**400 once ended in OverflowError in every duration, interval, size and
threshold), negative, wrong-typed, over-long (a 5000-character file name once ended in
ENAMETOOLONG in the web TLS config) and non-UTF-8 values, and a bad value that a flag
overrides. The bulk runs the parsers in-process; a sample runs the real CLI.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.commands import registry
from exporter.config import SERVE_FLAGS, add_serve_arguments, load_config
from exporter.diagnosis.thresholds import Thresholds
from exporter.engines.config import KEYS as engine_keys
from exporter.errors import UsageError
from exporter.familyfilter import KEYS as metrics_keys
from exporter.kubernetes import settings as kube_settings
from exporter.probe import config as probe_config
from exporter.values import ENV_PREFIX
from exporter.webconfig import load_web_config
from tests.support.ports import free_port
from tests.tls import self_signed_cert

ROOT = Path(__file__).resolve().parents[2]
ENGINE = "http://127.0.0.1:1/metrics"
HUGE = 10**400
LONG = "x" * 5000
LONG_PATH = "/tmp/" + "a" * 5000
#: what os.environ and argv hold for the bytes ff fe (not UTF-8): surrogate escapes
NON_UTF8 = b"\xff\xfe".decode("utf-8", "surrogateescape")

#: hostile strings, as a flag or an environment variable carries them
TEXT_VALUES = [
    str(HUGE),
    "-" + str(HUGE),
    "1" * 5000,
    "-1",
    "-0.5",
    "0",
    "nan",
    "inf",
    "-inf",
    "1e400",
    LONG,
    LONG_PATH,
    NON_UTF8,
    "/tmp/" + NON_UTF8,
    "１２",  # fullwidth digits: int() and float() take them
    "²",
    "a\nb",
    "\x01",
    "a\x00b",
    " ",
    "[1]",
    "http://user:pw@[::1",
    "http://127.0.0.1:99999",
]
#: hostile YAML values
YAML_VALUES: list[Any] = [
    HUGE,
    -HUGE,
    -1,
    -0.5,
    0,
    1.5,
    1e300,
    True,
    None,
    [],
    [HUGE],
    {},
    {"a": HUGE},
    LONG,
    LONG_PATH,
    float("nan"),
    float("inf"),
    "a\x00b",
    "１２",
    "http://user:pw@[::1",
]


@dataclasses.dataclass(frozen=True)
class Flag:
    flag: str
    dest: str
    takes_value: bool

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_serve_arguments(p, sections=(registry.CONFIG_SECTION,))
    return p


def serve_flags() -> list[Flag]:
    """Every option `serve` takes, from its parser (a new flag is picked up without editing this test)."""
    out = []
    for action in _parser()._actions:
        if not action.option_strings or action.dest in ("help", "config"):
            continue
        takes_value = action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction)
        out.append(Flag(action.option_strings[0], action.dest, takes_value))
    return out


def yaml_keys() -> list[tuple[str, ...]]:
    """Every documented YAML key as a path: ("gpu_interval",), ("engines", "timeout"), ..."""
    keys: list[tuple[str, ...]] = [(dest,) for _, dest, _, _ in SERVE_FLAGS]
    keys += [("engines", k) for k in sorted(engine_keys) if k not in ("url",)]
    keys += [("engines", "url")]
    keys += [("engines", "probe", k) for k in sorted(probe_config.KEYS)]
    keys += [("engines", "basic_auth", k) for k in ("username", "password_file")]
    keys += [("kubernetes", k) for k in kube_settings.FLAGS]
    keys += [("sources", name) for name in registry.SOURCES]
    keys += [("metrics", k) for k in metrics_keys]
    keys += [("diagnosis", f.name) for f in dataclasses.fields(Thresholds)]
    keys += [("groups", "tp0"), ("groups",), ("engines",), ("diagnosis",), ("kubernetes",), ("sources",), ("metrics",)]
    return keys


def _document(path: tuple[str, ...], value: Any, secret: Path) -> dict[str, Any]:
    """A config document with `value` at `path` (and what the key needs beside it to be read)."""
    if path[0] == "engines" and len(path) > 1:
        engine: dict[str, Any] = {"url": ENGINE}
        if len(path) == 2:
            engine[path[1]] = value
        elif path[1] == "basic_auth":
            auth = {"username": "u", "password_file": str(secret)}
            auth[path[2]] = value
            engine["basic_auth"] = auth
        else:
            engine["probe"] = {path[2]: value}
        return {"engines": [engine]}
    if len(path) == 2:
        return {path[0]: {path[1]: value}}
    return {path[0]: value}


def _dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, width=10**6)


def start_up(argv: list[str], env: dict[str, str]) -> None:
    """What `serve` checks before anything starts: the config, then the web config file."""
    cfg = load_config(_parser().parse_args(argv), environ=env)
    if cfg.web_config_file:
        try:
            load_web_config(cfg.web_config_file)
        except ValueError as err:  # exporter/commands/serve.py does the same
            raise UsageError(f"--web-config-file: {err}") from None


def assert_one_line(argv: list[str], env: dict[str, str], names: tuple[str, ...]) -> None:
    """Accepted, or refused by one UsageError line of bounded length that names the setting."""
    try:
        start_up(argv, env)
    except UsageError as err:
        text = str(err)
        assert "\n" not in text and "\r" not in text and len(text) <= 500, repr(text[:600])
        assert any(n in text for n in names), f"{names} not named in {text!r}"
        assert "pw@" not in text, f"a URL's password reached the error line: {text!r}"


def _flag_cases() -> Iterator[tuple[Flag, str]]:
    for f in serve_flags():
        for v in TEXT_VALUES:
            yield f, v


def test_the_catalogue_covers_every_kind_of_setting() -> None:
    flags = {f.flag for f in serve_flags()}
    assert {"--gpu-interval", "--engine", "--engine-pid", "--probe-url", "--kubernetes-interval"} <= flags
    assert any(f.startswith("--source.") for f in flags)
    keys = yaml_keys()
    assert ("diagnosis", "window_seconds") in keys and ("engines", "probe", "timeout") in keys
    assert len(flags) >= 30 and len(keys) >= 100


@pytest.mark.parametrize("flag", serve_flags(), ids=lambda f: f.flag)
def test_every_flag_and_variable_with_every_hostile_string(flag: Flag) -> None:
    """Each flag, and its environment variable, given each hostile string (flags in-process)."""
    base = [] if flag.flag == "--engine" else ["--engine", ENGINE]
    names = (flag.flag, flag.env, flag.dest)
    for value in TEXT_VALUES:
        if flag.takes_value:
            assert_one_line([*base, f"{flag.flag}={value}"], {}, names)
        assert_one_line(base, {flag.env: value}, names)


@pytest.mark.parametrize("path", yaml_keys(), ids=".".join)
def test_every_yaml_key_with_every_hostile_value(tmp_path: Path, path: tuple[str, ...]) -> None:
    secret = tmp_path / "secret"
    secret.write_text("pw")
    conf = tmp_path / "c.yaml"
    for value in YAML_VALUES:
        conf.write_text(_dump(_document(path, value, secret)))
        assert_one_line(["--config", str(conf)], {"NODE_NAME": "node-1"}, _yaml_names(path, conf))


def _yaml_names(path: tuple[str, ...], conf: Path) -> tuple[str, ...]:
    """How an error line may name a YAML key: the key, or its flag (serve names --web-config-file so)."""
    return (f"{path[-1]}:", f"{path[-1]} ", f"{path[-1]}.", f"{path[-1]}[", "--" + path[-1].replace("_", "-"))


def test_a_bad_file_or_environment_value_is_refused_even_when_a_flag_overrides_it(tmp_path: Path) -> None:
    """The flag wins for a good value, but a bad one underneath is still a mistake to report."""
    conf = tmp_path / "c.yaml"
    good = {"interval": "1", "timeout": "0.5", "seconds": "1"}
    checked = 0
    for _, dest, _, _ in SERVE_FLAGS:
        kind = next((k for k in good if dest.endswith(k)), None)
        if kind is None:
            continue
        flag = "--" + dest.replace("_", "-")
        conf.write_text(_dump({dest: HUGE}))
        with pytest.raises(UsageError) as err:
            start_up(["--config", str(conf), flag, good[kind], "--gpu-interval", "2", "--engine-interval", "2"], {})
        assert f"{conf}: {dest}: expected a positive number" in str(err.value)
        with pytest.raises(UsageError) as err:
            start_up([flag, good[kind], "--gpu-interval", "2"], {ENV_PREFIX + dest.upper(): str(HUGE)})
        assert str(err.value).startswith(ENV_PREFIX + dest.upper() + ": expected a positive number")
        checked += 1
    assert checked >= 5


#: files that are not UTF-8 or not sane YAML: each must end start-up in one line naming the file
BAD_FILES = {
    "latin1.yaml": b"gpu_interval: 1\nlog_level: \xe9\xff\n",
    "digits.yaml": b"gpu_interval: " + b"1" * 5000 + b"\n",
    "deep.yaml": b"diagnosis: " + b"[" * 20000 + b"]" * 20000 + b"\n",
    "key.yaml": b"? " + b"1" * 100 + b"\n: 1\n",
    "control.yaml": b"log_level: \x07\n",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_file_that_is_not_utf8_or_not_sane_yaml_is_one_line(tmp_path: Path, name: str) -> None:
    f = tmp_path / name
    f.write_bytes(BAD_FILES[name])
    with pytest.raises(UsageError) as err:  # refused, not accepted: then the line itself, as assert_one_line checks it
        start_up(["--config", str(f)], {})
    text = str(err.value)
    assert "\n" not in text and "\r" not in text and len(text) <= 500 and name in text, repr(text[:600])


@pytest.mark.parametrize("kind", ["long", "directory", "nul", "non-utf8", "device"])
def test_a_config_path_that_cannot_be_a_config_file_is_one_line(tmp_path: Path, kind: str) -> None:
    path = {"long": LONG_PATH, "directory": str(tmp_path), "nul": "/nonexistent\x00", "non-utf8": "/tmp/" + NON_UTF8}.get(
        kind, "/dev/zero"
    )
    assert_one_line(["--config", path], {}, ("--config",))
    assert_one_line([], {ENV_PREFIX + "CONFIG": path}, ("--config",))


def web_config_keys() -> list[tuple[str, ...]]:
    from exporter import webconfig

    keys: list[tuple[str, ...]] = [("tls_server_config", k) for k in sorted(webconfig._TLS_KEYS)]
    return [*keys, ("basic_auth_users", "prometheus"), ("basic_auth_users",), ("tls_server_config",)]


@pytest.mark.parametrize("path", web_config_keys(), ids=".".join)
def test_every_web_config_key_with_every_hostile_value(tmp_path: Path, path: tuple[str, ...]) -> None:
    web = tmp_path / "web.yaml"
    cert, key = self_signed_cert(tmp_path)
    for value in [*YAML_VALUES, "$2y$31$" + "a" * 53, "$2b$15$" + "a" * 53]:
        doc: dict[str, Any] = {path[0]: {path[1]: value} if len(path) == 2 else value}
        if path[0] == "tls_server_config" and len(path) == 2:
            doc[path[0]] = {"cert_file": str(cert), "key_file": str(key), path[1]: value}
        web.write_text(_dump(doc))
        assert_one_line(["--web-config-file", str(web)], {}, (path[-1],))


@pytest.mark.parametrize(
    "body", [b"basic_auth_users: {u: \xff}\n", b"basic_auth_users: {" + b"[" * 20000 + b"\n"], ids=["non-utf8", "deep"]
)
def test_a_web_config_file_that_is_not_utf8_or_not_sane_yaml_is_one_line(tmp_path: Path, body: bytes) -> None:
    web = tmp_path / "web.yaml"
    web.write_bytes(body)
    assert_one_line(["--web-config-file", str(web)], {}, (str(web),))


_ALL_FLAGS = serve_flags()
_KEYS = yaml_keys()
_hostile_text = st.one_of(
    st.sampled_from(TEXT_VALUES),
    st.text(max_size=40),
    st.integers(min_value=-(10**500), max_value=10**500).map(str),
    st.floats().map(repr),
    st.binary(max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
_hostile_yaml = st.one_of(
    st.sampled_from(YAML_VALUES),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.booleans(),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(_ALL_FLAGS), value=_hostile_text, via_env=st.booleans())
def test_property_any_string_for_any_flag_or_variable_is_one_line(flag: Flag, value: str, via_env: bool) -> None:
    value = value.replace("\x00", "")  # argv and environ cannot carry NUL
    base = [] if flag.flag == "--engine" else ["--engine", ENGINE]
    if via_env or not flag.takes_value:
        assert_one_line(base, {flag.env: value} if value else {}, (flag.flag, flag.env, flag.dest))
    else:
        assert_one_line([*base, f"{flag.flag}={value}"], {}, (flag.flag, flag.env, flag.dest))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(_KEYS), value=_hostile_yaml)
def test_property_any_value_for_any_yaml_key_is_one_line(tmp_path: Path, path: tuple[str, ...], value: Any) -> None:
    secret = tmp_path / "secret"
    secret.write_text("pw")
    conf = tmp_path / "c.yaml"
    conf.write_text(_dump(_document(path, value, secret)))
    assert_one_line(["--config", str(conf)], {"NODE_NAME": "node-1"}, _yaml_names(path, conf))


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("llm-layer-exporter")
    return [str(script)] if script.exists() else [sys.executable, "-m", "exporter"]


def test_the_real_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """A sample through `llm-layer-exporter serve` in a subprocess: stderr, exit status, no traceback."""
    (tmp_path / "huge.yaml").write_text(f"engine_timeout: {HUGE}\n")
    (tmp_path / "latin1.yaml").write_bytes(b"log_level: \xe9\n")
    (tmp_path / "thresholds.yaml").write_text(f"diagnosis:\n  window_seconds: {HUGE}\n")
    (tmp_path / "web.yaml").write_text(f"tls_server_config:\n  cert_file: {LONG_PATH}\n  key_file: {LONG_PATH}\n")
    (tmp_path / "cost.yaml").write_text("basic_auth_users:\n  prometheus: $2y$31$" + "a" * 53 + "\n")
    port = free_port()
    cases: list[tuple[list[str | bytes], dict[str, str], str]] = [
        (["--gpu-interval", str(HUGE)], {}, "--gpu-interval: expected a positive number"),
        ([], {"LLM_EXPORTER_ENGINE_TIMEOUT": str(HUGE)}, "LLM_EXPORTER_ENGINE_TIMEOUT: expected a positive number"),
        (["--config", str(tmp_path / "huge.yaml")], {}, "engine_timeout: expected a positive number"),
        (["--config", str(tmp_path / "latin1.yaml")], {}, "is not UTF-8 text"),
        (["--config", str(tmp_path / "thresholds.yaml")], {}, "diagnosis.window_seconds"),
        (["--web-config-file", str(tmp_path / "web.yaml")], {}, "tls_server_config.cert_file"),
        (["--web-config-file", str(tmp_path / "cost.yaml")], {}, "bcrypt cost 31 is above the maximum 14"),
        ([b"--engine-max-series", b"\xff\xfe"], {}, "--engine-max-series: expected a positive integer"),
        (["--config", str(tmp_path / "huge.yaml"), "--engine-timeout", "1"], {}, "engine_timeout: expected a positive"),
    ]
    failures = []
    for argv, env, needle in cases:
        cmd = [*_cli(), "serve", "--gpu-source", "none", "--listen-address", f"127.0.0.1:{port}", *argv]
        out = subprocess.run(cmd, capture_output=True, cwd=ROOT, timeout=60, env={**os.environ, **env})
        stderr = out.stderr.decode("utf-8", "backslashreplace")
        lines = stderr.strip().splitlines()
        ok = (
            out.returncode == 2
            and len(lines) == 1
            and lines[0].startswith("llm-layer-exporter serve: error: ")
            and needle in lines[0]
            and "Traceback" not in stderr
        )
        if not ok:
            failures.append(f"{argv!r:.80} {env}: rc={out.returncode} stderr={stderr[-500:]!r}")
    assert not failures, "\n".join(failures)
