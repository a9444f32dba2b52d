"""The GRPO loop body: sample groups → score on the host → advantages → clipped-surrogate updates.

`GRPOTrainer.step` is independent of where prompts and rewards come from: `next_prompts(k)` yields
k (prompt ids, payload) pairs and `score(payloads, results)` scores every response on the host.
`rl/run.py` feeds it task records and registered rewards; tests feed it synthetic tasks.
The sampler always runs on the current params; the reference policy is the initial params,
kept only when the KL coefficient is non-zero (with LoRA: the base model, no copy).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import numpy as np

from swe_rl_jax.parallel.distributed import place_rows, to_host
from swe_rl_jax.rl.advantages import GroupAccumulator, group_advantages
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.objectives import finalize_metrics
from swe_rl_jax.rl.policy_update import (Prompt, PolicyUpdater, ScoreFn, TrainerSetup, UpdateConfig, merge_step_aux,
                                         reward_metrics)
from swe_rl_jax.rl.rollout import build_group_batch, overlong_penalty
from swe_rl_jax.sampling import SampleResult, SamplingParams
from swe_rl_jax.train import TrainState


class GRPOTrainer(PolicyUpdater):
    def __init__(self, setup: TrainerSetup, state: TrainState, grpo: GRPOConfig, sampling: SamplingParams,
                 update: UpdateConfig):
        super().__init__(setup, state, grpo, dataclasses.replace(sampling, n=grpo.group_size), update,
                         keep_reference=grpo.kl_coef > 0)
        self.grpo = grpo

    def sample_groups(self, state: TrainState, position: int, next_prompts: Callable[[int], list[Prompt]],
                      score: ScoreFn) -> tuple[np.ndarray, list[Any], np.ndarray, dict[str, float]]:
        """Rounds of group sampling (refills under dynamic sampling) until the batch is full."""
        target = self.update.prompts_per_step
        acc = GroupAccumulator(target, self.grpo.max_refills if self.grpo.dynamic_sampling else 0)
        sampled = 0
        weights = self.rollout_weights(state.params)  # once, for every refill round
        while True:
            prompts = next_prompts(target - acc.num_informative if acc.rounds else target)
            key = jax.random.fold_in(jax.random.fold_in(state.rng, position), acc.rounds)
            results, scored = self.sample(weights, prompts, key, score)
            g = self.grpo.group_size
            rewards = np.array([s for s, _ in scored], np.float64).reshape(len(prompts), g)
            if self.update.overlong == "penalty":
                lengths = np.array([r.length for r in results]).reshape(len(prompts), g)
                rewards = rewards + overlong_penalty(lengths, self.sampling.max_new_tokens, self.update.overlong_buffer)
            items = [(prompts[i], results[i * g:(i + 1) * g], [info for _, info in scored[i * g:(i + 1) * g]])
                     for i in range(len(prompts))]
            acc.add(rewards, items)
            sampled += len(prompts)
            if acc.done:
                break
        rewards, items, informative = acc.take()
        return rewards, items, informative, {"groups_sampled": sampled, "refill_rounds": acc.rounds - 1,
                                             "groups_dropped": sampled - int(informative.sum())
                                             if self.grpo.dynamic_sampling else 0}

    def step(self, state: TrainState, position: int, next_prompts: Callable[[int], list[Prompt]],
             score: ScoreFn) -> tuple[TrainState, dict[str, float]]:
        rewards, items, informative, counts = self.sample_groups(state, position, next_prompts, score)
        g = self.grpo.group_size
        adv = group_advantages(rewards, self.grpo.advantage_scale, self.grpo.advantage_eps, self.grpo.std_ddof)
        prompts = [item[0][0] for item in items]
        results = [SampleResult(i, r.sample_index, r.token_ids, r.logprobs, r.logprobs_truncated, r.finish_reason, r.text)
                   for i, item in enumerate(items) for r in item[1]]
        rollout = build_group_batch(prompts, results, self.pad_id, g, self.row_multiple(), self.update.pack_groups,
                                    self.update.overlong)
        if self.grpo.dynamic_sampling:  # filler groups (refills ran out) train on nothing
            rollout.loss_mask *= rollout.per_token(np.repeat(informative, g).astype(np.float32))
        batch = {**rollout.arrays(), "advantages": rollout.per_token(adv.advantages.reshape(-1))}
        metrics = {**counts, "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
                   "response_length": float(rollout.response_lengths.mean()),
                   "truncated_frac": float(rollout.truncated.mean())}
        if self.grpo.dynamic_sampling and not informative.any():
            # Every group had equal rewards: zero advantages everywhere, nothing to learn, so
            # neither a forward pass nor an optimizer step (the state is unchanged).
            metrics.update(loss=0.0, grad_norm=0.0)
        else:
            state, update_metrics = self._update(state, position, batch)
            metrics.update(update_metrics)
        metrics.update(reward_metrics([item[0][1] for item in items for _ in range(g)], rewards.reshape(-1),
                                      [info for item in items for info in item[2]]))
        return state, metrics

    def _update(self, state: TrainState, position: int, batch: dict[str, np.ndarray]) -> tuple[TrainState, dict[str, float]]:
        """PPO epochs × minibatches of optimizer steps on one rollout batch. With a single step
        the update is on-policy and its own forward pass is the behaviour policy (no `logp_old`
        pass); otherwise `logp_old` is recomputed once with the sampling params."""
        on_policy = self.update.ppo_epochs == 1 and self.update.minibatches == 1
        if not on_policy or self.keep_reference:
            device_batch = place_rows(batch, self.shard_batch(batch))
            if not on_policy:
                logp_old, entropy = to_host(self._logp_entropy(state.params, device_batch))
                batch["logp_old"] = logp_old
                mask = batch["loss_mask"] > 0
                entropy_mean = float(entropy[mask].mean()) if mask.any() else 0.0
            if self.keep_reference:  # with LoRA: the base model, read from `state.params`
                batch["logp_ref"] = to_host(self.reference_logprobs(state.params, device_batch))
            del device_batch
        aux: dict[str, Any] = {}
        losses = []
        rows = np.arange(batch["tokens"].shape[0])
        for epoch in range(self.update.ppo_epochs):
            order = np.random.default_rng([position, epoch]).permutation(rows) if self.update.minibatches > 1 else rows
            for mb in np.array_split(order, self.update.minibatches):
                sub = {k: v[mb] for k, v in batch.items()}  # sliced on the host, placed per the step
                state, m = self._train_step(sub)(state, place_rows(sub, self.shard_batch(sub)))
                m = jax.device_get(m)
                losses.append(float(m["loss"]))
                aux = merge_step_aux(aux, m)
        metrics = {**finalize_metrics(aux), "loss": float(np.mean(losses)), "grad_norm": float(m["grad_norm"])}
        if not on_policy:  # the entropy of the sampling policy, not of a later minibatch's
            metrics["entropy"] = entropy_mean
        if "lr" in m:
            metrics["lr"] = float(m["lr"])
        return state, metrics
