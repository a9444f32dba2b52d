"""GRPO group advantages, dynamic sampling, PPO token rewards, GAE and whitening (hand values + numpy)."""
from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from swe_rl_jax.rl import (
    GroupAccumulator,
    broadcast_to_tokens,
    dynamic_sampling_filter,
    gae,
    group_advantages,
    kl_penalty,
    last_token_mask,
    masked_whiten,
    ppo_token_rewards,
)

# ------------------------------------------------------------------ GRPO


def test_group_advantages_hand_values_population_and_sample_std():
    out = group_advantages([[0.2, 0.4, 0.9]], scale="std", eps=0.0)
    dev = np.array([-0.3, -0.1, 0.4])
    pop_std = math.sqrt((0.09 + 0.01 + 0.16) / 3)            # 0.29439...
    np.testing.assert_allclose(out.advantages[0], dev / pop_std, rtol=1e-6)
    assert out.advantages.dtype == np.float32 and out.informative.tolist() == [True]
    np.testing.assert_allclose(out.mean, [0.5])
    np.testing.assert_allclose(out.std, [pop_std])
    sample = group_advantages([[0.2, 0.4, 0.9]], eps=0.0, ddof=1)
    np.testing.assert_allclose(sample.advantages[0], dev / math.sqrt(0.26 / 2), rtol=1e-6)
    # eps enters the denominator as std + eps.
    binary = group_advantages([[1.0, 0.0, 0.0, 1.0]], eps=0.5)
    np.testing.assert_allclose(binary.advantages[0], np.array([1, -1, -1, 1]) * 0.5 / (0.5 + 0.5), rtol=1e-6)


def test_all_equal_groups_are_exactly_zero_and_flagged():
    out = group_advantages([[0.3, 0.3, 0.3], [0.1, 0.7, 0.3], [-1.0, -1.0, -1.0]], eps=0.0)
    assert out.informative.tolist() == [False, True, False]
    assert np.all(out.advantages[[0, 2]] == 0.0)
    assert np.all(out.advantages[1] != 0.0)
    assert abs(float(out.advantages[1].sum())) < 1e-6


def test_dr_grpo_drops_the_std():
    out = group_advantages([[0.2, 0.4, 0.9], [1.0, 1.0, 1.0]], scale="none")
    np.testing.assert_allclose(out.advantages[0], [-0.3, -0.1, 0.4], rtol=1e-6)
    assert np.all(out.advantages[1] == 0.0)
    with pytest.raises(ValueError):
        group_advantages([[0.1, 0.2]], scale="max")
    with pytest.raises(ValueError):
        group_advantages([[0.1, float("nan")]])
    with pytest.raises(ValueError):
        group_advantages([0.1, 0.2])


def test_dynamic_sampling_filter_and_refills():
    assert dynamic_sampling_filter([[1, 1], [0, 1], [0.5], [], [-1, -1, 0]]).tolist() == [
        False, True, False, False, True]
    acc = GroupAccumulator(target_groups=3, max_refills=1)
    assert acc.add([[1, 1], [0, 1], [0, 0], [1, 1]], items=["a", "b", "c", "d"]) == 1
    assert not acc.done
    acc.add([[0.5, 0.5], [0.2, 0.9]], items=["e", "f"])
    assert acc.done and acc.num_informative == 2       # refills exhausted: filler takes the last slot
    rewards, items, informative = acc.take()
    assert items == ["b", "f", "a"] and informative.tolist() == [True, True, False]
    np.testing.assert_array_equal(rewards, [[0, 1], [0.2, 0.9], [1, 1]])
    full = GroupAccumulator(target_groups=2, max_refills=5)
    full.add([[0, 1], [1, 0], [0, 2]], items=[0, 1, 2])
    assert full.done and full.take()[1] == [0, 1]
    short = GroupAccumulator(target_groups=3)
    short.add([[0, 1]])
    with pytest.raises(ValueError):
        short.take()


def test_broadcast_sequence_advantages_to_tokens():
    mask = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    np.testing.assert_array_equal(broadcast_to_tokens([2.0, -1.0], mask), [[2, 2, 0], [-1, 0, 0]])


# ------------------------------------------------------------------ PPO rewards and GAE


def test_token_rewards_terminal_reward_and_kl_penalty():
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    np.testing.assert_array_equal(last_token_mask(mask), [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    kl = np.array([[0.1, 0.2, 0.3, 9.0], [0.5, 9.0, 9.0, 9.0], [9.0] * 4], np.float32)
    r = ppo_token_rewards([1.0, -2.0, 5.0], mask, kl=kl, kl_coef=0.5)
    np.testing.assert_allclose(r, [[-0.05, -0.1, 1.0 - 0.15, 0], [-2.0 - 0.25, 0, 0, 0], [0, 0, 0, 0]], rtol=1e-6)
    np.testing.assert_array_equal(ppo_token_rewards([1.0, -2.0, 5.0], mask), [[0, 0, 1, 0], [-2, 0, 0, 0], [0] * 4])


def test_gae_hand_computed_with_right_padding():
    # γ=0.9, λ=0.8; row 0: 3 tokens + 1 pad, rewards (0, 0, 1), values (0.5, 0.6, 0.7):
    #  δ2 = 1 − 0.7 = 0.3                   A2 = 0.3
    #  δ1 = 0.9·0.7 − 0.6 = 0.03            A1 = 0.03 + 0.72·0.3   = 0.246
    #  δ0 = 0.9·0.6 − 0.5 = 0.04            A0 = 0.04 + 0.72·0.246 = 0.21712
    # row 1: 1 token, reward 2, value 0.5 → A = 1.5; padding holds garbage that must be ignored.
    rewards = np.array([[0, 0, 1, 7.0], [2.0, 5.0, 5.0, 5.0]], np.float32)
    values = np.array([[0.5, 0.6, 0.7, 100.0], [0.5, -9.0, 9.0, 9.0]], np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], np.float32)
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [[0.21712, 0.246, 0.3, 0], [1.5, 0, 0, 0]], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ret, [[0.71712, 0.846, 1.0, 0], [2.0, 0, 0, 0]], rtol=1e-6, atol=1e-7)
    # γ = λ = 1 with a terminal reward: A_t = R − V_t, returns = R (Monte Carlo).
    adv1, ret1 = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv1[0, :3], [0.5, 0.4, 0.3], rtol=1e-6)
    np.testing.assert_allclose(ret1[0, :3], [1, 1, 1], rtol=1e-6)


def np_gae(r, v, m, gamma, lam):
    adv = np.zeros_like(r, dtype=np.float64)
    for b in range(r.shape[0]):
        idx = [t for t in range(r.shape[1]) if m[b, t] > 0]
        nv = na = 0.0
        for t in reversed(idx):
            na = r[b, t] + gamma * nv - v[b, t] + gamma * lam * na
            nv = v[b, t]
            adv[b, t] = na
    return adv, np.where(m > 0, adv + v, 0.0)


def test_gae_matches_numpy_reference_jitted():
    rng = np.random.default_rng(0)
    B, T = 5, 9
    mask = np.zeros((B, T), np.float32)
    for b, n in enumerate([9, 4, 1, 0, 6]):
        mask[b, :n] = 1
    r = rng.normal(size=(B, T)).astype(np.float32)
    v = rng.normal(size=(B, T)).astype(np.float32)
    adv, ret = jax.jit(gae)(r, v, mask, 0.97, 0.9)
    ref_adv, ref_ret = np_gae(r, v, mask, 0.97, 0.9)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-6)
    # Holes in the mask are skipped (the carry passes over them).
    holes = mask.copy(); holes[0, 3:5] = 0
    np.testing.assert_allclose(gae(r, v, holes, 0.97, 0.9)[0], np_gae(r, v, holes, 0.97, 0.9)[0], rtol=1e-5, atol=1e-6)


def test_ppo_pipeline_kl_in_reward():
    # Terminal reward + k1 penalty → GAE: the penalty of later tokens flows back with γλ.
    mask = np.array([[1, 1, 0]], np.float32)
    logp_old = np.array([[-1.0, -2.0, 0.0]], np.float32)
    logp_ref = np.array([[-1.5, -1.0, 0.0]], np.float32)
    kl = kl_penalty(logp_old, logp_ref, "k1")                       # (0.5, −1.0)
    r = ppo_token_rewards([1.0], mask, kl=kl, kl_coef=0.1)           # (−0.05, 1 + 0.1)
    adv, _ = gae(r, np.zeros((1, 3), np.float32), mask, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv[0], [-0.05 + 1.1, 1.1, 0.0], rtol=1e-6)


def test_masked_whiten_over_valid_tokens():
    rng = np.random.default_rng(1)
    x = rng.normal(3.0, 2.0, size=(3, 5)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], np.float32)
    x[mask == 0] = 1e4   # garbage on padding must not move the statistics
    vals = x[mask > 0].astype(np.float64)
    mu, sd = vals.mean(), vals.std()
    w = np.asarray(masked_whiten(x, mask, eps=0.0))
    np.testing.assert_allclose(w[mask > 0], (vals - mu) / sd, rtol=1e-5, atol=1e-6)
    assert np.all(w[mask == 0] == 0)
    assert abs(w[mask > 0].mean()) < 1e-6 and abs(w[mask > 0].std() - 1) < 1e-5
    keep = np.asarray(masked_whiten(x, mask, shift_mean=False, eps=0.0))
    np.testing.assert_allclose(keep[mask > 0], (vals - mu) / sd + mu, rtol=1e-5)
