"""Every flag, environment name and config file key docs/configuration.md lists parses as written.

Why from the document: the tables are the contract operators copy from (a Helm chart, a
compose file, a shell). Each row's example is given three ways — the flag, the environment
name, the file key — and the three configurations must be equal and differ from the
defaults (the setting is read, and read into the same place). The other direction too:
every option of ``serve``'s parser, every key a section knows, is in the tables, so a new
setting cannot land undocumented. And the README's flag table names nothing the reference
does not.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import build_parser
from exporter.commands import registry
from exporter.config import SERVE_FLAGS, Config, load_config
from exporter.engines.config import KEYS as ENGINE_KEYS
from exporter.familyfilter import KEYS as METRICS_KEYS
from exporter.kubernetes.settings import PARSERS as KUBERNETES_KEYS
from exporter.probe.config import KEYS as PROBE_KEYS
from exporter.values import ENV_PREFIX
from tests.capacity.profiles import tune_doc, write

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
ENGINE = "http://127.0.0.1:9/metrics"
#: a row whose key is under this applies to the first engine: one is configured beside it
NEEDS_ENGINE = "engines[]."
BASE_ENV = {"NODE_NAME": "gpu-node-1"}


def table(heading: str) -> list[list[str]]:
    """The rows of the first table under ``heading``, each cell without its backticks."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    rows: list[list[str]] = []
    for line in text[start:].splitlines()[2:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= {"-", " "}:
            continue
        rows.append([c.replace("`", "") for c in cells])
    assert len(rows) > 1, f"{DOC}: no table under '## {heading}'"
    return rows[1:]  # without the header


def setting_rows() -> list[tuple[str, str, str, str]]:
    """(flag, environment, key, example) of every setting; ``--source.NAME`` expanded for each source."""
    out = []
    for flag, env, key, example, _meaning in table("Settings"):
        if "NAME" in flag:
            for name in registry.SOURCES:
                out.append((f"--no-source.{name}", env.replace("<NAME>", name.upper()), f"sources.{name}", example))
        else:
            out.append((flag.split()[0], env, key, example))
    return out


def _serve_options() -> Iterator[tuple[str, str]]:
    """(option string, dest) of every option ``serve`` takes."""
    parser = build_parser(["serve"])
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = commands.choices["serve"]
    for action in serve._actions:
        if action.option_strings and action.dest != "help":
            for option in action.option_strings:
                yield option, action.dest


class Files:
    """What FILE and DIR stand for, per setting: real files the parsers can read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.secret = root / "secret"
        self.secret.write_text("s3cret\n")
        self.profile = write(
            root / "tune.json", tune_doc({"concurrency": 10, "requests_per_second": 2.0, "tokens_per_second": 200.0})
        )
        self.config = root / "extra.yml"
        self.config.write_text("gpu_interval: 2\n")
        self.trace_dir = root / "traces"
        self.trace_dir.mkdir()

    def value(self, setting: str, example: Any) -> Any:
        if isinstance(example, dict):
            return {k: self.value(f"{setting}.{k}", v) for k, v in example.items()}
        if example == "DIR":
            return str(self.trace_dir)
        if example != "FILE":
            return example
        if "capacity" in setting:
            return str(self.profile)
        return str(self.config if setting.endswith("config") else self.secret)


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


def _load(argv: list[str], env: dict[str, str], doc: dict[str, Any] | None, root: Path) -> Config:
    if doc is not None:
        path = root / "c.yml"
        path.write_text(yaml.safe_dump(doc))
        argv = ["--config", str(path), *argv]
    argv = ["serve", *argv]
    return load_config(build_parser(argv).parse_args(argv), environ={**BASE_ENV, **env})


def _put(doc: dict[str, Any], key: str, value: Any) -> None:
    """``engines[].probe.url`` -> doc["engines"][0]["probe"]["url"] = value (the first engine)."""
    node: Any = doc
    parts = key.split(".")
    for part in parts[:-1]:
        if part.endswith("[]"):
            node = node.setdefault(part[:-2], [{}])[0]
        else:
            node = node.setdefault(part, {})
    node[parts[-1]] = value


@pytest.mark.parametrize(("flag", "env", "key", "example"), setting_rows(), ids=lambda v: str(v)[:40])
def test_each_setting_parses_the_same_three_ways(files: Files, flag: str, env: str, key: str, example: str) -> None:
    value = files.value(flag.lstrip("-"), example)
    attaches = key.startswith(NEEDS_ENGINE) and key != "engines[].url"  # applies to the first engine
    base_doc: dict[str, Any] = {"engines": [{"url": ENGINE}]} if attaches else {}
    extra = ["--profile-dir", str(files.trace_dir)] if flag == "--enable-profile" else []
    switch = flag.startswith("--no-source.") or flag in ("--probe", "--enable-profile", "--kubernetes", "--kubernetes-gpu-labels")
    if flag.startswith("--no-source."):
        assert example == "false", flag
    by_flag = [flag, *extra] if switch else [flag, value, *extra]
    ways = {
        flag: _load(by_flag, {}, dict(base_doc) or None, files.root),
        env: _load(extra, {env: value}, dict(base_doc) or None, files.root),
    }
    if key != "–":
        doc: dict[str, Any] = {"engines": [{"url": ENGINE}]} if attaches else {}
        _put(doc, key, files.value(key, yaml.safe_load(example)))
        ways[key] = _load(extra, {}, doc, files.root)
    default = _load(extra, {}, dict(base_doc) or None, files.root)
    first = next(iter(ways.values()))
    for where, cfg in ways.items():
        assert cfg == first, f"{where} {example!r} is read differently from {flag} {example!r}"
    assert first != default, f"{flag} {example!r}: the configuration equals the default (not read?)"


def test_every_option_of_serve_is_documented_with_its_environment_name() -> None:
    rows = {flag: env for flag, env, _, _ in setting_rows()}
    for option, dest in _serve_options():
        if option.startswith("--source."):
            option = "--no-" + option[2:]
        assert option in rows, f"{option}: not in {DOC.relative_to(ROOT)}"
        assert rows[option] == ENV_PREFIX + dest.upper(), f"{option}: documented as {rows[option]}"


def test_every_key_a_section_knows_is_documented() -> None:
    keys = {key for _, _, key, _ in setting_rows()}
    assert {d for _, d, _, _ in SERVE_FLAGS} <= keys
    assert {f"kubernetes.{k}" for k in KUBERNETES_KEYS} <= keys
    assert {f"metrics.{k}" for k in METRICS_KEYS} <= keys
    assert {r[0] for r in table("`engines:` items")} == set(ENGINE_KEYS)
    assert {r[0] for r in table("`probe:` of an engine")} == set(PROBE_KEYS)


def _item(files: Files, key: str, example: str) -> dict[str, Any]:
    return {"url": ENGINE, key: files.value(key, yaml.safe_load(example))}


@pytest.mark.parametrize(("key", "example"), [(r[0], r[1]) for r in table("`engines:` items")])
def test_each_engine_key_is_read(files: Files, key: str, example: str) -> None:
    with_key = _load([], {}, {"engines": [_item(files, key, example)]}, files.root)
    if key == "url":
        assert with_key.engines[0].url == yaml.safe_load(example)
        return
    without = _load([], {}, {"engines": [{"url": ENGINE}]}, files.root)
    assert with_key.engines != without.engines, f"engines[].{key}: {example} changes nothing"


@pytest.mark.parametrize(("key", "example"), [(r[0], r[1]) for r in table("`probe:` of an engine")])
def test_each_probe_key_is_read(files: Files, key: str, example: str) -> None:
    probe = {key: files.value(key, yaml.safe_load(example))}
    with_key = _load([], {}, {"engines": [{"url": ENGINE, "probe": probe}]}, files.root)
    without = _load([], {}, {"engines": [{"url": ENGINE, "probe": True}]}, files.root)
    assert with_key.engines[0].probe is not None and without.engines[0].probe is not None
    assert with_key.engines[0].probe != without.engines[0].probe, f"probe.{key}: {example} changes nothing"


def test_the_readme_names_no_flag_the_reference_does_not() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Configuration") :]
    section = section[: section.index("\n### ", 1)]
    named = set(re.findall(r"`(--[a-z][a-z0-9-]*)", section))
    # dotted flags (--source.NAME, --metrics.include) read as their prefix
    documented = {flag for flag, _, _, _ in setting_rows()} | {"--source", "--no-source", "--metrics"}
    assert len(named) > 10
    assert named <= documented, sorted(named - documented)


#: keys whose value is a file the parsers open: the examples' paths are replaced by real files
FILE_KEYS = ("bearer_token_file", "ca_bundle", "password_file", "capacity_profile")


def config_blocks() -> list[tuple[str, str]]:
    """(where, text) of every ```yaml block of README.md and docs/*.md that is a `--config` file:
    its top-level keys are config keys (Helm values, manifests and web configs are not)."""
    known = {d for _, d, _, _ in SERVE_FLAGS} | {"engines", "groups", "diagnosis", "kubernetes", "sources", "metrics"}
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for block in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            body = block.group(1)
            try:
                doc = yaml.safe_load(body)
            except yaml.YAMLError:  # a Helm template ({{ .Release.Name }}), not a config file
                continue
            if isinstance(doc, dict) and set(doc) <= known and "helm" not in body.splitlines()[0].lower():
                line = text[: block.start()].count("\n") + 1
                out.append((f"{path.relative_to(ROOT)}:{line}", body))
    return out


def _real_files(node: Any, files: Files) -> Any:
    if isinstance(node, dict):
        return {k: files.value(k, "FILE") if k in FILE_KEYS else _real_files(v, files) for k, v in node.items()}
    if isinstance(node, list):
        return [_real_files(v, files) for v in node]
    return node


def test_the_docs_show_config_files() -> None:
    where = {w.split(":")[0] for w, _ in config_blocks()}
    assert {"README.md", "docs/probe.md", "docs/capacity.md", "docs/diagnosis.md"} <= where, where


@pytest.mark.parametrize(("where", "body"), config_blocks(), ids=[w for w, _ in config_blocks()])
def test_each_config_file_in_the_docs_loads(files: Files, where: str, body: str) -> None:
    doc = _real_files(yaml.safe_load(body), files)
    cfg = _load([], {}, doc, files.root)
    assert len(cfg.engines) == len(doc.get("engines") or []), where


#: environment names of the other commands (report, diagnose, plan; the image's health check)
OTHER_COMMANDS_ENV = ("LLM_EXPORTER_EXPORTER", "LLM_EXPORTER_PROMETHEUS", "LLM_EXPORTER_HEALTHCHECK_URL")


def process_environment() -> set[str]:
    """The names of docs/configuration.md's "Process environment" table (read by serve itself, no flag or key)."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.partition("## Process environment")[2].partition("\n## ")[0]
    return set(re.findall(r"^\| `(LLM_EXPORTER_[A-Z0-9_]+)` \|", section, re.MULTILINE))


def test_the_process_environment_is_read_where_it_says() -> None:
    from exporter import memtrim

    assert process_environment() == {memtrim.PIN_ENV}


def test_every_environment_name_the_docs_mention_is_in_the_reference() -> None:
    # `LLM_EXPORTER_SOURCE_<NAME>` reads as its family LLM_EXPORTER_SOURCE
    documented = {env for _, env, _, _ in setting_rows()} | {"LLM_EXPORTER_SOURCE"} | process_environment()
    mentioned = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        mentioned |= set(re.findall(r"LLM_EXPORTER_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")))
    serve = {m for m in mentioned if not m.startswith(OTHER_COMMANDS_ENV)}
    assert len(serve) > 10
    assert serve <= documented, sorted(serve - documented)
