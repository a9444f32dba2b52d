"""RL losses (swe_rl_jax.rl.objectives, rl.kl) against independent float64 numpy references."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from swe_rl_jax.config import ConfigError, from_dict
from swe_rl_jax.rl import (
    LOSS_AGGS,
    AdaptiveKLController,
    GRPOConfig,
    PPOConfig,
    finalize_metrics,
    kl_penalty,
    loss_denominator,
    make_denominator_fn,
    make_policy_loss_fn,
    make_value_loss_fn,
    policy_loss,
    policy_loss_sum,
    value_loss,
)

ESTIMATORS = ("k1", "k2", "k3")


# ------------------------------------------------------------------ independent references


def np_kl(lp, lr, est):
    d = lp - lr
    return {"k1": d, "k2": 0.5 * d * d, "k3": math.exp(lr - lp) - (lr - lp) - 1.0}[est]


def np_policy_loss(logp, old, adv, mask, *, clip_low=0.2, clip_high=0.2, dual=None, agg="token-mean",
                   kl_coef=0.0, est="k3", ref=None, ent=None, ent_coef=0.0, tis=None, sampler=None):
    """Token loop in float64, written from docs/METHODS.md §4 without looking at the jax code."""
    logp, old, adv, mask = (np.asarray(x, np.float64) for x in (logp, old, adv, mask))
    if adv.ndim == 1:
        adv = np.repeat(adv[:, None], logp.shape[1], axis=1)
    rows = []
    for b in range(logp.shape[0]):
        losses = []
        for t in range(logp.shape[1]):
            if mask[b, t] <= 0:
                continue
            rho, a = math.exp(logp[b, t] - old[b, t]), adv[b, t]
            pg = -min(rho * a, min(max(rho, 1 - clip_low), 1 + clip_high) * a)
            if dual is not None and a < 0:
                pg = min(pg, -dual * a)
            if tis is not None:
                pg *= min(math.exp(old[b, t] - sampler[b, t]), tis)
            loss = pg
            if kl_coef:
                loss += kl_coef * np_kl(logp[b, t], ref[b, t], est)
            if ent_coef:
                loss -= ent_coef * ent[b, t]
            losses.append(loss)
        if losses:
            rows.append(losses)
    if agg == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if agg == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    return sum(sum(r) for r in rows) / len(rows)


def _case(seed=0):
    """4 rows, right-padded lengths 7, 2, 5, 0 (an empty padding row) out of T=8; ratios pushed
    past both clip edges: rows 0/2 have A > 0 and some ρ = 1.5 or 0.5, row 1 has A < 0."""
    rng = np.random.default_rng(seed)
    lengths = [7, 2, 5, 0]
    B, T = len(lengths), 8
    mask = np.zeros((B, T), np.float32)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    old = rng.uniform(-3, -0.1, (B, T)).astype(np.float32)
    delta = rng.uniform(-0.1, 0.1, (B, T))
    delta[0, [1, 4]] = math.log(1.5)   # A>0, ρ > 1 + ε_high: clipped high
    delta[0, 2] = math.log(0.5)        # A>0, ρ < 1 − ε_low: NOT clipped (min picks ρ·A)
    delta[1, 0] = math.log(0.5)        # A<0, ρ < 1 − ε_low: clipped low
    delta[1, 1] = math.log(1.6)        # A<0, ρ > 1 + ε_high: NOT clipped
    delta[2, 3] = math.log(0.4)        # per-token A<0 below: clipped low
    logp = (old + delta).astype(np.float32)
    adv = np.array([1.0, -0.7, 0.4, 0.0], np.float32)[:, None] * np.ones((1, T), np.float32)
    adv[2, 3] = -1.3
    adv[2, 4] = 0.9
    ref = (old + rng.uniform(-0.5, 0.5, (B, T))).astype(np.float32)
    ent = rng.uniform(0.1, 2.0, (B, T)).astype(np.float32)
    # Garbage on padding must not leak anywhere.
    logp[mask == 0] = 50.0
    ref[mask == 0] = -80.0
    return dict(logp=logp, old=old, adv=adv, mask=mask, ref=ref, ent=ent)


# ------------------------------------------------------------------ policy loss


@pytest.mark.parametrize("agg", LOSS_AGGS)
@pytest.mark.parametrize("est", ESTIMATORS)
def test_policy_loss_matches_numpy_reference_for_every_mode_and_estimator(agg, est):
    c = _case()
    kw = dict(loss_agg=agg, kl_coef=0.04, kl_estimator=est, entropy_coef=0.01)
    loss, aux = policy_loss(c["logp"], c["old"], c["adv"], c["mask"], logp_ref=c["ref"], entropy=c["ent"], **kw)
    ref = np_policy_loss(c["logp"], c["old"], c["adv"], c["mask"], agg=agg, kl_coef=0.04, est=est,
                         ref=c["ref"], ent=c["ent"], ent_coef=0.01)
    assert np.isfinite(float(loss))
    np.testing.assert_allclose(float(loss), ref, rtol=1e-5, atol=1e-6)
    # Clipping happened on both sides, and only where it should.
    assert float(aux["clip_high_tokens"]) == 2.0
    assert float(aux["clip_low_tokens"]) == 2.0
    assert float(aux["num_tokens"]) == 14.0 and float(aux["num_seqs"]) == 3.0
    assert float(aux["denominator"]) == (14.0 if agg == "token-mean" else 3.0)
    valid = c["mask"] > 0
    np.testing.assert_allclose(float(aux["ratio_sum"]), np.exp(c["logp"] - c["old"])[valid].sum(), rtol=1e-5)
    np.testing.assert_allclose(float(aux["entropy_sum"]), c["ent"][valid].sum(), rtol=1e-6)
    kl_ref = sum(np_kl(float(a), float(r), est) for a, r in zip(c["logp"][valid], c["ref"][valid]))
    np.testing.assert_allclose(float(aux["kl_sum"]), kl_ref, rtol=1e-5, atol=1e-6)


def test_per_sequence_advantages_broadcast_like_per_token():
    c = _case()
    adv_seq = np.array([1.0, -0.7, 0.4, 0.0], np.float32)
    a, _ = policy_loss(c["logp"], c["old"], adv_seq, c["mask"], loss_agg="seq-mean-token-mean")
    b, _ = policy_loss(c["logp"], c["old"], np.broadcast_to(adv_seq[:, None], c["mask"].shape), c["mask"],
                       loss_agg="seq-mean-token-mean")
    np.testing.assert_allclose(float(a), float(b), rtol=1e-7)


def test_gradient_wrt_logp_hand_derived_clipped_tokens_have_zero_gradient():
    # One row, token-mean over N = 5 tokens, no KL: d loss / d logp_t = −ρ_t·A_t / N when unclipped.
    ratios = np.array([1.5, 0.5, 1.1, 0.5, 1.5])
    adv = np.array([1.0, -1.0, 1.0, 1.0, -1.0], np.float32)
    old = np.full((1, 5), -1.0, np.float32)
    logp = (old + np.log(ratios)).astype(np.float32)
    mask = np.ones((1, 5), np.float32)
    grad = jax.grad(lambda lp: policy_loss(lp, old, adv[None], mask)[0])(jnp.asarray(logp))
    expected = np.array([0.0, 0.0, -1.1, -0.5, 1.5]) / 5   # tokens 0 (high) and 1 (low) are clipped
    np.testing.assert_allclose(np.asarray(grad)[0], expected, atol=1e-6)


@pytest.mark.parametrize("agg", LOSS_AGGS)
@pytest.mark.parametrize("est", ESTIMATORS)
def test_gradient_matches_finite_differences_of_the_reference(agg, est):
    c = _case(seed=3)
    kw = dict(loss_agg=agg, kl_coef=0.1, kl_estimator=est)
    g = jax.grad(lambda lp: policy_loss(lp, c["old"], c["adv"], c["mask"], logp_ref=c["ref"], **kw)[0])(
        jnp.asarray(c["logp"]))
    g = np.asarray(g)
    h = 1e-6
    for b, t in zip(*np.nonzero(c["mask"])):
        lp_p, lp_m = c["logp"].astype(np.float64), c["logp"].astype(np.float64)
        lp_p = lp_p.copy(); lp_p[b, t] += h
        lp_m = lp_m.copy(); lp_m[b, t] -= h
        fd = (np_policy_loss(lp_p, c["old"], c["adv"], c["mask"], agg=agg, kl_coef=0.1, est=est, ref=c["ref"])
              - np_policy_loss(lp_m, c["old"], c["adv"], c["mask"], agg=agg, kl_coef=0.1, est=est, ref=c["ref"])) / (2 * h)
        assert abs(g[b, t] - fd) < 2e-5, (b, t, g[b, t], fd)
    assert np.all(g[c["mask"] == 0] == 0.0)


def test_dual_clip_caps_negative_advantage_losses():
    #            A<0 ρ=5 → capped   A<0 ρ=2 → below cap  A>0 ρ=5 → unaffected
    ratios = np.array([5.0, 2.0, 5.0])
    adv = np.array([[-1.0, -1.0, 1.0]], np.float32)
    old = np.full((1, 3), -2.0, np.float32)
    logp = (old + np.log(ratios)).astype(np.float32)
    mask = np.ones((1, 3), np.float32)
    f = lambda lp, dual: policy_loss_sum(lp, old, adv, mask, dual_clip=dual, loss_agg="seq-mean-token-sum")
    plain, _ = f(logp, None)
    capped, aux = f(logp, 3.0)
    np.testing.assert_allclose(float(plain), 5.0 + 2.0 - 1.2, rtol=1e-6)
    np.testing.assert_allclose(float(capped), 3.0 + 2.0 - 1.2, rtol=1e-6)
    assert float(aux["dual_clip_tokens"]) == 1.0
    grad = jax.grad(lambda lp: f(lp, 3.0)[0])(jnp.asarray(logp))
    np.testing.assert_allclose(np.asarray(grad)[0], [0.0, 2.0, 0.0], atol=1e-6)
    ref = np_policy_loss(logp, old, adv, mask, dual=3.0, agg="seq-mean-token-sum")
    np.testing.assert_allclose(float(capped), ref, rtol=1e-6)
    with pytest.raises(ValueError, match="dual_clip"):
        f(logp, 1.0)


def test_truncated_importance_sampling_weights_and_stop_gradient():
    # logp_old − logp_sampler = log 0.5, log 3, log 10 with cap C = 2 → weights 0.5, 2, 2.
    old = np.full((1, 3), -1.0, np.float32)
    sampler = (old - np.log([0.5, 3.0, 10.0])).astype(np.float32)
    logp = (old + np.log([1.1, 0.9, 1.0])).astype(np.float32)
    adv = np.array([[1.0, -1.0, 2.0]], np.float32)
    mask = np.ones((1, 3), np.float32)

    def f(lp, smp, cap):
        return policy_loss(lp, old, adv, mask, tis_cap=cap, logp_sampler=smp)

    (loss, aux), (g_lp, g_smp) = jax.value_and_grad(lambda a, b: f(a, b, 2.0), argnums=(0, 1), has_aux=True)(
        jnp.asarray(logp), jnp.asarray(sampler))
    w = np.array([0.5, 2.0, 2.0])
    pg = np.array([-1.1 * 1.0, 0.9 * 1.0, -1.0 * 2.0])   # no clipping at these ratios
    np.testing.assert_allclose(float(loss), (w * pg).sum() / 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g_lp)[0], w * pg / 3, rtol=1e-6)   # d(−ρA)/dlogp = −ρA
    assert np.all(np.asarray(g_smp) == 0.0)   # stop-gradient
    assert float(aux["tis_capped_tokens"]) == 2.0
    np.testing.assert_allclose(float(aux["tis_weight_sum"]), 4.5, rtol=1e-6)
    ref = np_policy_loss(logp, old, adv, mask, tis=2.0, sampler=sampler)
    np.testing.assert_allclose(float(loss), ref, rtol=1e-6)
    # An overflowing sampler gap stays finite (weight = cap).
    far = sampler.copy(); far[0, 0] = -500.0
    assert np.isfinite(float(f(logp, far, 2.0)[0]))
    with pytest.raises(ValueError, match="logp_sampler"):
        policy_loss(logp, old, adv, mask, tis_cap=2.0)


# ------------------------------------------------------------------ global denominators


def _toy_logprob_fn(params, batch):
    """logp = −softplus(feat · w), a differentiable stand-in for the model."""
    logp = -jax.nn.softplus(jnp.einsum("btd,d->bt", batch["feat"], params["w"]))
    return logp, None


def _toy_batch(seed=0):
    rng = np.random.default_rng(seed)
    lengths = [1, 6, 2, 0, 5, 3]       # micro-batches (k=2, rows m::2): [1,2,5] and [6,0,3]
    B, T, D = len(lengths), 7, 4
    mask = np.zeros((B, T), np.float32)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    feat = rng.normal(size=(B, T, D)).astype(np.float32)
    w0 = rng.normal(size=D).astype(np.float32)
    old = np.asarray(_toy_logprob_fn({"w": w0 + 0.3 * rng.normal(size=D).astype(np.float32)}, {"feat": feat})[0])
    return {
        "feat": feat, "loss_mask": mask, "logp_old": old,
        "advantages": rng.normal(size=B).astype(np.float32),
        "logp_ref": (old + rng.uniform(-0.3, 0.3, (B, T))).astype(np.float32),
    }, {"w": jnp.asarray(w0)}


@pytest.mark.parametrize("agg", LOSS_AGGS)
def test_micro_batches_with_global_denominator_equal_the_full_batch(agg):
    batch, params = _toy_batch()
    kw = dict(GRPOConfig(loss_agg=agg).policy_loss_kwargs())
    loss_fn = make_policy_loss_fn(_toy_logprob_fn, **kw)
    den_fn = make_denominator_fn(agg)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    den = den_fn(batch)
    (full_num, _), full_g = grad_fn(params, batch)
    full_loss, full_grad = float(full_num / den), np.asarray(full_g["w"]) / float(den)
    # The reference value from the independent numpy implementation.
    ref = np_policy_loss(_toy_logprob_fn(params, batch)[0], batch["logp_old"], batch["advantages"],
                         batch["loss_mask"], agg=agg, kl_coef=kw["kl_coef"], est=kw["kl_estimator"],
                         ref=batch["logp_ref"])
    np.testing.assert_allclose(full_loss, ref, rtol=1e-5)
    k = 2
    micro = [{key: v[m::k] for key, v in batch.items()} for m in range(k)]
    outs = [grad_fn(params, mb) for mb in micro]
    acc_loss = sum(float(n) for (n, _), _ in outs) / float(den)
    acc_grad = sum(np.asarray(g["w"]) for _, g in outs) / float(den)
    assert abs(acc_loss - full_loss) < 1e-6
    np.testing.assert_allclose(acc_grad, full_grad, atol=1e-6)
    # The test can fail: a mean of per-micro-batch means is a different number here.
    mean_of_means = np.mean([float(n) / float(den_fn(mb)) for ((n, _), _), mb in zip(outs, micro)])
    assert abs(mean_of_means - full_loss) > 1e-3


def test_denominators_count_tokens_or_nonempty_sequences():
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    assert float(loss_denominator(mask, "token-mean")) == 4.0
    assert float(loss_denominator(mask, "seq-mean-token-mean")) == 2.0
    assert float(loss_denominator(mask, "seq-mean-token-sum")) == 2.0
    with pytest.raises(ValueError, match="loss_agg"):
        loss_denominator(mask, "token-sum")


def test_policy_loss_plugs_into_the_train_step_with_micro_batches():
    import optax

    from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
    from swe_rl_jax.train.state import TrainState
    from swe_rl_jax.train.step import batch_shardings, make_train_step
    from jax.sharding import NamedSharding, PartitionSpec

    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    batch, params = _toy_batch(seed=1)
    # Sampler log-probs off by a known amount: the step reports |logp_old - logp_sampler|.
    batch["logp_sampler"] = batch["logp_old"] + np.linspace(-0.5, 0.2, batch["logp_old"].size,
                                                            dtype=np.float32).reshape(batch["logp_old"].shape)
    gap = np.abs(batch["logp_old"] - batch["logp_sampler"])[batch["loss_mask"] > 0]
    cfg = GRPOConfig(loss_agg="seq-mean-token-mean")
    sgd = optax.sgd(1.0)
    rep = NamedSharding(mesh, PartitionSpec())
    results = []
    for k in (1, 2):
        fresh = {"w": jnp.array(params["w"])}  # the step donates its state
        state = TrainState(step=jnp.zeros((), jnp.int32), params=fresh, opt_state=sgd.init(fresh),
                           rng=jax.random.PRNGKey(0))
        shardings = jax.tree.map(lambda _: rep, state)
        step = make_train_step(make_policy_loss_fn(_toy_logprob_fn, **cfg.policy_loss_kwargs()), sgd, shardings,
                               batch_shardings(mesh, rules, batch), num_micro_batches=k,
                               denominator_fn=make_denominator_fn(cfg.loss_agg))
        new, metrics = step(state, {key: jnp.asarray(v) for key, v in batch.items()})
        results.append((float(metrics["loss"]), np.asarray(new.params["w"]), metrics))
    assert float(results[0][2]["denominator"]) == 5.0   # 5 non-empty rows of 6
    assert abs(results[0][0] - results[1][0]) < 1e-6
    np.testing.assert_allclose(results[0][1], results[1][1], atol=1e-6)
    m = finalize_metrics({k: v for k, v in results[1][2].items() if k not in ("loss", "grad_norm", "finite")})
    assert 0.0 <= m["clip_frac_high"] <= 1.0 and m["num_tokens"] == 17.0
    # Micro-batch accumulation sums the mismatch but keeps the max a max (train.step.merge_aux).
    for _, _, metrics in results:
        m = finalize_metrics({k: float(v) for k, v in metrics.items()})
        np.testing.assert_allclose(m["logp_mismatch_mean"], gap.mean(), rtol=1e-5)
        np.testing.assert_allclose(m["logp_mismatch_max"], gap.max(), rtol=1e-6)


def test_on_policy_loss_without_logp_old_equals_recomputed_behaviour_logprobs():
    """No `logp_old` in the batch: the forward pass itself is the behaviour policy (ratio 1),
    the same loss and gradient as passing logp_old = logp(params) computed separately."""
    batch, params = _toy_batch(seed=2)
    kw = GRPOConfig(loss_agg="token-mean", kl_coef=0.0).policy_loss_kwargs()
    loss_fn = jax.value_and_grad(make_policy_loss_fn(_toy_logprob_fn, **kw), has_aux=True)
    recomputed = {**batch, "logp_old": np.asarray(_toy_logprob_fn(params, batch)[0])}
    on_policy = {k: v for k, v in batch.items() if k != "logp_old"}
    (num_a, aux_a), g_a = loss_fn(params, recomputed)
    (num_b, aux_b), g_b = loss_fn(params, on_policy)
    np.testing.assert_allclose(float(num_a), float(num_b), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g_a["w"]), np.asarray(g_b["w"]), rtol=1e-5, atol=1e-7)
    assert float(aux_b["ratio_sum"]) == float(aux_b["num_tokens"])  # every ratio is exactly 1
    # ...and differs from the off-policy loss with the batch's own (other) logp_old.
    (num_c, _), _ = loss_fn(params, batch)
    assert abs(float(num_c) - float(num_b)) > 1e-3


# ------------------------------------------------------------------ value loss


def np_value_loss(v, v_old, ret, mask, clip, agg):
    rows = []
    for b in range(v.shape[0]):
        r = []
        for t in range(v.shape[1]):
            if mask[b, t] > 0:
                un = (v[b, t] - ret[b, t]) ** 2
                if clip is None:
                    r.append(0.5 * un)
                else:
                    vc = v_old[b, t] + min(max(v[b, t] - v_old[b, t], -clip), clip)
                    r.append(0.5 * max(un, (vc - ret[b, t]) ** 2))
        if r:
            rows.append(r)
    if agg == "token-mean":
        return sum(map(sum, rows)) / sum(map(len, rows))
    if agg == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    return sum(map(sum, rows)) / len(rows)


def test_value_clipping_cases_by_hand():
    # V_old = 0, ε_v = 0.2, R = 1:
    #  V=0.5: unclipped (0.5)²=0.25, clipped (0.2−1)²=0.64 → max 0.64 (clipped branch, zero grad)
    #  V=1.5: unclipped 0.25, clipped 0.64 → 0.64 (clipped branch, zero grad)
    #  V=0.1: inside the clip range → (0.9)²=0.81 both, grad (V−R) = −0.9
    #  V=−0.5 (R=1): unclipped 2.25 > clipped (−0.2−1)²=1.44 → 2.25, grad −1.5
    v = np.array([[0.5, 1.5, 0.1, -0.5]], np.float32)
    v_old = np.zeros_like(v)
    ret = np.ones_like(v)
    mask = np.ones_like(v)
    (loss, aux), g = jax.value_and_grad(
        lambda x: value_loss(x, v_old, ret, mask, value_clip=0.2, loss_agg="token-mean"), has_aux=True)(jnp.asarray(v))
    np.testing.assert_allclose(float(loss), 0.5 * (0.64 + 0.64 + 0.81 + 2.25) / 4, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g)[0], np.array([0.0, 0.0, -0.9, -1.5]) / 4, atol=1e-6)
    assert float(aux["vf_clip_tokens"]) == 2.0
    unclipped, _ = value_loss(v, v_old, ret, mask, value_clip=None)
    np.testing.assert_allclose(float(unclipped), 0.5 * (0.25 + 0.25 + 0.81 + 2.25) / 4, rtol=1e-6)


@pytest.mark.parametrize("agg", LOSS_AGGS)
def test_value_loss_matches_reference_and_accumulates(agg):
    rng = np.random.default_rng(5)
    mask = np.zeros((4, 6), np.float32)
    for b, n in enumerate([6, 1, 0, 3]):
        mask[b, :n] = 1
    v, v_old, ret = (rng.normal(size=(4, 6)).astype(np.float32) for _ in range(3))
    loss, _ = value_loss(v, v_old, ret, mask, value_clip=0.3, loss_agg=agg)
    np.testing.assert_allclose(float(loss), np_value_loss(v, v_old, ret, mask, 0.3, agg), rtol=1e-5)
    fn = make_value_loss_fn(lambda p, b: b["v"] + p, value_clip=0.3, loss_agg=agg)
    batch = {"v": v, "values_old": v_old, "returns": ret, "loss_mask": mask}
    den = make_denominator_fn(agg)(batch)
    parts = sum(float(fn(0.0, {k: x[m::2] for k, x in batch.items()})[0]) for m in range(2))
    np.testing.assert_allclose(parts / float(den), float(loss), rtol=1e-6)


# ------------------------------------------------------------------ KL


def test_kl_estimators_match_numpy():
    rng = np.random.default_rng(0)
    lp, lr = rng.uniform(-5, 0, 50), rng.uniform(-5, 0, 50)
    for est in ESTIMATORS:
        got = np.asarray(kl_penalty(lp.astype(np.float32), lr.astype(np.float32), est))
        want = np.array([np_kl(a, b, est) for a, b in zip(lp, lr)])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The clamp bounds the log-ratio (off by default).
    assert float(kl_penalty(0.0, -100.0, "k3", clamp=10.0)) == pytest.approx(math.exp(-10) + 10 - 1, rel=1e-6)
    # Non-negative in float32 even for tiny log-ratios, where exp(−d) − 1 + d would round below 0.
    d = np.float32(np.logspace(-12, 1, 400))
    for x in (d, -d):
        assert float(np.min(kl_penalty(x, np.zeros_like(x), "k3"))) >= 0.0
    with pytest.raises(ValueError, match="k4"):
        kl_penalty(lp, lr, "k4")


@settings(max_examples=200, deadline=None)
@given(st.floats(-30, 0), st.floats(-30, 0))
@example(-5.960464477539063e-08, 0.0)   # exp(x) − 1 − x rounds below 0 in float32 here
def test_k3_is_nonnegative_and_zero_only_at_equality(lp, lr):
    k3 = float(kl_penalty(np.float32(lp), np.float32(lr), "k3"))
    assert k3 >= 0.0
    if np.float32(lp) == np.float32(lr):
        assert k3 == 0.0


def test_adaptive_kl_controller_follows_ziegler():
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    # KL 9 → error clip(9/6 − 1) = 0.2 (clipped from 0.5); n = 64 → β·(1 + 0.2·64/10000)
    assert c.update(9.0, 64) == pytest.approx(0.1 * (1 + 0.2 * 64 / 10000))
    b = c.value
    assert c.update(5.4, 100) == pytest.approx(b * (1 - 0.1 * 100 / 10000))
    c2 = AdaptiveKLController(1.0, 6.0, 10)
    c2.load_state_dict(c.state_dict())
    assert c2.value == c.value


# ------------------------------------------------------------------ configs


def test_configs_validate_and_name_the_key():
    assert GRPOConfig().clip_low == 0.2 and GRPOConfig().kl_coef == 0.04 and GRPOConfig().kl_estimator == "k3"
    p = PPOConfig()
    assert (p.actor_lr, p.critic_lr, p.gamma, p.lam) == (5e-7, 9e-6, 1.0, 0.95)
    assert p.policy_loss_kwargs()["kl_coef"] == 0.0                      # reward mode: KL not in the loss
    assert PPOConfig(kl_mode="loss").policy_loss_kwargs()["kl_coef"] == 0.01
    for cls, kv, key in [
        (GRPOConfig, {"group_size": 1}, "group_size"),
        (GRPOConfig, {"dual_clip": 0.5}, "dual_clip"),
        (GRPOConfig, {"loss_agg": "token-sum"}, "loss_agg"),
        (GRPOConfig, {"clip_low": 1.0}, "clip_low"),
        (GRPOConfig, {"tis_cap": 0.5}, "tis_cap"),
        (PPOConfig, {"lam": 1.5}, "lam"),
        (PPOConfig, {"adaptive_kl": True, "kl_mode": "loss"}, "adaptive_kl"),
        (PPOConfig, {"value_clip": 0.0}, "value_clip"),
    ]:
        with pytest.raises(ConfigError, match=key):
            from_dict(cls, kv)
