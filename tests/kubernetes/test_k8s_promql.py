"""The PromQL of docs/kubernetes.md is valid and the join does what it says, evaluated by
promtool on series shaped like the exporter's (a MIG-split and a time-sliced GPU included)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _doc_queries() -> list[str]:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = re.findall(r"```promql\n(.*?)```", text, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_documented_join_gives_each_pod_its_gpus_figure(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: apt-get install -y prometheus")
    queries = _doc_queries()
    assert len(queries) == 3
    rules = {"groups": [{"name": "doc", "rules": [{"record": f"doc:query:{i}", "expr": q} for i, q in enumerate(queries)]}]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    info = 'llm_gpu_pod_info{{instance="n1",gpu="{g}",uuid="{u}",namespace="{ns}",pod="{p}",container="{c}"}}'
    series = [
        {"series": info.format(g=0, u="GPU-a", ns="inference", p="llama", c="vllm"), "values": "1x5"},
        {"series": info.format(g=3, u="GPU-d", ns="team-a", p="notebook", c="jupyter"), "values": "1x5"},
        {"series": info.format(g=3, u="GPU-d", ns="team-b", p="embed", c="embedder"), "values": "1x5"},
        {"series": 'llm_gpu_utilization_ratio{instance="n1",gpu="0",uuid="GPU-a"}', "values": "0.9x5"},
        {"series": 'llm_gpu_utilization_ratio{instance="n1",gpu="3",uuid="GPU-d"}', "values": "0.4x5"},
        {
            "series": 'llm_gpu_process_memory_used_bytes{instance="n1",gpu="3",namespace="team-a",pod="notebook",container="jupyter"}',
            "values": "7x5",
        },
        {
            "series": 'llm_gpu_process_memory_used_bytes{instance="n1",gpu="3",namespace="team-b",pod="embed",container="embedder"}',
            "values": "3x5",
        },
    ]
    pod = '{{container="{c}",gpu="{g}",instance="n1",namespace="{ns}",pod="{p}",uuid="{u}"}}'
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": "doc:query:0",
                        "eval_time": "2m",
                        "exp_samples": [
                            {
                                "labels": "doc:query:0" + pod.format(c="vllm", g=0, ns="inference", p="llama", u="GPU-a"),
                                "value": 0.9,
                            },
                            {
                                "labels": "doc:query:0" + pod.format(c="jupyter", g=3, ns="team-a", p="notebook", u="GPU-d"),
                                "value": 0.4,
                            },
                            {
                                "labels": "doc:query:0" + pod.format(c="embedder", g=3, ns="team-b", p="embed", u="GPU-d"),
                                "value": 0.4,
                            },
                        ],
                    },
                    {
                        "expr": "doc:query:1",
                        "eval_time": "2m",
                        "exp_samples": [
                            {"labels": 'doc:query:1{namespace="inference"}', "value": 1},
                            {"labels": 'doc:query:1{namespace="team-a"}', "value": 1},
                            {"labels": 'doc:query:1{namespace="team-b"}', "value": 1},
                        ],
                    },
                    {
                        "expr": "doc:query:2",
                        "eval_time": "2m",
                        "exp_samples": [
                            {"labels": 'doc:query:2{namespace="team-a",pod="notebook"}', "value": 7},
                            {"labels": 'doc:query:2{namespace="team-b",pod="embed"}', "value": 3},
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
