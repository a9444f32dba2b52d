"""LoRA training: only the adapters train (gradients, optimizer state, update, dtypes, resume),
the RL reference is the base model for free, the sampler reads merged weights, and plan-memory
counts adapters alone in the optimizer state. Each against a route of its own."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from swe_rl_jax.models import ModelConfig, forward, init_params, lora
from swe_rl_jax.models.lora import LoraConfig
from swe_rl_jax.models.params import param_specs
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.plan.programs import PlanSpec
from swe_rl_jax.plan.report import plan
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.grpo import GRPOTrainer
from swe_rl_jax.rl.kl import kl_penalty
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.rl.rollout import build_rollout_batch
from swe_rl_jax.sampling import SampleResult, SamplingParams
from swe_rl_jax.train import (Checkpointer, OptimizerConfig, abstract_train_state, batch_shardings,
                              create_train_state, make_optimizer, make_sft_loss, make_train_step,
                              next_token_targets)

CFG = ModelConfig(family="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, qkv_bias=True)
LCFG = CFG.replace(lora=LoraConfig(rank=4, alpha=8.0))  # scale 2, every projection
MESH, RULES = make_mesh(MeshConfig()), get_rules("fsdp")


def _params(b_scale: float = 0.05, seed: int = 0):
    """LoRA params with B != 0 (a fresh B = 0 would give A no gradient and the policy no change)."""
    p = init_params(LCFG, jax.random.PRNGKey(seed))
    layers = dict(p["layers"])
    for i, name in enumerate(sorted(n for n in layers if n.endswith("_lora_b"))):
        layers[name] = b_scale * jax.random.normal(jax.random.PRNGKey(100 + i), layers[name].shape)
    return {**p, "layers": layers}


def _batch():
    rng = np.random.default_rng(0)
    mask = np.zeros((4, 12), np.float32)
    mask[:, 5:] = 1.0
    return {"tokens": rng.integers(0, 64, (4, 12)).astype(np.int32), "loss_mask": mask}


def _reference_grads(params, batch):
    """Mean CE of the plain model on `lora.merged` weights (W + scale·A·B folded, config without
    lora, full logits), differentiated w.r.t. A and B through the merge."""
    adapters, base = lora.split(jax.tree.map(jnp.asarray, params))

    def loss(a):
        merged = lora.merged(LCFG.lora, lora.merge(a, base))
        logp = jax.nn.log_softmax(forward(CFG, merged, batch["tokens"]), axis=-1)
        logp = jnp.take_along_axis(logp, next_token_targets(jnp.asarray(batch["tokens"]))[..., None], -1)[..., 0]
        return -jnp.sum(logp[:, :-1] * batch["loss_mask"][:, 1:]) / batch["loss_mask"].sum()

    return jax.jit(jax.grad(loss))(adapters)


def _state_and_step(optimizer, params, param_dtype=jnp.float32):
    batch = _batch()
    state, shardings = create_train_state(LCFG, optimizer, MESH, RULES, jax.random.PRNGKey(0), params=params,
                                          param_dtype=param_dtype)
    step = make_train_step(make_sft_loss(LCFG, chunk=4), optimizer, shardings, batch_shardings(MESH, RULES, batch))
    return state, shardings, step, batch


def _adapter_count(params) -> int:
    return sum(x.size for x in jax.tree.leaves(lora.split(params)[0]))


def test_adapter_gradients_equal_the_merged_route_and_the_base_stays_bit_identical():
    params = _params()
    state, _, step, batch = _state_and_step(optax.sgd(1.0), params)  # sgd(1): the update is -gradient
    before = jax.tree.map(np.asarray, state.params)
    ref = jax.tree.map(np.asarray, _reference_grads(params, batch))
    state, metrics = step(state, batch)
    after = jax.tree.map(np.asarray, state.params)
    for name, g in ref["layers"].items():
        assert np.abs(g).max() > 1e-5, name  # A and B both get a real gradient
        np.testing.assert_allclose(before["layers"][name] - after["layers"][name], g, rtol=2e-4, atol=2e-7,
                                   err_msg=name)
    # grad_norm is the adapters' alone: the base took no part in the gradient.
    assert abs(float(metrics["grad_norm"]) - np.sqrt(sum(np.sum(g.astype(np.float64) ** 2)
                                                        for g in ref["layers"].values()))) < 1e-5
    base_before = jax.tree_util.tree_leaves_with_path(lora.without_adapters(before))
    base_after = jax.tree.leaves(lora.without_adapters(after))
    assert len(base_before) == len(base_after) == len(param_specs(CFG))
    for (path, x), y in zip(base_before, base_after):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), path


def test_adamw_chain_by_hand_and_optimizer_state_holds_adapters_only():
    params = _params()
    cfg = OptimizerConfig(lr=1e-2, total_steps=10, schedule="constant", weight_decay=0.1, clip_norm=1e-3, eps=1e-6)
    state, _, step, batch = _state_and_step(make_optimizer(cfg), params)
    n_adapter = _adapter_count(params)
    opt_leaves = jax.tree.leaves(state.opt_state)
    # Adam's mu and nu for the adapters (float32) plus scalar counts; nothing shaped like the base.
    assert sum(x.size for x in opt_leaves if x.ndim) == 2 * n_adapter
    assert sum(x.nbytes for x in opt_leaves if x.ndim) == 8 * n_adapter
    base_shapes = {x.shape for x in jax.tree.leaves(lora.without_adapters(params))}
    assert not any(x.shape in base_shapes for x in opt_leaves if x.ndim)
    p0 = jax.tree.map(lambda x: np.asarray(x, np.float64), lora.split(params)[0]["layers"])
    g = {k: np.asarray(v, np.float64) for k, v in _reference_grads(params, batch)["layers"].items()}
    state, _ = step(state, batch)
    # By hand: clip to the global norm, then AdamW's first step (bias-corrected m = g, v = g^2).
    norm = np.sqrt(sum(np.sum(v ** 2) for v in g.values()))
    assert norm > cfg.clip_norm  # the clip is active
    for name, gv in g.items():
        gc = gv * cfg.clip_norm / norm
        expected = p0[name] - cfg.lr * (gc / (np.abs(gc) + cfg.eps) + cfg.weight_decay * p0[name])
        np.testing.assert_allclose(np.asarray(state.params["layers"][name]), expected, rtol=0, atol=2e-5,
                                   err_msg=name)


def test_bfloat16_base_float32_adapters_after_a_step_and_a_resume(tmp_path):
    optimizer = make_optimizer(OptimizerConfig(lr=1e-3, total_steps=10, schedule="constant"))
    state, shardings, step, batch = _state_and_step(optimizer, _params(), param_dtype=jnp.bfloat16)
    base0 = jax.tree.map(np.asarray, lora.without_adapters(state.params))
    state, _ = step(state, batch)
    adapters, base = lora.split(state.params)
    assert {x.dtype for x in jax.tree.leaves(base)} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in jax.tree.leaves(adapters)} == {jnp.dtype(jnp.float32)}
    assert {x.dtype for x in jax.tree.leaves(state.opt_state) if x.ndim} == {jnp.dtype(jnp.float32)}
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(jax.tree.leaves(base0), jax.tree.leaves(base)))
    # An Orbax save and a restore onto the abstract state continue to the same next step.
    ckpt = Checkpointer(tmp_path / "ckpt", async_save=False)
    ckpt.save(1, state, {"position": 1})
    ckpt.wait()
    restored, meta = ckpt.restore(abstract_train_state(LCFG, optimizer, shardings, jnp.bfloat16))
    ckpt.close()
    assert meta == {"position": 1}
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))
    next_a, ma = step(restored, batch)
    next_b, mb = step(state, batch)
    assert float(ma["loss"]) == float(mb["loss"])
    for a, b in zip(jax.tree.leaves(next_a), jax.tree.leaves(next_b)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


_TRAINERS: dict = {}  # one GRPO trainer (its compiled programs) for the tests below


def _grpo(params):
    optimizer = _TRAINERS["grpo"].optimizer if _TRAINERS else make_optimizer(
        OptimizerConfig(lr=1e-2, total_steps=10, schedule="constant"))
    state, shardings = create_train_state(LCFG, optimizer, MESH, RULES, jax.random.PRNGKey(0), params=params)
    if not _TRAINERS:
        _TRAINERS["grpo"] = GRPOTrainer(TrainerSetup(LCFG, shardings, optimizer, MESH, RULES, pad_id=0), state,
                                        GRPOConfig(group_size=2, kl_coef=0.1),
                                        SamplingParams(max_new_tokens=6, temperature=0.7),
                                        UpdateConfig(prompts_per_step=2))
    trainer = _TRAINERS["grpo"]
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, 64, 5).tolist(), rng.integers(1, 64, 3).tolist()]
    results = [SampleResult(p, i, rng.integers(1, 64, n).astype(np.int32), -np.ones(n, np.float32),
                            -np.ones(n, np.float32), "eos")
               for p, i, n in ((0, 0, 4), (0, 1, 6), (1, 0, 3), (1, 1, 5))]
    rollout = build_rollout_batch(prompts, results, 0)
    batch = {**rollout.arrays(), "advantages": rollout.per_token(np.array([1.0, -1.0, 0.5, -0.5], np.float32))}
    return trainer, state, batch


def _base_logprobs_by_hand(params, batch, temperature: float):
    """The plain model on the params without adapters (config without lora), full logits."""
    base = lora.without_adapters(params)
    logits = forward(CFG, base, batch["tokens"], positions=batch["positions"]) / temperature
    logp = jax.nn.log_softmax(logits, axis=-1)
    return np.asarray(jnp.take_along_axis(logp, next_token_targets(jnp.asarray(batch["tokens"]))[..., None],
                                          -1)[..., 0])


def test_grpo_reference_is_the_base_model_without_a_copy_and_the_sampler_reads_merged_weights():
    params = _params()
    trainer, state, batch = _grpo(params)
    assert trainer.keep_reference and trainer.ref_params is None
    ref = trainer.reference_params(state.params)
    base = lora.without_adapters(state.params)
    # The reference is the train state's own base arrays: the same buffers, no second copy.
    assert not lora.has_adapters(ref)
    assert len(jax.tree.leaves(ref)) == len(jax.tree.leaves(base)) > 0
    assert all(a is b for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(base)))
    pointers = {x.unsafe_buffer_pointer() for x in jax.tree.leaves(state.params)}
    assert all(x.unsafe_buffer_pointer() in pointers for x in jax.tree.leaves(ref))
    mask = batch["loss_mask"] > 0
    logp_ref = np.asarray(trainer.reference_logprobs(state.params, batch))
    by_hand = _base_logprobs_by_hand(state.params, batch, 0.7)
    np.testing.assert_allclose(logp_ref[mask], by_hand[mask], atol=2e-5)
    logp_policy = np.asarray(trainer._logp(state.params, batch)[0])
    assert np.abs(logp_policy[mask] - logp_ref[mask]).max() > 1e-3  # B != 0: the policy moved off its base
    # The sampler's weights: the adapters folded in, a plain model whose logits are the LoRA model's.
    weights = trainer.rollout_weights(state.params)
    assert not lora.has_adapters(weights) and trainer.sample_cfg.lora is None
    np.testing.assert_allclose(np.asarray(forward(CFG, weights, batch["tokens"])),
                               np.asarray(forward(LCFG, state.params, batch["tokens"])), atol=2e-5)


def test_grpo_at_init_has_zero_kl_and_an_update_moves_only_the_adapters():
    params = init_params(LCFG, jax.random.PRNGKey(3))  # B = 0: the policy is its base
    trainer, state, batch = _grpo(params)
    mask = batch["loss_mask"] > 0
    logp = np.asarray(trainer._logp(state.params, batch)[0])
    logp_ref = np.asarray(trainer.reference_logprobs(state.params, batch))
    np.testing.assert_array_equal(np.asarray(kl_penalty(logp[mask], logp_ref[mask])), 0.0)
    base0 = jax.tree.map(np.asarray, lora.without_adapters(state.params))
    adapters0 = jax.tree.map(np.asarray, lora.split(state.params)[0])
    state, metrics = trainer._update(state, 0, {k: np.asarray(v) for k, v in batch.items()})
    assert abs(metrics["kl"]) < 1e-6 and metrics["grad_norm"] > 0
    assert all(np.array_equal(a, np.asarray(b))
               for a, b in zip(jax.tree.leaves(base0), jax.tree.leaves(lora.without_adapters(state.params))))
    adapters1 = lora.split(state.params)[0]["layers"]
    for name, a0 in adapters0["layers"].items():
        # From B = 0 only B has a gradient (dL/dA = scale * x^T dL/dy B^T = 0): B moves, A waits a step.
        assert np.array_equal(a0, np.asarray(adapters1[name])) == name.endswith("_lora_a"), name
    # After the update the reference is still the (unchanged) base, read from the new state.
    np.testing.assert_allclose(np.asarray(trainer.reference_logprobs(state.params, batch))[mask],
                               logp_ref[mask], atol=1e-6)


def test_plan_memory_with_lora_counts_adapters_alone_in_the_optimizer_state():
    cfg = ModelConfig(family="llama", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=1,
                      num_heads=4, num_kv_heads=2)
    spec = dict(program="rl", model="llama3.1-8b", seq=16, batch=1, target="cpu:1", remat="none", chunk=0,
                attention="dense")
    full = plan(PlanSpec(**spec), cfg)
    low = plan(PlanSpec(**spec, lora_rank=8), cfg)
    n = cfg.num_params()
    # r * (in + out) per layer: q (64, 64), k and v (64, 32), o (64, 64), gate, up (64, 128), down (128, 64).
    adapters = 1 * 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 128))
    assert low["adapter_params"] == adapters and full["adapter_params"] == 0
    assert full["opt_state_bytes"] == 8 * n + 8  # Adam mu, nu of every weight + two int32 counts
    assert low["opt_state_bytes"] == 8 * adapters + 8  # ... of the adapters alone
    assert low["params_bytes"] == 4 * n + 4 * adapters
    assert "reference params" in full["resident"] and "reference params" not in low["resident"]
    assert low["total_bytes"] < full["total_bytes"] - 4 * n  # at least the reference copy less


def test_ppo_step_with_lora_samples_merged_weights_keeps_no_reference_copy_and_trains_adapters_only():
    """One whole PPO step (rollout through the sampler, reward-KL to the base, a full-weight
    separate critic beside a LoRA actor) from B = 0: the KL to the reference is 0, the base stays
    bit-identical, B moves."""
    from swe_rl_jax.rl.config import PPOConfig
    from swe_rl_jax.rl.ppo import PPOTrainer
    from swe_rl_jax.rl.run import critic_model_config
    from swe_rl_jax.rl.value import Critic, create_critic_state

    cfg = ModelConfig(family="llama", vocab_size=16, hidden_size=16, intermediate_size=32, num_layers=1,
                      num_heads=2, num_kv_heads=1, lora=LoraConfig(rank=2, alpha=4.0))
    ppo = PPOConfig(actor_lr=1e-2, critic_lr=1e-2, kl_coef=0.1)
    opt = make_optimizer(OptimizerConfig(lr=1e-2, total_steps=10, schedule="constant"))
    state, shardings = create_train_state(cfg, opt, MESH, RULES, jax.random.PRNGKey(0))
    critic_cfg = critic_model_config(cfg, "separate")
    critic_state, critic_sh = create_critic_state(critic_cfg, opt, MESH, RULES, jax.random.PRNGKey(1), "separate",
                                                  backbone=lora.without_adapters(state.params))
    assert not lora.has_adapters(critic_state.params["backbone"])  # the critic trains full weights
    critic = Critic(critic_cfg, critic_sh, opt, MESH, RULES)
    trainer = PPOTrainer(TrainerSetup(cfg, shardings, opt, MESH, RULES, pad_id=0), state, critic, ppo,
                         SamplingParams(max_new_tokens=4, temperature=1.0, eos_ids=()),
                         UpdateConfig(prompts_per_step=2, overlong="none"))
    assert trainer.use_reward_kl and trainer.keep_reference and trainer.ref_params is None
    base0 = jax.tree.map(np.asarray, lora.without_adapters(state.params))
    b0 = {k: np.asarray(v) for k, v in state.params["layers"].items() if k.endswith("_lora_b")}
    score = lambda payloads, results: [(float(np.mean(np.asarray(r.token_ids) == 5)), {"kind": "ok"})  # noqa: E731
                                       for r in results]
    state, critic_state, metrics = trainer.step(state, critic_state, 0, lambda k: [([1, 2, 3], {})] * k, score)
    assert metrics["kl_seq"] == 0.0 and np.isfinite(metrics["loss"])
    assert all(np.array_equal(a, np.asarray(b))
               for a, b in zip(jax.tree.leaves(base0), jax.tree.leaves(lora.without_adapters(state.params))))
    assert any(not np.array_equal(v, np.asarray(state.params["layers"][k])) for k, v in b0.items())


def test_sampler_on_unmerged_adapters_equals_the_sampler_on_merged_weights():
    """An evaluation of `model.adapter` decodes with the adapters unmerged (the decoder's low-rank
    path, scan and unrolled layers): the same greedy tokens as the plain model on the merged
    weights, and not those of the base alone."""
    from swe_rl_jax.sampling import generate

    params = _params(b_scale=0.3)
    params["embed"] = params["embed"] * 10.0  # spread the logits: diverse greedy continuations
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0, eos_ids=())
    prompts = [[3, 4, 5], [6, 7]]
    tokens = lambda cfg, p: [r.token_ids.tolist() for r in generate(cfg, p, prompts, greedy, 0)]  # noqa: E731
    for scan in (True, False):
        adapted = tokens(LCFG.replace(scan_layers=scan), params)
        assert adapted == tokens(CFG.replace(scan_layers=scan), lora.merged(LCFG.lora, params)), scan
        assert adapted != tokens(CFG.replace(scan_layers=scan), lora.without_adapters(params)), scan
