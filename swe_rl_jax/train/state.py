"""The train state pytree and its creation directly in its sharded layout.

With LoRA (params holding adapters, `models.lora`) only the adapters train: the optimizer state
is built over `trainable(params)`, the adapters alone, so the frozen base has no Adam moments.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from swe_rl_jax.models import lora
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.params import Params, cast_params, init_params
from swe_rl_jax.parallel.rules import Rules, param_shardings


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class TrainState:
    """step: updates applied so far (skipped non-finite steps do not count), int32 scalar.
    params: master weights (float32 by default; the model casts to `ModelConfig.dtype` for
    compute); with LoRA the base may be held in bfloat16 while the adapters stay float32.
    opt_state: the optax state of `trainable(params)` (the adapters alone with LoRA).
    rng: the run's base key (raw uint32 [2]); consumers derive per-step keys with
    `jax.random.fold_in(rng, step)` so a resumed run draws the same."""

    step: jax.Array
    params: Params
    opt_state: Any
    rng: jax.Array

    def replace(self, **changes: Any) -> "TrainState":
        return dataclasses.replace(self, **changes)


def trainable(params: Any) -> Any:
    """The part of a params pytree (or of a pytree shaped like it: shardings, abstract arrays)
    that trains and has optimizer state: its LoRA adapters when it holds any, else all of it."""
    return lora.split(params)[0] if lora.has_adapters(params) else params


def state_shardings(
    config: ModelConfig, mesh: jax.sharding.Mesh, rules: Rules, optimizer: optax.GradientTransformation,
    param_dtype: Any = jnp.float32,
) -> TrainState:
    """NamedShardings of every state leaf: optimizer moments like their parameters, scalars
    (step, counts, rng) replicated."""
    p_shard = param_shardings(config, mesh, rules)
    replicated = NamedSharding(mesh, PartitionSpec())
    abstract_params = jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0), param_dtype))
    abstract_opt = jax.eval_shape(optimizer.init, trainable(abstract_params))
    opt_shard = optax.tree_map_params(
        optimizer, lambda _, s: s, abstract_opt, trainable(p_shard),
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, NamedSharding),
    )
    return TrainState(step=replicated, params=p_shard, opt_state=opt_shard, rng=replicated)


def create_train_state(
    config: ModelConfig,
    optimizer: optax.GradientTransformation,
    mesh: jax.sharding.Mesh,
    rules: Rules,
    rng: jax.Array,
    params: Optional[Params] = None,
    param_dtype: Any = jnp.float32,
) -> tuple[TrainState, TrainState]:
    """(state, shardings). Random params from `rng` unless `params` (e.g. `load_hf_sharded`)
    are given; either way every leaf is created in place on its shards."""
    shardings = state_shardings(config, mesh, rules, optimizer, param_dtype)

    def build(key: jax.Array, p: Optional[Params]) -> TrainState:
        p = init_params(config, key, param_dtype) if p is None else cast_params(p, param_dtype)
        return TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=optimizer.init(trainable(p)), rng=key)

    state = jax.jit(build, out_shardings=shardings)(rng, params)
    return state, shardings


def abstract_train_state(
    config: ModelConfig, optimizer: optax.GradientTransformation, shardings: TrainState,
    param_dtype: Any = jnp.float32,
) -> TrainState:
    """ShapeDtypeStructs carrying the target shardings: a restore target and a lowering input
    that allocates nothing."""
    shapes = jax.eval_shape(
        lambda key: TrainState(
            step=jnp.zeros((), jnp.int32),
            params=(p := init_params(config, key, param_dtype)),
            opt_state=optimizer.init(trainable(p)),
            rng=key,
        ),
        jax.random.PRNGKey(0),
    )
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
