"""GRPO learns a verifiable toy task, and does not when the advantage sign is flipped."""
import jax
import numpy as np
import pytest

from swe_rl_jax.models import model_config_from_dict
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.grpo import GRPOTrainer
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

TARGET = 5  # reward = fraction of response tokens equal to this id
CONFIG = model_config_from_dict(dict(family="llama", vocab_size=16, hidden_size=32, intermediate_size=64,
                                     num_layers=1, num_heads=2, num_kv_heads=1, rope_theta=10000.0))


def make_trainer(steps: int, kl_coef: float = 0.0, dynamic: bool = False):
    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    optimizer = make_optimizer(OptimizerConfig(lr=3e-2, total_steps=steps, schedule="constant", clip_norm=1.0))
    state, shardings = create_train_state(CONFIG, optimizer, mesh, rules, jax.random.PRNGKey(0))
    grpo = GRPOConfig(group_size=8, kl_coef=kl_coef, loss_agg="token-mean", dynamic_sampling=dynamic,
                      max_refills=1)
    trainer = GRPOTrainer(TrainerSetup(CONFIG, shardings, optimizer, mesh, rules, pad_id=0), state, grpo,
                          SamplingParams(max_new_tokens=8, temperature=1.0, eos_ids=()),
                          UpdateConfig(prompts_per_step=4, overlong="none"))
    return trainer, state


PROMPTS = lambda k: [([1, 2, 3, 4], None)] * k  # noqa: E731


def run(sign: float, steps: int = 14, kl_coef: float = 0.0, dynamic: bool = False):
    trainer, state = make_trainer(steps, kl_coef, dynamic)
    true_rewards, history = [], []

    def score(payloads, results):
        out = []
        for r in results:
            frac = float(np.mean(np.asarray(r.token_ids) == TARGET))
            true_rewards.append(frac)
            out.append((sign * frac, {"kind": "ok"}))
        return out

    for position in range(steps):
        before = len(true_rewards)
        state, metrics = trainer.step(state, position, PROMPTS, score)
        history.append((float(np.mean(true_rewards[before:])), metrics))
    return history


@pytest.fixture(scope="module")
def learned():
    return run(+1.0)


def test_grpo_raises_the_reward(learned):
    first = np.mean([r for r, _ in learned[:2]])
    last = np.mean([r for r, _ in learned[-3:]])
    assert first < 0.2  # about 1/16 for a random policy over 16 tokens
    assert last > first + 0.25, (first, last)
    metrics = learned[-1][1]
    for key in ("reward_mean", "reward_std", "clip_frac_high", "clip_frac_low", "response_length",
                "logp_mismatch_mean", "logp_mismatch_max", "format_error_rate", "groups_dropped"):
        assert key in metrics
    # The sampler and the trainer compute the same log-probs up to float noise.
    assert learned[0][1]["logp_mismatch_max"] < 1e-3


def test_flipped_advantage_does_not_learn(learned):
    flipped = run(-1.0)
    first = np.mean([r for r, _ in flipped[:2]])
    last = np.mean([r for r, _ in flipped[-3:]])
    assert last <= first + 0.02, (first, last)
    assert last < np.mean([r for r, _ in learned[-3:]]) - 0.25


def test_all_equal_groups_leave_the_state_unchanged():
    """Dynamic sampling with a constant reward: every group (and the refill) is dropped, so the
    step runs no update at all: same params bit for bit, optimizer step count unchanged."""
    trainer, state = make_trainer(steps=1, dynamic=True)
    before = jax.tree.map(np.asarray, state.params)
    state, metrics = trainer.step(state, 0, PROMPTS, lambda payloads, results: [(0.5, {"kind": "ok"})] * len(results))
    assert metrics["groups_dropped"] == metrics["groups_sampled"] == 8  # 4 + a refill of 4
    assert metrics["grad_norm"] == 0.0 and int(state.step) == 0
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, state.params), before)
