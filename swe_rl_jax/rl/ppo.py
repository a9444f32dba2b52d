"""The PPO loop body for SoRFT stage 2: sample → score on the host → token rewards → critic
values → GAE → actor (clipped surrogate) and critic (clipped value loss) updates.

Mirrors `rl/grpo.py`: `PPOTrainer.step(state, critic_state, position, next_prompts, score)`
with `next_prompts(k)` yielding k (prompt ids, payload) pairs and `score(payloads, results)`
scoring every response on the host. Per rollout batch (docs/METHODS.md §4, docs/RL.md):

1. `prompts_per_step` prompts × `n` responses (n = `sampling.n`, 1 by default) sampled with the
   current policy params; sequence rewards R from `score` (+ the DAPO soft overlong penalty when
   `update.overlong="penalty"`).
2. `logp_old` (and `logp_ref`, from the frozen initial params, when a KL term is active) recomputed
   by the trainer; `values_old` from the critic with the rollout params.
3. Token rewards: R on the last response token, plus `−β·kl_t` on every response token in
   `kl_mode="reward"` (`kl_t = kl_penalty(logp_old, logp_ref, kl_estimator)`, β from the fixed or
   adaptive controller). GAE(γ, λ) → advantages and returns; advantages whitened over the
   batch's valid tokens when `whiten_advantages`.
4. `ppo_epochs` × `minibatches`: per minibatch one critic update (clipped value loss, its own
   optimizer/LR) then one actor update (clipped surrogate; `β·k(logp, logp_ref)` as a loss term in
   `kl_mode="loss"`).
5. The adaptive controller is updated with the batch's mean per-sequence KL (host state:
   `kl_controller.state_dict()` belongs in checkpoint metadata).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.parallel.distributed import place_rows, to_host
from swe_rl_jax.rl.advantages import gae, masked_whiten, ppo_token_rewards
from swe_rl_jax.rl.config import PPOConfig
from swe_rl_jax.rl.kl import kl_penalty
from swe_rl_jax.rl.objectives import finalize_metrics
from swe_rl_jax.rl.policy_update import (Prompt, PolicyUpdater, ScoreFn, TrainerSetup, UpdateConfig, merge_step_aux,
                                         reward_metrics)
from swe_rl_jax.rl.rollout import build_rollout_batch, overlong_penalty
from swe_rl_jax.rl.value import Critic
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.train import TrainState


@functools.partial(jax.jit, static_argnames=("gamma", "lam", "whiten", "estimator", "clamp", "use_kl"))
def ppo_advantages(seq_rewards: jax.Array, mask: jax.Array, values_old: jax.Array, logp_old: jax.Array,
                   logp_ref: Optional[jax.Array], kl_coef: jax.Array, *, gamma: float, lam: float, whiten: bool,
                   estimator: str = "k1", clamp: Optional[float] = None, use_kl: bool = False) -> dict[str, jax.Array]:
    """Rollout tensors → {token_rewards, kl (per token, 0 off-mask), advantages, returns,
    advantages_raw}, all [B, T]. `kl_coef` is a traced scalar (the controller's β), so a moving
    β does not recompile."""
    m = (mask > 0).astype(jnp.float32)
    kl = None
    if use_kl:
        kl = jnp.where(m > 0, kl_penalty(logp_old, logp_ref, estimator, clamp), 0.0)
    rewards = ppo_token_rewards(seq_rewards, m, kl=kl, kl_coef=kl_coef)
    adv, ret = gae(rewards, values_old, m, gamma, lam)
    out = {"token_rewards": rewards, "advantages_raw": adv, "returns": ret,
           "advantages": masked_whiten(adv, m) if whiten else adv,
           "kl": kl if kl is not None else jnp.zeros_like(m)}
    return out


def explained_variance(values: np.ndarray, returns: np.ndarray, mask: np.ndarray) -> float:
    """1 − Var(R − V) / Var(R) over valid tokens (1: perfect critic, 0: no better than a
    constant, < 0: worse); 0 when the returns are constant."""
    m = mask > 0
    if not m.any():
        return 0.0
    r, v = returns[m].astype(np.float64), values[m].astype(np.float64)
    var = r.var()
    return float(1.0 - (r - v).var() / var) if var > 1e-8 else 0.0


class PPOTrainer(PolicyUpdater):
    def __init__(self, setup: TrainerSetup, state: TrainState, critic: Critic, ppo: PPOConfig,
                 sampling: SamplingParams, update: UpdateConfig, advantage_sign: float = 1.0):
        """`setup.optimizer`/`setup.learning_rate`: the actor's (build it with `ppo.actor_lr`); the
        critic carries its own. `sampling.n` responses per prompt (PPO default 1). `advantage_sign`
        is a test hook (−1 flips the advantages fed to the actor)."""
        self.use_reward_kl = ppo.kl_mode == "reward" and (ppo.kl_coef > 0 or ppo.adaptive_kl)
        self.use_loss_kl = ppo.kl_mode == "loss" and ppo.kl_coef > 0
        super().__init__(setup, state, ppo, sampling, update, keep_reference=self.use_reward_kl or self.use_loss_kl)
        self.ppo, self.critic = ppo, critic
        self.advantage_sign = float(advantage_sign)
        self.kl_controller = ppo.kl_controller()

    def rollout(self, state: TrainState, critic_state: TrainState, position: int,
                next_prompts: Callable[[int], list[Prompt]], score: ScoreFn) -> tuple[dict[str, Any], dict[str, Any]]:
        """Sample, score, and build the device batch the updates consume (keys of the rollout plus
        logp_old, [logp_ref], values_old, advantages, returns). Returns (batch, host info)."""
        prompts = next_prompts(self.update.prompts_per_step)
        key = jax.random.fold_in(state.rng, position)
        results, scored = self.sample(self.rollout_weights(state.params), prompts, key, score)
        rewards = np.array([s for s, _ in scored], np.float64)
        if self.update.overlong == "penalty":
            lengths = np.array([r.length for r in results])
            rewards = rewards + overlong_penalty(lengths, self.sampling.max_new_tokens, self.update.overlong_buffer)
        rollout = build_rollout_batch([p for p, _ in prompts], results, self.pad_id, self.update.overlong)
        host = rollout.arrays()
        device_batch = place_rows(host, self.shard_batch(host))
        logp_old, entropy = self._logp_entropy(state.params, device_batch)
        device_batch["logp_old"] = logp_old
        if self.keep_reference:  # with LoRA: the base model, read from `state.params`
            device_batch["logp_ref"] = self.reference_logprobs(state.params, device_batch)
        values_old = self.critic.values(critic_state, state.params, device_batch)
        beta = float(self.kl_controller.value) if self.use_reward_kl else 0.0
        # Host values as numpy: identical on every process, so they enter a multi-host program replicated.
        out = ppo_advantages(rewards.astype(np.float32), device_batch["loss_mask"], values_old, logp_old,
                             device_batch.get("logp_ref"), np.float32(beta), gamma=self.ppo.gamma, lam=self.ppo.lam,
                             whiten=self.ppo.whiten_advantages, estimator=self.ppo.kl_estimator,
                             clamp=self.ppo.kl_clamp, use_kl=self.use_reward_kl)
        device_batch.update(values_old=values_old, returns=out["returns"],
                            advantages=out["advantages"] * self.advantage_sign)
        info = {"prompts": prompts, "results": results, "scored": scored, "rewards": rewards, "rollout": rollout,
                "entropy": entropy, "beta": beta, **{k: out[k] for k in ("token_rewards", "kl", "advantages_raw")}}
        return device_batch, info

    def step(self, state: TrainState, critic_state: TrainState, position: int,
             next_prompts: Callable[[int], list[Prompt]],
             score: ScoreFn) -> tuple[TrainState, TrainState, dict[str, float]]:
        device_batch, info = self.rollout(state, critic_state, position, next_prompts, score)
        rollout, rewards = info["rollout"], info["rewards"]
        mask_np = np.asarray(rollout.loss_mask) > 0
        policy_entropy = to_host(info["entropy"])[mask_np]
        values_old, returns = to_host((device_batch["values_old"], device_batch["returns"]))

        actor_aux: dict[str, float] = {}
        critic_aux: dict[str, float] = {}
        losses, critic_losses = [], []
        rows = np.arange(rollout.tokens.shape[0])
        for epoch in range(self.update.ppo_epochs):
            order = np.random.default_rng([position, epoch]).permutation(rows) if self.update.minibatches > 1 else rows
            for mb in np.array_split(order, self.update.minibatches):
                sub = {k: v[mb] for k, v in device_batch.items()}
                # Critic first: a shared head reads the actor params, which the actor step donates.
                critic_state, cm = self.critic.update(critic_state, state.params, sub)
                cm = jax.device_get(cm)
                critic_losses.append(float(cm["loss"]))
                critic_aux = merge_step_aux(critic_aux, cm)
                state, m = self._train_step(sub)(state, sub)
                m = jax.device_get(m)
                losses.append(float(m["loss"]))
                actor_aux = merge_step_aux(actor_aux, m)

        # Per-sequence KL to the reference at rollout time (the adaptive controller's input).
        kl_tok = to_host(info["kl"]) if self.use_reward_kl else None
        seq_has_tokens = mask_np.any(axis=1)
        metrics: dict[str, float] = {
            **finalize_metrics(actor_aux),
            **{k: v for k, v in finalize_metrics(critic_aux).items() if k not in ("num_tokens", "num_seqs")},
            "loss": float(np.mean(losses)), "grad_norm": float(m["grad_norm"]),
            "critic_loss": float(np.mean(critic_losses)), "critic_grad_norm": float(cm["grad_norm"]),
            "explained_variance": explained_variance(values_old, returns, mask_np),
            "kl_coef": float(self.kl_controller.value),
            "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
            "advantage_raw_mean": float(to_host(info["advantages_raw"])[mask_np].mean()) if mask_np.any() else 0.0,
            "response_length": float(rollout.response_lengths.mean()),
            "truncated_frac": float(rollout.truncated.mean()),
            "entropy": float(policy_entropy.mean()) if policy_entropy.size else 0.0,
        }
        if "lr" in m:
            metrics["lr"] = float(m["lr"])
        if "lr" in cm:
            metrics["critic_lr"] = float(cm["lr"])
        if kl_tok is not None:
            seq_kl = float(kl_tok.sum(axis=1)[seq_has_tokens].mean()) if seq_has_tokens.any() else 0.0
            metrics["kl_seq"] = seq_kl
            self.kl_controller.update(seq_kl, int(seq_has_tokens.sum()))
        metrics.update(reward_metrics([info["prompts"][r.prompt_index][1] for r in info["results"]], rewards,
                                      [info_ for _, info_ in info["scored"]]))
        return state, critic_state, metrics
