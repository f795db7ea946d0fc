"""The number of speculative (draft) tokens per step, as each engine is launched or serves it
(issue 36): the draft's cost in target steps is that number times a per-token cost."""

from __future__ import annotations

import pytest

from exporter.engines import settings
from exporter.samples import Sample
from exporter.schema import ENGINE_SETTINGS, SPECS

SETTING = "num_speculative_tokens"


@pytest.mark.parametrize(
    ("family", "argv", "want"),
    [
        ("vllm", ["vllm", "serve", "m", "--speculative-config", '{"model": "d", "num_speculative_tokens": 5}'], 5.0),
        ("vllm", ["vllm", "serve", "m", '--speculative-config={"method": "ngram", "num_speculative_tokens": 3}'], 3.0),
        ("sglang", ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "4"], 4.0),
        ("tgi", ["text-generation-launcher", "--model-id", "m", "--speculate", "2"], 2.0),
        ("llamacpp", ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--draft-max", "16"], 16.0),
        ("llamacpp", ["llama-server", "-m", "t.gguf", "--draft", "8"], 8.0),
        ("llamacpp", ["llama-server", "-m", "t.gguf", "--spec-draft-n-max", "6"], 6.0),
        ("vllm", ["vllm", "serve", "m", "-sc", '{"num_speculative_tokens": 2}'], 2.0),
        ("vllm", ["vllm", "serve", "m", "--spec-tokens", "7"], 7.0),
    ],
)
def test_launch_flags(family: str, argv: list[str], want: float) -> None:
    assert settings.from_argv(family, argv).numbers[SETTING] == want


def test_vllm_speculative_config_without_the_number_leaves_it_unknown() -> None:
    got = settings.from_argv("vllm", ["vllm", "serve", "m", "--speculative-config", '{"model": "d"}'])
    assert SETTING not in got.numbers


@pytest.mark.parametrize(
    ("family", "env", "want"), [("tgi", {"SPECULATE": "3"}, 3.0), ("llamacpp", {"LLAMA_ARG_DRAFT_MAX": "12"}, 12.0)]
)
def test_environment(family: str, env: dict[str, str], want: float) -> None:
    assert settings.from_environ(family, env).numbers[SETTING] == want


def test_sglang_serves_it_as_a_gauge_and_on_its_info_route() -> None:
    text = 'sglang:spec_num_steps{engine_type="unified",model_name="m",tp_rank="0"} 3.0\n'
    assert settings.from_exposition("sglang", text).numbers[SETTING] == 3.0
    assert settings.from_exposition("sglang", text.replace("sglang:", "sglang_")).numbers[SETTING] == 3.0
    assert settings.from_info("sglang", {"speculative_num_steps": 5}).numbers[SETTING] == 5.0
    assert SETTING not in settings.from_info("sglang", {"speculative_num_steps": None}).numbers


def test_published_as_an_engine_setting_of_the_closed_vocabulary() -> None:
    assert SETTING in ENGINE_SETTINGS
    assert SPECS["llm_engine_setting"].closed_values("setting") == ENGINE_SETTINGS
    found = settings.from_argv("tgi", ["text-generation-launcher", "--speculate", "4"])
    (point,) = settings.setting_points(found, {"server": "s", "engine": "tgi", "model": "", "rank": ""})
    assert isinstance(point, Sample) and (point.labels["setting"], point.value) == (SETTING, 4.0)


def test_each_draft_length_spelling_stays_its_own_flag_for_tune() -> None:
    """tune (exporter/tune/knobs.py) moves each spelling as written: none is an alias of another."""
    for family, names in (("llamacpp", ("--spec-draft-n-max", "--draft-max", "--draft", "--draft-n")), ("vllm", ("-sc",))):
        spellings = settings.aliases(family)
        assert all(not set(spellings.get(n, ())) & set(names) for n in names), family
