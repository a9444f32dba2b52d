"""Typed configs: unknown keys, wrong types and impossible values fail naming the key."""
from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from swe_rl_jax.config import ConfigError, apply_overrides, from_dict, load_config, to_dict
from swe_rl_jax.models.config import PRESETS, ModelConfig, model_config_from_dict, preset


@dataclass(frozen=True)
class Inner:
    lr: float = 1e-5
    kind: Literal["cosine", "linear"] = "cosine"


@dataclass(frozen=True)
class Outer:
    name: str
    steps: int = 10
    inner: Inner = field(default_factory=Inner)
    tags: tuple[str, ...] = ()
    limit: Optional[int] = None


def test_nested_load_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: run\ninner:\n  lr: 3\ntags: [a, b]\n")
    cfg = load_config(Outer, path, ["steps=7", "inner.kind=linear", "limit=null"])
    assert cfg == Outer(name="run", steps=7, inner=Inner(lr=3.0, kind="linear"), tags=("a", "b"), limit=None)
    assert isinstance(cfg.inner.lr, float)
    assert from_dict(Outer, to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"name": "x", "stpes": 3}, "stpes"),
        ({"name": "x", "inner": {"lrr": 1}}, "inner.lrr"),
        ({"name": "x", "steps": "3"}, "steps"),
        ({"name": "x", "steps": True}, "steps"),
        ({"name": "x", "inner": {"kind": "exp"}}, "inner.kind"),
        ({"name": "x", "tags": "ab"}, "tags"),
        ({"steps": 3}, "name"),
    ],
)
def test_bad_values_name_the_key(data, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        from_dict(Outer, data)


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["steps"])


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(Outer, tmp_path / "nope.yaml")


def test_model_config_impossible_shapes():
    base = dict(PRESETS["qwen2.5-0.5b"])
    with pytest.raises(ConfigError, match="model.num_heads"):
        model_config_from_dict({**base, "num_heads": 13})  # 896 % 13 != 0
    with pytest.raises(ConfigError, match="model.num_kv_heads"):
        model_config_from_dict({**base, "num_kv_heads": 3})  # 14 % 3 != 0
    with pytest.raises(ConfigError, match="model.hidden_size"):
        model_config_from_dict({**base, "hidden_size": 0})
    with pytest.raises(ConfigError, match="model.dtype"):
        model_config_from_dict({**base, "dtype": "float16"})
    # An explicit head_dim lifts the divisibility requirement (Qwen3 shapes).
    assert model_config_from_dict({**base, "num_heads": 7, "num_kv_heads": 1, "head_dim": 64}).head_dim_ == 64


# Parameter counts from each model card (billions, as rounded there).
PUBLISHED_PARAMS_B = {
    "qwen2.5-0.5b": 0.49, "qwen2.5-1.5b": 1.54, "qwen2.5-3b": 3.09, "qwen2.5-7b": 7.61,
    "qwen2.5-14b": 14.7, "qwen2.5-32b": 32.5, "qwen3-0.6b": 0.6, "qwen3-1.7b": 1.7,
    "qwen3-4b": 4.0, "qwen3-8b": 8.2, "qwen3-32b": 32.8, "llama3.1-8b": 8.03, "llama3.1-70b": 70.6, "smollm2-135m": 0.135,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS_B))
def test_presets_match_published_parameter_counts(name):
    n = preset(name).num_params() / 1e9
    # 2.5%: the cards round to two or three significant digits.
    assert abs(n - PUBLISHED_PARAMS_B[name]) / PUBLISHED_PARAMS_B[name] < 0.025, n


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown model preset"):
        preset("gpt-5")


def test_every_preset_is_valid():
    for name in PRESETS:
        assert isinstance(preset(name), ModelConfig)


@dataclass(frozen=True)
class WithPreset:
    inner: Inner = field(default_factory=lambda: Inner(lr=0.5, kind="linear"))


def test_partial_section_keeps_the_fields_own_defaults():
    assert from_dict(WithPreset, {"inner": {"lr": 2.0}}).inner == Inner(lr=2.0, kind="linear")
    assert from_dict(WithPreset, {}).inner == Inner(lr=0.5, kind="linear")
    assert load_config(Outer, None, ["name=x", "inner.lr=1e-3"]).inner == Inner(lr=1e-3, kind="cosine")


@dataclass(frozen=True)
class NeedsPath:
    path: str = ""

    def __post_init__(self):
        if not self.path:
            raise ConfigError("path: required")


@dataclass(frozen=True)
class HoldsNeedsPath:
    section: NeedsPath = field(default_factory=NeedsPath)


def test_section_whose_default_is_incomplete():
    assert from_dict(HoldsNeedsPath, {"section": {"path": "x"}}).section == NeedsPath("x")
    with pytest.raises(ConfigError, match="path"):
        from_dict(HoldsNeedsPath, {"section": {}})
