"""Packed GRPO rows (a group's prompt once, its responses in segments) give the losses and
gradients of one response per row; length buckets; remat chosen by a memory budget."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swe_rl_jax.models import model_config_from_dict
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.grpo import GRPOTrainer
from swe_rl_jax.rl.objectives import make_denominator_fn, make_policy_loss_fn
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.rl.rollout import (SHARED_PREFIX, build_packed_batch, build_rollout_batch, bucket_length,
                                   responses_per_row)
from swe_rl_jax.sampling import SampleResult, SamplingParams
from swe_rl_jax.train import BudgetedStep, OptimizerConfig, create_train_state, make_optimizer

CONFIG = model_config_from_dict(dict(family="llama", vocab_size=64, hidden_size=32, intermediate_size=64,
                                     num_layers=2, num_heads=4, num_kv_heads=2, rope_theta=10000.0))


def rollouts(seed: int = 0):
    """Two prompts (7 and 4 tokens) × 3 responses of different lengths, one truncated, one empty."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(1, 64, 7).tolist(), rng.integers(1, 64, 4).tolist()]
    lengths = [[5, 2, 6], [3, 0, 4]]
    results = []
    for p, row in enumerate(lengths):
        for i, n in enumerate(row):
            lp = -rng.uniform(0.5, 4.0, n).astype(np.float32)
            results.append(SampleResult(p, i, rng.integers(1, 64, n).astype(np.int32), lp, lp,
                                        "length" if (p, i) == (0, 2) else "eos"))
    return prompts, results


def make_trainer(loss_agg: str, kl_coef: float = 0.1, **update):
    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    optimizer = make_optimizer(OptimizerConfig(lr=1e-2, total_steps=10, schedule="constant"))
    state, shardings = create_train_state(CONFIG, optimizer, mesh, rules, jax.random.PRNGKey(0))
    grpo = GRPOConfig(group_size=3, kl_coef=kl_coef, loss_agg=loss_agg, entropy_coef=0.01)
    trainer = GRPOTrainer(TrainerSetup(CONFIG, shardings, optimizer, mesh, rules, pad_id=0), state, grpo,
                          SamplingParams(max_new_tokens=6, temperature=0.9), UpdateConfig(prompts_per_step=2, **update))
    return trainer, state


def test_packed_row_layout_by_hand():
    prompts, results = rollouts()
    packed = build_packed_batch(prompts, results, pad_id=0, responses_per_row=3)
    assert packed.tokens.shape == (2, bucket_length(6 + 6 + 3 + 7))  # longest row: prompt 0
    row, p = packed, prompts[0]
    # The prompt's prefix once, then each response after a copy of the prompt's last token.
    assert row.tokens[0, :6].tolist() == p[:6] and set(row.segment_ids[0, :6]) == {SHARED_PREFIX}
    assert row.tokens[0, 6:12].tolist() == [p[6], *results[0].token_ids]
    assert row.positions[0, 6:12].tolist() == list(range(6, 12))
    assert row.segment_ids[0, 6:12].tolist() == [1] * 6 and row.segment_ids[0, 12:15].tolist() == [2] * 3
    assert row.positions[0, 12:15].tolist() == [6, 7, 8]
    # Loss positions: those predicting response tokens, truncated responses masked (overlong "mask").
    assert row.loss_mask[0, 6:11].tolist() == [1] * 5 and row.loss_mask[0, 11] == 0
    assert row.loss_mask[0, 15:21].sum() == 0 and row.result_index[0, 15:21].tolist() == [2] * 6
    np.testing.assert_array_equal(row.logp_sampler[0, 6:11], results[0].logprobs)
    assert row.per_token(np.arange(6.0))[1][3:6].tolist() == [3.0, 3.0, 3.0]
    assert row.response_lengths.tolist() == [5, 2, 6, 3, 0, 4]


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_packed_loss_and_gradients_equal_one_response_per_row(loss_agg):
    """Same trainer loss function (KL to a reference, entropy bonus, off-policy ratios), both
    layouts: numerator / denominator, every aux sum and every gradient leaf agree in float32."""
    trainer, state = make_trainer(loss_agg)
    prompts, results = rollouts()
    adv = np.array([1.0, -0.5, 0.3, -1.2, 0.0, 0.8], np.float32)
    ref_params = jax.tree.map(lambda x: x + 0.01 * jnp.sin(x * 7.0), state.params)
    old_params = jax.tree.map(lambda x: x - 0.02 * jnp.cos(x * 5.0), state.params)
    loss_fn = make_policy_loss_fn(lambda p, b: trainer._logprobs_of(p, b, True), **trainer.grpo.policy_loss_kwargs())
    denominator = make_denominator_fn(loss_agg)
    outs = []
    for rollout in (build_rollout_batch(prompts, results, 0),
                    build_packed_batch(prompts, results, 0, responses_per_row=3)):
        batch = {k: jnp.asarray(v) for k, v in rollout.arrays().items()}
        batch["advantages"] = jnp.asarray(rollout.per_token(adv))
        batch["logp_ref"] = trainer._logp(ref_params, batch)[0]
        batch["logp_old"] = trainer._logp(old_params, batch)[0]

        def loss(params):
            num, aux = loss_fn(params, batch)
            return num / denominator(batch), aux

        (value, aux), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(state.params)
        outs.append((float(value), {k: float(v) for k, v in aux.items()}, grads))
    (v_rows, aux_rows, g_rows), (v_packed, aux_packed, g_packed) = outs
    assert abs(v_rows) > 1e-3
    np.testing.assert_allclose(v_packed, v_rows, rtol=1e-5, atol=1e-6)
    assert aux_rows.keys() == aux_packed.keys() and aux_rows["num_seqs"] == aux_packed["num_seqs"] == 4.0
    for k in aux_rows:
        np.testing.assert_allclose(aux_packed[k], aux_rows[k], rtol=1e-5, atol=1e-5, err_msg=k)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_rows), jax.tree.leaves(g_packed)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6, err_msg=str(path))


def test_packed_update_step_equals_rows_with_chunked_attention():
    """The whole on-policy update (reference pass, train step) with blockwise attention: the
    packed and one-per-row batches report the same loss, KL and gradient norm."""
    metrics = []
    for pack in (False, True):
        trainer, state = make_trainer("seq-mean-token-mean", pack_groups=pack)
        trainer.cfg = CONFIG.replace(attention_impl="chunked", attention_chunk=8)
        prompts, results = rollouts(1)
        from swe_rl_jax.rl.rollout import build_group_batch
        rollout = build_group_batch(prompts, results, 0, 3, 1, pack)
        assert (rollout.segment_ids is not None) == pack
        batch = {**rollout.arrays(), "advantages": rollout.per_token(np.linspace(-1, 1, 6, dtype=np.float32))}
        _, m = trainer._update(state, 0, batch)
        metrics.append(m)
    for key in ("loss", "grad_norm", "kl", "entropy", "num_seqs", "num_tokens"):
        np.testing.assert_allclose(metrics[1][key], metrics[0][key], rtol=2e-5, atol=1e-6, err_msg=key)


def test_bucket_lengths_and_responses_per_row():
    assert [bucket_length(n) for n in (1, 64, 65, 81, 97, 113, 129, 320, 321, 775)] == \
        [64, 64, 80, 96, 112, 128, 160, 320, 384, 896]
    assert responses_per_row(8, 2, 1) == 8
    assert responses_per_row(8, 2, 4) == 4   # 4 rows for 4 micro-batches
    assert responses_per_row(16, 32, 64) == 8
    assert responses_per_row(3, 1, 2) == 1   # no divisor of 3 gives an even row count


def test_remat_by_memory_budget():
    """`remat: auto` compiles the cheapest policy within the budget: none with room to spare,
    full when nothing fits; both take the same step."""
    prompts, results = rollouts()
    chosen = []
    for budget_gb in (1000.0, 1e-6):
        trainer, state = make_trainer("token-mean", remat="auto", memory_budget_gb=budget_gb)
        rollout = build_packed_batch(prompts, results, 0, responses_per_row=3)
        batch = {**rollout.arrays(), "advantages": rollout.per_token(np.ones(6, np.float32))}
        _, m = trainer._update(state, 0, batch)
        step = next(iter(trainer._steps.values()))
        assert isinstance(step, BudgetedStep)
        chosen.append((step.chosen, m["loss"], m["grad_norm"]))
    (remat_a, peak_a), loss_a, norm_a = chosen[0]
    (remat_b, peak_b), loss_b, norm_b = chosen[1]
    assert (remat_a, remat_b) == ("none", "full") and peak_b < peak_a
    np.testing.assert_allclose([loss_b, norm_b], [loss_a, norm_a], rtol=1e-5)


def test_remat_policies_give_the_same_loss_and_gradients():
    """Every policy of REMAT_BY_COST recomputes, never changes, the packed update's gradient."""
    from swe_rl_jax.train.budget import REMAT_BY_COST

    trainer, state = make_trainer("seq-mean-token-mean")
    prompts, results = rollouts(2)
    rollout = build_packed_batch(prompts, results, 0, responses_per_row=3)
    batch = {k: jnp.asarray(v) for k, v in rollout.arrays().items()}
    batch["advantages"] = jnp.asarray(rollout.per_token(np.linspace(-1, 1, 6, dtype=np.float32)))
    batch["logp_ref"] = trainer._logp(state.params, batch)[0] - 0.1
    kwargs = trainer.grpo.policy_loss_kwargs()
    grads = {}
    for remat in REMAT_BY_COST:
        loss_fn = make_policy_loss_fn(lambda p, b: trainer._logprobs_of(p, b, True, remat), **kwargs)
        grads[remat] = jax.jit(jax.value_and_grad(lambda p: loss_fn(p, batch)[0]))(state.params)
    value, reference = grads["none"]
    for remat, (v, g) in grads.items():
        np.testing.assert_allclose(float(v), float(value), rtol=1e-6, err_msg=remat)
        for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(g)):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7, err_msg=remat)
