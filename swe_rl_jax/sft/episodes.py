"""SFT on agent episodes: the warm start of multi-turn RL (docs/AGENT.md, "The learning check").

An episode's trajectory already holds what SFT needs, token-exact (agent/tokens.py): its ids and a
mask that is 1 on the tokens the policy wrote. Training on them is `make_sft_loss` on rows cut at the
episode's last written token, the mask unshifted (the loss's convention), so observations, prompts
and the chat template's turn markers carry no loss and nothing is re-tokenized from text. The
episodes are usually a teacher's (a scripted agent, a larger model) kept by their verdict, as
SWE-Gym and SWE-smith fine-tune on resolved trajectories before RL.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import global_batch
from swe_rl_jax.parallel.rules import MeshSharding
from swe_rl_jax.model_source import ModelSource, export_policy, jnp_dtype, load_policy
from swe_rl_jax.rl.rollout import bucket_length
from swe_rl_jax.train import OptimizerConfig, create_train_state, learning_rate_schedule, make_optimizer
from swe_rl_jax.train.losses import make_sft_loss
from swe_rl_jax.train.step import batch_shardings, make_train_step


def episode_sft_rows(episodes: Sequence[Mapping[str, Sequence]], pad_id: int, min_length: int = 64) -> dict[str, np.ndarray]:
    """`tokens` and `loss_mask` [len(episodes), width]: each episode's ids up to its last written
    token, right-padded to one bucketed width; the mask 1 on written tokens (unshifted, as
    `make_sft_loss` reads it). An episode without a written token is an error: it teaches nothing."""
    if not episodes:
        raise ValueError("no episodes")
    lengths = []
    for i, episode in enumerate(episodes):
        written = np.flatnonzero(np.asarray(episode["mask"]))
        if len(episode["ids"]) != len(episode["mask"]) or not len(written) or written[0] == 0:
            raise ValueError(f"episode {i}: needs ids and mask of one length, a prompt first and a written token")
        lengths.append(int(written[-1]) + 1)
    width = bucket_length(max(lengths), min_length)
    tokens = np.full((len(episodes), width), pad_id, np.int32)
    mask = np.zeros((len(episodes), width), np.int32)
    for i, (episode, n) in enumerate(zip(episodes, lengths)):
        tokens[i, :n] = episode["ids"][:n]
        mask[i, :n] = episode["mask"][:n]
    return {"tokens": tokens, "loss_mask": mask}


def sft_on_episodes(source: ModelSource, episodes: Sequence[Mapping[str, Sequence]], out: Path, *, steps: int,
                    batch_size: int, optimizer: OptimizerConfig, seed: int = 0,
                    mesh: MeshConfig = MeshConfig(), rules: str = "fsdp") -> dict[str, Any]:
    """`steps` SFT updates of `source` on `episodes` (batches of `batch_size` drawn from a fresh
    permutation per epoch, seeded), then the policy exported under `out` (`export_policy`). Returns
    the losses (per written token) of the first and last step and what was exported."""
    if not 1 <= batch_size <= len(episodes):
        raise ValueError(f"batch_size must be in 1..{len(episodes)} (the episodes), got {batch_size}")
    mesh_, rules_ = make_mesh(mesh), get_rules(rules)
    model_config, params, tokenizer = load_policy(source, mesh_, rules_)
    opt_config = dataclasses.replace(optimizer, total_steps=steps)
    opt = make_optimizer(opt_config)
    state, state_sh = create_train_state(model_config, opt, mesh_, rules_, jax.random.PRNGKey(seed), params=params,
                                         param_dtype=jnp_dtype(source.param_dtype))
    del params
    rows = episode_sft_rows(episodes, tokenizer.pad_id)
    shapes = {k: jax.ShapeDtypeStruct((batch_size, v.shape[1]), np.int32) for k, v in rows.items()}
    b_sh = batch_shardings(mesh_, rules_, shapes)
    step = make_train_step(make_sft_loss(model_config, shard=MeshSharding(mesh_, rules_)), opt, state_sh, b_sh,
                           learning_rate=learning_rate_schedule(opt_config))
    rng, order, losses = np.random.default_rng(seed), np.array([], int), []
    for _ in range(steps):
        if len(order) < batch_size:
            order = np.concatenate([order, rng.permutation(len(episodes))])
        picked, order = order[:batch_size], order[batch_size:]
        state, metrics = step(state, global_batch({k: v[picked] for k, v in rows.items()}, b_sh, batch_size))
        losses.append(float(metrics["loss"]))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return {"steps": steps, "loss_first": losses[0], "loss_last": losses[-1], "episodes": len(episodes),
            **export_policy(out, model_config, state.params, source)}
