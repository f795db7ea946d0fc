"""`llm-layer-exporter schema`: print the metric schema as JSON or Markdown.

docs/metrics.md is this command's Markdown output; a test fails when it is stale.

Given serve's family filter (``--metrics.include`` / ``--metrics.exclude``, their
``LLM_EXPORTER_METRICS_*`` variables, or the ``metrics:`` section of ``--config`` /
``LLM_EXPORTER_CONFIG``), it marks what that ``serve`` would leave out of /metrics:
``"published"`` per metric and a ``"filter"`` object in JSON, a closing table in
Markdown; the start-up warnings go to stderr. Why here: an operator checks a filter
before rolling it out, with the same flags or file, and without a GPU. Only the
``metrics:`` section of the file is read; ``serve`` checks the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping

from exporter import familyfilter, schema
from exporter.errors import UsageError
from exporter.familyfilter import FamilyFilter
from exporter.values import ENV_PREFIX, one_line, plain, read_yaml_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("json", "markdown"), default="json", help="output format (default json)")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="serve's YAML config file: its `metrics:` section marks what is left out (env LLM_EXPORTER_CONFIG)",
    )
    familyfilter.add_arguments(parser)


def render(fmt: str, families: FamilyFilter | None = None) -> str:
    """The schema; with an active ``families``, what it leaves out of /metrics marked."""
    marked = families if families is not None and families.active else None
    if fmt == "json":
        if marked is None:
            return schema.to_json() + "\n"
        return _json_marked(marked) + "\n"
    from exporter.engines import coverage, value_rewrites

    text = schema.to_markdown(coverage(), value_rewrites())
    return text if marked is None else text + _markdown_marked(marked)


def _json_marked(families: FamilyFilter) -> str:
    doc = json.loads(schema.to_json())
    for metric in doc["metrics"]:
        metric["published"] = families.published(metric["name"])
    doc["filter"] = {"include": list(families.include), "exclude": list(families.exclude), "excluded": list(families.excluded())}
    return json.dumps(doc, indent=2)


def _markdown_marked(families: FamilyFilter) -> str:
    def globs(patterns: tuple[str, ...], empty: str) -> str:
        return ", ".join(f"`{p}`" for p in patterns) or empty

    out = [
        "",
        "## Left out of /metrics by this configuration",
        "",
        f"include: {globs(families.include, 'all')}; exclude: {globs(families.exclude, 'none')}. "
        "The `llm_exporter_*` health families are always published; the diagnosis still reads every family.",
        "",
        "| name | layer |",
        "|---|---|",
    ]
    out += [f"| `{name}` | {schema.SPECS[name].layer} |" for name in families.excluded()]
    return "\n".join(out) + "\n"


def load_families(args: argparse.Namespace, env: Mapping[str, str]) -> FamilyFilter:
    """The filter serve would build from the same flags, environment and config file's `metrics:`."""
    path = getattr(args, "config", None) or env.get(ENV_PREFIX + "CONFIG")
    section = None
    if path:
        try:
            data = read_yaml_file(path)
        except ValueError as err:
            raise UsageError(one_line(f"--config: {err}")) from None
        if data is not None and not isinstance(data, dict):
            raise UsageError(one_line(f"--config: {plain(path)}: expected a mapping at the top level"))
        section = (data or {}).get(familyfilter.SECTION)
    return familyfilter.load(args, env, section, path)


def run(args: argparse.Namespace) -> int:
    families = load_families(args, os.environ)
    for line in families.warnings():
        print(f"llm-layer-exporter schema: warning: {line}", file=sys.stderr)
    print(render(args.format, families), end="")
    return 0
