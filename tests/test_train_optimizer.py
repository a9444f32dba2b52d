"""Learning-rate schedules, the weight-decay mask and one AdamW update, against hand computation."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swe_rl_jax.config import ConfigError
from swe_rl_jax.models import ModelConfig, init_params
from swe_rl_jax.train.optimizer import OptimizerConfig, decay_mask, learning_rate_schedule, make_optimizer


@pytest.mark.parametrize(
    "kind, expected",
    [
        # warmup 2 steps to lr=1, then 8 decay steps to 0.1 (min_lr_ratio), flat afterwards.
        ("cosine", {0: 0.0, 1: 0.5, 2: 1.0, 4: 0.1 + 0.45 * (1 + math.cos(math.pi / 4)), 6: 0.55, 10: 0.1, 25: 0.1}),
        ("linear", {0: 0.0, 1: 0.5, 2: 1.0, 4: 0.775, 6: 0.55, 10: 0.1, 25: 0.1}),
        ("constant", {0: 0.0, 1: 0.5, 2: 1.0, 4: 1.0, 10: 1.0, 25: 1.0}),
    ],
)
def test_schedule_values_at_hand_computed_steps(kind, expected):
    config = OptimizerConfig(lr=1.0, warmup_ratio=0.2, total_steps=10, schedule=kind, min_lr_ratio=0.1)
    assert config.warmup == 2
    schedule = learning_rate_schedule(config)
    for step, lr in expected.items():
        assert float(schedule(step)) == pytest.approx(lr, abs=1e-6), (kind, step)


def test_warmup_steps_overrides_ratio_and_bad_values_are_rejected():
    assert OptimizerConfig(warmup_steps=3, warmup_ratio=0.5, total_steps=10).warmup == 3
    for bad in (dict(lr=-1.0), dict(total_steps=0), dict(warmup_steps=11, total_steps=10), dict(clip_norm=0.0),
                dict(min_lr_ratio=2.0), dict(b2=1.0)):
        with pytest.raises(ConfigError):
            OptimizerConfig(**bad)


def test_decay_mask_exempts_norms_biases_and_vectors():
    cfg = ModelConfig(family="qwen3", vocab_size=16, hidden_size=8, intermediate_size=16, num_layers=2,
                      num_heads=2, num_kv_heads=1, head_dim=4, qk_norm=True, qkv_bias=True)
    mask = decay_mask(init_params(cfg, jax.random.PRNGKey(0)))
    assert mask["embed"] and mask["lm_head"]
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert mask["layers"][name], name
    # Stacked per-layer norms and biases are 2-D/3-D but still exempt, by name.
    for name in ("attn_norm", "mlp_norm", "q_norm", "k_norm", "q_bias", "k_bias", "v_bias"):
        assert not mask["layers"][name], name
    assert not mask["final_norm"]
    assert decay_mask({"scale": jnp.ones(3)}) == {"scale": False}


def test_one_clipped_adamw_step_matches_numpy():
    config = OptimizerConfig(lr=0.1, warmup_steps=0, total_steps=10, schedule="constant", weight_decay=0.5,
                             b1=0.8, b2=0.9, eps=1e-3, clip_norm=1.0)
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(2, 3)).astype(np.float32), "attn_norm": rng.normal(size=(2, 3)).astype(np.float32)}
    grads = {"w": 3 * rng.normal(size=(2, 3)).astype(np.float32), "attn_norm": rng.normal(size=(2, 3)).astype(np.float32)}
    opt = make_optimizer(config)
    updates, _ = opt.update(jax.tree.map(jnp.asarray, grads), opt.init(params), params)

    norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads.values()))
    scale = min(1.0, 1.0 / norm)
    for name, decay in (("w", 0.5), ("attn_norm", 0.0)):
        g = grads[name] * scale
        m_hat, v_hat = (1 - 0.8) * g / (1 - 0.8), (1 - 0.9) * g**2 / (1 - 0.9)
        expected = -0.1 * (m_hat / (np.sqrt(v_hat) + 1e-3) + decay * params[name])
        np.testing.assert_allclose(updates[name], expected, rtol=1e-5, atol=1e-7)
