"""One GRPO update on judged agent episodes (rl/agent_grpo.py): the resolved episode's sampled tokens
become likelier and the unresolved one's less likely; episodes with equal rewards change nothing.
(Rollouts in the sandbox judged by the harness, then the update, step after step: tests/test_rl_agent_run.py.)"""
import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.models import model_config_from_dict
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.rl.agent_grpo import AgentGRPOTrainer
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.episodes import build_episode_batch
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig, policy_logprobs
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

CONFIG = model_config_from_dict(dict(family="llama", vocab_size=16, hidden_size=32, intermediate_size=64,
                                     num_layers=1, num_heads=2, num_kv_heads=1, rope_theta=10000.0))


def _trainer():
    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    optimizer = make_optimizer(OptimizerConfig(lr=3e-2, total_steps=4, schedule="constant", clip_norm=1.0))
    state, shardings = create_train_state(CONFIG, optimizer, mesh, rules, jax.random.PRNGKey(0))
    agent = AgentConfig(sampling=SamplingParams(max_new_tokens=8, temperature=1.0, eos_ids=()))
    trainer = AgentGRPOTrainer(TrainerSetup(CONFIG, shardings, optimizer, mesh, rules, pad_id=0), state,
                               GRPOConfig(group_size=2, loss_agg="token-mean"), agent, UpdateConfig(overlong="none"))
    return trainer, state


def _episode(rng, exit_status: str, resolved: bool) -> dict:
    """A multi-turn episode's tokens: prompt, sampled turn, observation, sampled turn."""
    parts = [(rng.integers(1, 16, 5), 0), (rng.integers(1, 16, 4), 1), (rng.integers(1, 16, 3), 0),
             (rng.integers(1, 16, 4), 1)]
    ids = [int(t) for p, _ in parts for t in p]
    mask = [m for p, m in parts for _ in p]
    return {"exit_status": exit_status, "verdict": {"resolved": resolved}, "tokens": {"ids": ids, "mask": mask,
            "logprobs": [0.0] * len(ids)}, "counts": {"turns": 2, "format_errors": 0}, "seconds": {"commands": 0.0}}


def _sampled_logprob(params, episode: dict) -> float:
    batch = build_episode_batch([episode["tokens"]], pad_id=0)
    logp = np.asarray(policy_logprobs(CONFIG, params, {k: jnp.asarray(v) for k, v in batch.arrays().items()},
                                      UpdateConfig(), temperature=1.0)[0])
    return float(logp[batch.loss_mask > 0].sum())


def _on_policy(params, episode: dict) -> dict:
    """The episode with the current policy's log-probs as the sampler's (an on-policy update)."""
    batch = build_episode_batch([episode["tokens"]], pad_id=0)
    logp = np.asarray(policy_logprobs(CONFIG, params, {k: jnp.asarray(v) for k, v in batch.arrays().items()},
                                      UpdateConfig(), temperature=1.0)[0])
    tokens = dict(episode["tokens"])
    tokens["logprobs"] = [0.0] + [float(x) if m else 0.0 for x, m in zip(logp[0], tokens["mask"][1:])]
    return {**episode, "tokens": tokens}


def test_an_update_on_judged_episodes_moves_each_episodes_tokens_by_its_advantage():
    trainer, state = _trainer()
    rng = np.random.default_rng(0)
    good, bad = _episode(rng, "submitted", True), _episode(rng, "submitted", False)
    # A resolved episode ended by the step limit: compact filtering keeps it out of loss and baseline.
    filtered = _episode(rng, "step_limit", True)
    groups = [[_on_policy(state.params, good), _on_policy(state.params, bad)],
              [_on_policy(state.params, filtered), _on_policy(state.params, _episode(rng, "submitted", False))]]
    before = [_sampled_logprob(state.params, e) for e in (good, bad)]
    stale = _on_policy(state.params, bad)  # sampled before the update (the update donates `state`)
    new_state, metrics = trainer.update_on_episodes(state, 0, groups)
    after = [_sampled_logprob(new_state.params, e) for e in (good, bad)]
    assert after[0] > before[0] and after[1] < before[1], (before, after)
    assert metrics["filtered"] == 1 and metrics["episodes"] == 4 and metrics["resolved_rate"] == 0.5
    # Equal rewards in every group (after filtering): no signal, no step, the state as it was.
    same, metrics = trainer.update_on_episodes(new_state, 1, [[_on_policy(new_state.params, bad)] * 2, groups[1]])
    assert metrics["loss"] == 0.0 and same is new_state
    # A group dynamic sampling keeps only as filler (not trained) has no loss, though it has signal.
    same, metrics = trainer.update_on_episodes(new_state, 1, groups[:1], trained=[False])
    assert metrics["loss"] == 0.0 and same is new_state
    # Without an update the sampler/trainer gap is still measured: none for episodes sampled from this
    # policy, some for ones sampled before the update.
    _, metrics = trainer.update_on_episodes(new_state, 1, [[_on_policy(new_state.params, bad)] * 2])
    assert metrics["logp_mismatch_max"] < 1e-4
    _, metrics = trainer.update_on_episodes(new_state, 1, [[stale] * 2])
    assert metrics["logp_mismatch_mean"] > 1e-3


def test_rollouts_ahead_read_the_weights_the_previous_step_started_from():
    """max_staleness 1 (rl/rollouts_ahead.py): step 1's rollouts run in a thread while step 0's update
    runs and donates the state's buffers; they must read step 0's weights (a copy), and the episodes a
    checkpoint holds come back as they were."""
    import threading

    import pytest

    from swe_rl_jax.rl.agent_grpo import EpisodeGroups
    from swe_rl_jax.rl.rollouts_ahead import RolloutsAhead

    trainer, state = _trainer()
    rng = np.random.default_rng(1)
    start = threading.Event()
    seen = {}

    def leaves(params) -> dict:
        # Copies: a zero-copy view of a buffer would keep the update from donating it.
        return {jax.tree_util.keystr(p): np.array(x, copy=True) for p, x in jax.tree_util.tree_leaves_with_path(params)}

    def sample(params, position):
        if position:  # ahead: read the weights only once the update has taken the state's buffers
            assert start.wait(timeout=60)
        seen[position] = leaves(params)
        groups = [[_on_policy(params, _episode(rng, "submitted", True)), _on_policy(params, _episode(rng, "submitted", False))]]
        return EpisodeGroups(groups, [0], [True], {"groups_sampled": 1.0})

    ahead = RolloutsAhead(sample, ahead=1)
    step0, staleness0 = ahead.groups(state.params, 0)  # no rollouts ahead yet: sampled now
    before = leaves(state.params)
    ahead.prefetch(state.params, 1)
    state, metrics = trainer.update_on_groups(state, 0, step0)
    start.set()
    assert metrics["grad_norm"] > 0 and staleness0 == 0
    with pytest.raises(ValueError, match="step 1's, not step 2's"):
        ahead.groups(state.params, 2)
    held = ahead.settle()  # what a checkpoint after step 0 holds
    assert seen[1].keys() == before.keys() and all(np.array_equal(seen[1][k], before[k]) for k in before)
    after = leaves(state.params)
    assert any(not np.array_equal(after[k], before[k]) for k in before)
    resumed = RolloutsAhead(sample, ahead=1)
    resumed.restore(held)
    (a, sa), (b, sb) = ahead.groups(state.params, 1), resumed.groups(state.params, 1)
    assert a == b and sa == sb == 1
    ahead.close()
    resumed.close()
