"""--parallel-group: one llm_parallel_node_group_info{group} series per exporter, for the fleet rules (issue 15)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from exporter.collector import render_text
from exporter.config import add_serve_arguments, load_config
from exporter.diagnosis.parallel import ParallelStep
from exporter.errors import UsageError
from exporter.store import SnapshotStore
from tests.diagnosis.diag_points import gpu, samples


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


def test_flag_environment_and_file_set_the_group(tmp_path: Path) -> None:
    assert load_config(_args(), environ={}).parallel_group is None
    assert load_config(_args("--parallel-group", "llama-70b-pp0"), environ={}).parallel_group == "llama-70b-pp0"
    assert load_config(_args(), environ={"LLM_EXPORTER_PARALLEL_GROUP": "g1"}).parallel_group == "g1"
    f = tmp_path / "c.yaml"
    f.write_text("parallel_group: from-file\n")
    assert load_config(_args("--config", str(f)), environ={}).parallel_group == "from-file"
    # the flag wins over the file, as for every setting
    assert load_config(_args("--config", str(f), "--parallel-group", "flag"), environ={}).parallel_group == "flag"


@pytest.mark.parametrize("value", ["", "two\nlines", "x" * 129])
def test_a_bad_group_name_names_the_flag(value: str) -> None:
    with pytest.raises(UsageError, match="--parallel-group"):
        load_config(_args("--parallel-group", value), environ={})


def _store() -> SnapshotStore:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    store.record_success("gpu", [p for i in range(2) for p in gpu(i, util=0.5, sm=0.5, tensor=0.1, dram=0.2)], 0.01)
    return store


def test_the_parallel_source_publishes_the_node_group_once() -> None:
    with_group = ParallelStep(None, node_group="pp0").derive(_store().snapshot()).points
    info = [p for p in with_group if p.name == "llm_parallel_node_group_info"]
    assert [(p.labels, p.value) for p in samples(info)] == [({"group": "pp0"}, 1.0)]
    # the node-local groups keep their own names
    assert {p.labels["group"] for p in with_group if p.name == "llm_parallel_group_gpus"} == {"all"}
    without = ParallelStep(None).derive(_store().snapshot()).points
    assert not [p for p in without if p.name == "llm_parallel_node_group_info"]


def test_the_collector_renders_it() -> None:
    points = ParallelStep(None, node_group="pp0").derive(_store().snapshot()).points
    assert 'llm_parallel_node_group_info{group="pp0"} 1.0' in render_text(points).decode()
