"""PPO (SoRFT stage 2): learns a verifiable toy task with a critic, not with flipped advantages;
GAE / returns are wired into the actor and critic batches as `rl.gae` computes them; the
adaptive KL coefficient moves the right way."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swe_rl_jax.models import model_config_from_dict
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.rl import AdaptiveKLController, gae, kl_penalty, masked_whiten, ppo_token_rewards
from swe_rl_jax.rl.config import PPOConfig
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.rl.ppo import PPOTrainer, explained_variance, ppo_advantages
from swe_rl_jax.rl.value import Critic, create_critic_state
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

TARGET = 5  # reward = fraction of response tokens equal to this id
CONFIG = model_config_from_dict(dict(family="llama", vocab_size=16, hidden_size=32, intermediate_size=64,
                                     num_layers=1, num_heads=2, num_kv_heads=1, rope_theta=10000.0))
PROMPTS = lambda k: [([1, 2, 3, 4], {"i": i}) for i in range(k)]  # noqa: E731


def make_trainer(mode="separate", steps=10, advantage_sign=1.0, update=None, **ppo_kwargs):
    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    ppo = PPOConfig(actor_lr=3e-2, critic_lr=3e-2, **ppo_kwargs)
    actor_opt = make_optimizer(OptimizerConfig(lr=ppo.actor_lr, total_steps=steps, schedule="constant"))
    critic_opt = make_optimizer(OptimizerConfig(lr=ppo.critic_lr, total_steps=steps, schedule="constant"))
    state, shardings = create_train_state(CONFIG, actor_opt, mesh, rules, jax.random.PRNGKey(0))
    critic_state, critic_sh = create_critic_state(CONFIG, critic_opt, mesh, rules, jax.random.PRNGKey(1), mode,
                                                  backbone=state.params)
    critic = Critic(CONFIG, critic_sh, critic_opt, mesh, rules, value_clip=ppo.value_clip, loss_agg=ppo.loss_agg)
    trainer = PPOTrainer(TrainerSetup(CONFIG, shardings, actor_opt, mesh, rules, pad_id=0), state, critic, ppo,
                         SamplingParams(max_new_tokens=8, temperature=1.0, eos_ids=()),
                         update or UpdateConfig(prompts_per_step=8, overlong="none", ppo_epochs=1, minibatches=2),
                         advantage_sign=advantage_sign)
    return trainer, state, critic_state


def fresh_states(trainer, mode):
    mesh, rules = trainer.mesh, trainer.rules
    state, _ = create_train_state(CONFIG, trainer.optimizer, mesh, rules, jax.random.PRNGKey(0))
    critic_state, _ = create_critic_state(CONFIG, trainer.critic.optimizer, mesh, rules, jax.random.PRNGKey(1), mode,
                                          backbone=state.params)
    return state, critic_state


def reward_fn(true_rewards):
    def score(payloads, results):
        out = []
        for r in results:
            frac = float(np.mean(np.asarray(r.token_ids) == TARGET))
            true_rewards.append(frac)
            out.append((frac, {"kind": "ok"}))
        return out
    return score


_TRAINERS: dict = {}


def run(steps=10, advantage_sign=1.0, **kwargs):
    """`steps` PPO steps from the same initial params; trainers (their compiled functions) are
    reused across runs of the same config."""
    key = tuple(sorted(kwargs.items()))
    if key not in _TRAINERS:
        _TRAINERS[key] = make_trainer(steps=steps, **kwargs)[0]
    trainer = _TRAINERS[key]
    trainer.advantage_sign = advantage_sign
    state, critic_state = fresh_states(trainer, kwargs.get("mode", "separate"))
    true_rewards, history = [], []
    score = reward_fn(true_rewards)
    for position in range(steps):
        before = len(true_rewards)
        state, critic_state, metrics = trainer.step(state, critic_state, position, PROMPTS, score)
        history.append((float(np.mean(true_rewards[before:])), metrics))
    return history


def _first_last(history):
    return np.mean([r for r, _ in history[:2]]), np.mean([r for r, _ in history[-3:]])


@pytest.fixture(scope="module")
def learned():
    return run()


def test_ppo_raises_the_reward(learned):
    first, last = _first_last(learned)
    assert first < 0.2  # about 1/16 for a random policy over 16 tokens
    assert last > first + 0.4, (first, last)
    metrics = learned[-1][1]
    for key in ("reward_mean", "reward_std", "clip_frac_high", "clip_frac_low", "pg_loss", "vf_loss",
                "vf_clip_frac", "value_mean", "return_mean", "explained_variance", "kl_coef", "critic_loss",
                "critic_grad_norm", "response_length", "logp_mismatch_mean", "logp_mismatch_max", "entropy",
                "format_error_rate", "reward/task"):
        assert key in metrics, key
    assert learned[0][1]["logp_mismatch_max"] < 1e-3
    # The critic tracks the rising reward: the mean value ends close to the mean return.
    assert abs(metrics["value_mean"] - metrics["return_mean"]) < 0.2


def test_flipped_advantage_does_not_learn(learned):
    flipped = run(steps=6, advantage_sign=-1.0)
    first, last = _first_last(flipped)
    assert last <= first + 0.02, (first, last)
    assert last < _first_last(learned)[1] - 0.4


def test_shared_value_head_learns_with_kl_loss():
    """Value head on the policy backbone (stop-gradient into it), KL to the reference as a loss term."""
    history = run(steps=10, mode="shared", kl_mode="loss", kl_coef=0.01, kl_estimator="k3")
    first, last = _first_last(history)
    assert last > first + 0.3, (first, last)
    for _, m in history:
        assert "kl_seq" not in m and np.isfinite(m["kl"]) and np.isfinite(m["vf_loss"])


def _reference_gae(r, v, m, gamma, lam):
    adv = np.zeros_like(r)
    for b in range(r.shape[0]):
        next_v = next_a = 0.0
        for t in reversed(range(r.shape[1])):
            if m[b, t]:
                delta = r[b, t] + gamma * next_v - v[b, t]
                next_a = delta + gamma * lam * next_a
                next_v = v[b, t]
                adv[b, t] = next_a
    return adv, np.where(m > 0, adv + v, 0.0)


def test_ppo_advantages_hand_made():
    m = np.array([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]], np.float32)
    v = np.array([[9, .5, .4, .3, 9, 9], [9, 9, .1, .2, .3, .4]], np.float32)  # 9: padding garbage
    logp, ref = np.log(np.full(m.shape, 0.5, np.float32)), np.log(np.full(m.shape, 0.25, np.float32))
    R = np.array([1.0, -0.5], np.float32)
    out = jax.device_get(ppo_advantages(R, m, v, logp, ref, jnp.float32(0.1), gamma=0.9, lam=0.8, whiten=False,
                                        estimator="k1", use_kl=True))
    kl = np.log(2.0)
    r = np.where(m > 0, -0.1 * kl, 0.0)
    r[0, 3] += 1.0
    r[1, 5] += -0.5
    np.testing.assert_allclose(out["token_rewards"], r, atol=1e-6)
    adv, ret = _reference_gae(r, v, m, 0.9, 0.8)
    np.testing.assert_allclose(out["advantages"], adv, atol=1e-5)
    np.testing.assert_allclose(out["returns"], ret, atol=1e-5)
    white = jax.device_get(ppo_advantages(R, m, v, logp, ref, jnp.float32(0.1), gamma=0.9, lam=0.8, whiten=True,
                                          estimator="k1", use_kl=True))["advantages"]
    sel = white[m > 0]
    assert abs(sel.mean()) < 1e-5 and abs(sel.std() - 1.0) < 1e-3 and np.all(white[m == 0] == 0)
    assert explained_variance(ret, ret, m) == pytest.approx(1.0)
    assert explained_variance(np.zeros_like(ret) + ret[m > 0].mean(), ret, m) == pytest.approx(0.0, abs=1e-6)


def test_gae_wiring_and_adaptive_kl():
    """Hand-chosen critic values and rewards → the batch the critic and actor are updated on
    holds exactly `gae(ppo_token_rewards(...), values, mask)` (whitened for the actor), with the
    sequence reward on the predicting position of the last response token; and the adaptive β
    shrinks while the KL is below target and grows when it is above. (Reuses the learning
    test's trainer, with an adaptive controller swapped in, to compile nothing new.)"""
    trainer = _TRAINERS.get(()) or make_trainer()[0]
    _TRAINERS[()] = trainer
    saved = trainer.kl_controller, trainer.ref_params, trainer.critic.values, trainer.critic.update
    try:
        _check_gae_wiring_and_adaptive_kl(trainer)
    finally:
        trainer.kl_controller, trainer.ref_params, trainer.critic.values, trainer.critic.update = saved


def _check_gae_wiring_and_adaptive_kl(trainer):
    trainer.advantage_sign = 1.0
    trainer.kl_controller = AdaptiveKLController(0.1, target=0.5, horizon=40)
    state, critic_state = fresh_states(trainer, "separate")
    n = trainer.update.prompts_per_step  # 8 rows, 2 minibatches of 4
    seq_rewards = np.linspace(-1.0, 2.0, n)
    score = lambda payloads, results: [(seq_rewards[i], {"kind": "ok"}) for i in range(len(results))]  # noqa: E731

    # Policy == reference at rollout time: KL 0 < target → β shrinks by (1 − 0.2·n/horizon).
    state, critic_state, m = trainer.step(state, critic_state, 0, PROMPTS, score)
    assert m["kl_seq"] == pytest.approx(0.0, abs=1e-5) and m["kl_coef"] == pytest.approx(0.1)
    beta = 0.1 * (1 - 0.2 * n / 40)
    assert trainer.kl_controller.value == pytest.approx(beta)

    trainer.ref_params = _perturbed(trainer.ref_params)  # far from the policy: KL > target
    fed: dict = {"critic_batches": []}

    def fake_values(cstate, policy_params, batch):  # the same values for the same rollout
        fed["values"] = np.random.default_rng(0).normal(size=batch["tokens"].shape).astype(np.float32)
        return jax.device_put(fed["values"], batch["tokens"].sharding)  # as the real critic's output

    real_update = trainer.critic.update

    def spy_update(cstate, policy_params, batch):
        fed["critic_batches"].append(jax.device_get(batch))
        return real_update(cstate, policy_params, batch)

    trainer.critic.values, trainer.critic.update = fake_values, spy_update
    batch, info = trainer.rollout(state, critic_state, 1, PROMPTS, score)
    mask = np.asarray(batch["loss_mask"])
    kl = np.where(mask > 0, np.asarray(kl_penalty(batch["logp_old"], batch["logp_ref"], "k1")), 0.0)
    rewards = ppo_token_rewards(seq_rewards, mask, kl=kl, kl_coef=beta)
    adv, ret = gae(rewards, fed["values"], mask, 1.0, 0.95)
    ret = np.asarray(ret)
    np.testing.assert_allclose(np.asarray(batch["returns"]), ret, atol=1e-5)
    np.testing.assert_allclose(np.asarray(batch["advantages"]), np.asarray(masked_whiten(adv, mask)), atol=1e-5)
    np.testing.assert_allclose(np.asarray(batch["values_old"]), fed["values"])
    # Alignment: prompt of 4 tokens, 8 response tokens → predicting positions 3..10.
    assert mask[:, 3:11].all() and mask.sum() == n * 8
    np.testing.assert_allclose(np.asarray(info["token_rewards"])[:, 10] + beta * kl[:, 10], seq_rewards, atol=1e-5)
    assert np.abs(kl).sum() > 0

    # The full step on the same rollout: the critic trains on exactly these returns / old values
    # (rows in the step's seeded minibatch order), and β grows since the KL is above target.
    _, _, m2 = trainer.step(state, critic_state, 1, PROMPTS, score)
    order = np.concatenate(np.array_split(np.random.default_rng([1, 0]).permutation(n), 2))
    got = {k: np.concatenate([b[k] for b in fed["critic_batches"]]) for k in ("returns", "values_old")}
    np.testing.assert_allclose(got["returns"], ret[order], atol=1e-5)
    np.testing.assert_allclose(got["values_old"], fed["values"][order])
    assert m2["kl_seq"] > 0.5 * 1.2 and m2["kl_coef"] == pytest.approx(beta)
    assert trainer.kl_controller.value == pytest.approx(beta * (1 + 0.2 * n / 40))


def _perturbed(params, scale=0.5):
    return jax.tree.map(lambda x: x + scale * jax.random.normal(jax.random.PRNGKey(7), x.shape, x.dtype), params)


# --------------------------------------------------------------------------------------------
# the `rl` command with algorithm=ppo: critic checkpoints, exact resume
# --------------------------------------------------------------------------------------------


def test_rl_command_ppo_resumes_exactly(tmp_path):
    import json
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from swe_rl_jax.cli import main as cli

    cfg = AutoConfig.for_model("llama", vocab_size=49152, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                               max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "tiny")
    assert cli(["build-data", "--sample", "--out", str(tmp_path / "records")]) == 0

    def args(out, *extra):
        return ["rl", f"records_dir={tmp_path / 'records'}", f"out_dir={out}", f"model.checkpoint={tmp_path / 'tiny'}",
                "model.tokenizer=smollm2", "subtasks=[file_localization]", "algorithm=ppo", "ppo.actor_lr=1e-2",
                "ppo.critic_lr=1e-2", "ppo.adaptive_kl=true", "ppo.kl_coef=0.05", "update.prompts_per_step=2",
                "update.overlong=none", "sampling.max_new_tokens=8", "num_steps=2", "reward_workers=1",
                "progress=false", "save_every=100", "export=false", *extra]

    def metrics(out):  # without the host's memory, which differs by process
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("host/")}
                for line in (out / "metrics" / "metrics.jsonl").read_text().splitlines()]

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert cli(args(straight, "save_every=1")) == 0
    for sub in ("checkpoints", "checkpoints_critic"):  # a run preempted after its step-1 save
        assert sorted(p.name for p in (straight / sub).iterdir() if p.name.isdigit()) == ["1", "2"]
        shutil.copytree(straight / sub / "1", resumed / sub / "1")
    assert cli(args(resumed)) == 0  # restores policy, critic and β, runs step 2
    a, b = metrics(straight), metrics(resumed)
    assert [m["step"] for m in a] == [1, 2] and [m["step"] for m in b] == [2]
    assert b[0] == a[1]  # same prompts, samples, values and β: bitwise on CPU
    for key in ("reward_mean", "vf_loss", "explained_variance", "kl_coef", "kl_seq", "critic_lr", "lr"):
        assert key in a[-1], key
    assert a[1]["kl_coef"] != a[0]["kl_coef"]  # the adaptive β moved and was carried over
