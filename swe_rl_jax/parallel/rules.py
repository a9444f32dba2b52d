"""Sharding as data: tables mapping logical axis names to mesh axes, and their resolution.

A rule table maps each logical name (the parameter names of `models.params`, plus `batch` and
`length` for activations) to a tuple of mesh axes; an absent name is replicated. Resolution of
one array, dimension by dimension, left to right:

* a mesh axis is used at most once per array: a later dimension whose rule names an axis an
  earlier dimension already took is replicated (so `embed [vocab, embed]` under the `fsdp` table
  shards vocab and leaves embed whole);
* **a dimension whose size is not divisible by the product of its mesh axes is replicated**
  (e.g. 2 kv heads over tensor=4), and its axes stay free for later dimensions. This keeps every
  published shape loadable on every mesh, at the cost of memory for the odd dimension.

Presets:
  dp       parameters replicated, batch over data×fsdp.
  fsdp     ZeRO-3 style: parameters sharded over `fsdp` on vocab/embed/mlp, batch over data×fsdp.
  fsdp_tp  fsdp plus Megatron tensor parallelism: heads, kv_heads, mlp and vocab over `tensor`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec

from swe_rl_jax.config import ConfigError
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.params import abstract_params, logical_axes

Rules = Mapping[str, tuple[str, ...]]

_BATCH = {"batch": ("data", "fsdp")}
RULE_PRESETS: dict[str, Rules] = {
    "dp": dict(_BATCH),
    "fsdp": {**_BATCH, "vocab": ("fsdp",), "embed": ("fsdp",), "mlp": ("fsdp",)},
    "fsdp_tp": {
        **_BATCH,
        "vocab": ("tensor",),
        "embed": ("fsdp",),
        "mlp": ("tensor",),
        "heads": ("tensor",),
        "kv_heads": ("tensor",),
    },
}


def get_rules(name: str) -> Rules:
    if name not in RULE_PRESETS:
        raise ConfigError(f"unknown sharding preset {name!r}; known: {', '.join(RULE_PRESETS)}")
    return RULE_PRESETS[name]


def logical_spec(
    axes: Sequence[Optional[str]], shape: Sequence[int], mesh: jax.sharding.Mesh, rules: Rules
) -> PartitionSpec:
    """PartitionSpec for an array of `shape` whose dimensions carry the logical names `axes`."""
    if len(axes) != len(shape):
        raise ValueError(f"{len(axes)} logical axes {tuple(axes)} for a shape of rank {len(shape)}")
    used: set[str] = set()
    spec: list[Any] = []
    for name, size in zip(axes, shape):
        mesh_axes = rules.get(name, ()) if name else ()
        if not mesh_axes or used.intersection(mesh_axes) or size % math.prod(mesh.shape[a] for a in mesh_axes):
            spec.append(None)  # unmapped, axis taken, or not divisible: replicate (see module doc)
            continue
        used.update(mesh_axes)
        spec.append(mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes)
    return PartitionSpec(*spec)


def param_shardings(config: ModelConfig, mesh: jax.sharding.Mesh, rules: Rules) -> Any:
    """The params pytree with a `NamedSharding` per leaf."""
    return jax.tree.map(
        lambda axes, leaf: NamedSharding(mesh, logical_spec(axes, leaf.shape, mesh, rules)),
        logical_axes(config),
        abstract_params(config),
        is_leaf=lambda x: isinstance(x, tuple),
    )


def activation_sharding(
    mesh: jax.sharding.Mesh, rules: Rules, axes: Sequence[Optional[str]], shape: Sequence[int]
) -> NamedSharding:
    """Sharding of an activation or batch array, e.g. axes ("batch", "length") for token ids."""
    return NamedSharding(mesh, logical_spec(axes, shape, mesh, rules))


# Mesh axes over which weights are sharded at rest but gathered for compute (ZeRO-3 / FSDP).
GATHERED_AXES = ("fsdp",)


@dataclass(frozen=True)
class MeshSharding:
    """The decoder's `ShardingHooks` for a mesh and rule table, used inside jit.

    activation(): pins an activation to its rule layout, so the partitioner keeps the batch
    split instead of, say, gathering it to contract against a sharded weight.
    weight(): pins a weight at its point of use to the rules minus GATHERED_AXES: the weight
    is all-gathered over `fsdp` right there (one layer at a time inside the layer scan) and its
    gradient reduce-scattered back, while `tensor` splits stay in place.
    """

    mesh: jax.sharding.Mesh
    rules: Rules

    def activation(self, x: jax.Array, axes: tuple[str, ...]) -> jax.Array:
        return jax.lax.with_sharding_constraint(x, activation_sharding(self.mesh, self.rules, axes, x.shape))

    def weight(self, w: jax.Array, axes: tuple[str, ...]) -> jax.Array:
        compute_rules = {k: v for k, v in self.rules.items() if not set(v) & set(GATHERED_AXES)}
        return jax.lax.with_sharding_constraint(w, activation_sharding(self.mesh, compute_rules, axes, w.shape))

    def per_shard(self, fn: Callable[..., jax.Array], args: tuple[jax.Array, ...],
                  axes: tuple[tuple[Optional[str], ...], ...], out_axes: tuple[Optional[str], ...]) -> jax.Array:
        """`jax.shard_map` of fn with each arg split by the rule layout of its logical axes (a
        dimension the rules cannot divide stays whole, as everywhere): for kernels XLA cannot
        partition (Pallas/Mosaic), which must see only their own shards."""
        specs = tuple(logical_spec(a, x.shape, self.mesh, self.rules) for a, x in zip(axes, args))
        out_spec = logical_spec(out_axes, args[0].shape, self.mesh, self.rules)
        return jax.shard_map(fn, mesh=self.mesh, in_specs=specs, out_specs=out_spec, check_vma=False)(*args)
