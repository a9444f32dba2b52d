"""GRPO over agent episodes (issue 47, in part; docs/AGENT.md, "Episodes for RL").

`AgentGRPOTrainer.rollouts` runs G episodes per instance in the sandbox (agent/driver.py) with the
in-process sampler on the current weights, token-exact (agent/tokens.py), each judged by the
harness at its end; `sample_episode_groups` collects a step's groups (with DAPO's dynamic sampling:
groups without signal set aside and refilled from the stream); `update_on_episodes` turns their
trajectories into GRPO rows (rl/episodes.py: the verdict as reward, compact filtering, leave-one-out
advantages) and runs the clipped update of the single-turn trainer (`GRPOTrainer._update`: PPO
epochs, minibatches, KL, clip-higher, GSPO).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.driver import Judge
from swe_rl_jax.agent.environment import AgentEnvironment
from swe_rl_jax.data.sources import Instance
from swe_rl_jax.models import lora
from swe_rl_jax.parallel.distributed import place_rows, to_host
from swe_rl_jax.policies import Policy, derive_seed
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.advantages import GroupAccumulator
from swe_rl_jax.rl.episodes import (build_episode_batch, episode_reward, informative_groups, kept_for_loss,
                                    loo_advantages, rollout_metrics)
from swe_rl_jax.rl.grpo import GRPOTrainer
from swe_rl_jax.rl.host_episodes import judged_groups_per_host
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.train import TrainState

Trajectory = Mapping[str, Any]


@dataclass(frozen=True)
class EpisodeGroups:
    """A step's rollouts: every group `sampled` (refills included, in order), the indices of the
    `chosen` ones the update trains on (informative first), whether each chosen one is `trained`
    (False: a filler with its loss masked), and the dynamic-sampling counts."""

    sampled: list[list[dict[str, Any]]]
    chosen: list[int]
    trained: list[bool]
    counts: dict[str, float]


class AgentGRPOTrainer(GRPOTrainer):
    def __init__(self, setup: TrainerSetup, state: TrainState, grpo: GRPOConfig, agent: AgentConfig,
                 update: UpdateConfig, make_env: Optional[Callable[[], AgentEnvironment]] = None,
                 judge: Optional[Judge] = None, compact_filtering: bool = True, similarity_weight: float = 0.0):
        super().__init__(setup, state, grpo, agent.sampling, update)
        self.agent, self.make_env, self.judge = agent, make_env, judge
        self.compact_filtering, self.similarity_weight = compact_filtering, similarity_weight

    def rollouts(self, params: Any, instances: Sequence[Instance], seed: int, policy: Optional[Policy] = None,
                 samples: int = 0, wait: Optional[Callable[[], Any]] = None) -> list[list[dict[str, Any]]]:
        """`samples` (default G) judged, token-exact episodes per instance in lockstep rounds
        (agent/driver.py `judged_groups`: a run that resumes samples the same): trajectory rows,
        grouped. `params`: the train state's (or a snapshot of them) that the in-process sampler
        reads, unless `policy` is given (one that returns token ids). With several processes each
        runs its share of the instances and all get every group (rl/host_episodes.py); `wait`: called
        before each of their collectives (rl/rollouts_ahead.py)."""
        if self.make_env is None or self.judge is None or self.tokenizer is None:
            raise ValueError("rollouts need make_env, judge and the setup's tokenizer")

        def make_policy() -> Policy:
            if policy is not None:
                return policy
            from swe_rl_jax.policies.sampler import SamplerPolicy

            # The global params, folded with LoRA: the engine spans every host (rl/host_episodes.py).
            return SamplerPolicy(self.sample_cfg, lora.folded(self.cfg.lora, params), self.tokenizer,
                                 self.rollout_engine)

        return judged_groups_per_host(instances, samples or self.grpo.group_size, make_policy, self.agent,
                                      self.make_env, self.judge, self.tokenizer, seed, wait)

    def sample_episode_groups(self, params: Any, take: Callable[[int], Sequence[Instance]], target: int, seed: int,
                              policy: Optional[Policy] = None,
                              wait: Optional[Callable[[], Any]] = None) -> EpisodeGroups:
        """The step's groups: `target` instances from `take` (the training stream), G episodes each.
        Under dynamic sampling (`grpo.dynamic_sampling`, DAPO's) a group without signal
        (`informative_groups`) is set aside and more instances are taken, as many as groups are still
        missing, for at most `grpo.max_refills` more rounds; if those run out, groups set aside fill
        the batch with their loss masked, so every step has `target` x G rows. Round r > 0 is seeded
        from `seed` and r, so a resumed run takes and samples the same."""
        acc = GroupAccumulator(target, self.grpo.max_refills if self.grpo.dynamic_sampling else 0)
        sampled: list[list[dict[str, Any]]] = []
        while not acc.done:
            instances = take(target - acc.num_informative if acc.rounds else target)
            groups = self.rollouts(params, instances, derive_seed("agent-grpo-refill", seed, acc.rounds)
                                   if acc.rounds else seed, policy, wait=wait)
            rewards, kept = self._rewards_and_kept(groups)
            signal = informative_groups(rewards, kept) if self.grpo.dynamic_sampling else [True] * len(groups)
            acc.add(rewards, range(len(sampled), len(sampled) + len(groups)), informative=signal)
            sampled.extend(groups)
        _, chosen, trained = acc.take()
        # Without dynamic sampling every group is trained: none dropped.
        return EpisodeGroups(sampled, list(chosen), trained.tolist(),
                             {"groups_sampled": float(len(sampled)), "refill_rounds": float(acc.rounds - 1),
                              "groups_dropped": float(len(sampled) - trained.sum())})

    def update_on_groups(self, state: TrainState, position: int,
                         groups: EpisodeGroups) -> tuple[TrainState, dict[str, float]]:
        """`update_on_episodes` on the chosen groups. The rollout metrics are every sampled episode's
        (what the policy did this step, refills included)."""
        state, metrics = self.update_on_episodes(state, position, [groups.sampled[i] for i in groups.chosen],
                                                 groups.trained)
        return state, {**metrics, **rollout_metrics(groups.sampled, self.compact_filtering), **groups.counts}

    def update_on_episodes(self, state: TrainState, position: int, groups: Sequence[Sequence[Trajectory]],
                           trained: Optional[Sequence[bool]] = None) -> tuple[TrainState, dict[str, float]]:
        """One GRPO update on judged trajectories, grouped by instance (module docstring); a group not
        `trained` (dynamic sampling's filler) has no loss. An episode without tokens (no turn was
        sampled: a set-up or policy failure) is out of the loss and the baseline; its row stays,
        empty, so every step has the same number of rows."""
        if not groups or not all(groups):
            raise ValueError("no episodes to train on")
        trained = [True] * len(groups) if trained is None else list(trained)
        rewards, kept = self._rewards_and_kept(groups)
        kept = [[k and use for k in ks] for ks, use in zip(kept, trained)]
        advantages = loo_advantages(rewards, kept)
        flat = [t for group in groups for t in group]
        empty = {"ids": [], "mask": [], "logprobs": []}
        batch = build_episode_batch([t.get("tokens") or empty for t in flat], self.pad_id,
                                    [k for ks in kept for k in ks], row_multiple=self.row_multiple())
        adv = np.zeros(batch.tokens.shape[0])
        adv[:len(flat)] = [a for g in advantages for a in g]
        arrays = {**batch.arrays(), "advantages": batch.per_token(adv)}
        metrics = rollout_metrics(groups, self.compact_filtering)
        if not batch.loss_mask.any() or not np.any(arrays["advantages"]):
            # Nothing to learn from: no optimizer step, the state as it was; the sampler/trainer gap is
            # still measured (one forward pass), as every step's metric.
            return state, {**metrics, **self._mismatch(state, arrays), "loss": 0.0, "grad_norm": 0.0}
        state, update_metrics = self._update(state, position, arrays)
        return state, {**metrics, **update_metrics}

    def _rewards_and_kept(self, groups: Sequence[Sequence[Trajectory]]) -> tuple[list[list[float]], list[list[bool]]]:
        """Each episode's reward, and whether it is in the loss (compact filtering; a sampled token)."""
        rewards = [[episode_reward(t, self.similarity_weight) for t in group] for group in groups]
        kept = [[kept_for_loss(t["exit_status"], self.compact_filtering) and bool(t.get("tokens")) for t in group]
                for group in groups]
        return rewards, kept

    def _mismatch(self, state: TrainState, arrays: dict[str, np.ndarray]) -> dict[str, float]:
        """|trainer − sampler| log-prob of the sampled tokens in the loss, as the update's
        `logp_mismatch_mean` / `_max` (rl/objectives.py) measure it."""
        mask = arrays["loss_mask"] > 0
        if not mask.any():
            return {}
        logp, _ = to_host(self._logp_entropy(state.params, place_rows(arrays, self.shard_batch(arrays))))
        gap = np.abs(np.asarray(logp) - arrays["logp_sampler"])[mask]
        return {"logp_mismatch_mean": float(gap.mean()), "logp_mismatch_max": float(gap.max())}
