"""One jit-compiled train step, generic over the loss, with gradient accumulation.

The loss contract (`train.losses.LossFn`): `loss_fn(params, micro_batch) -> (sum_loss, aux)`,
where `sum_loss` is a SUM of per-token (or per-sequence) terms and `aux` a dict of scalars that
are summed over micro-batches. The step divides the summed loss and gradients by
`denominator_fn(global_batch)`, computed once over the whole batch before it is split, so k
micro-batches give exactly the gradient of one big batch even when they hold different numbers
of loss tokens (no mean of means). SFT uses the loss-token count; an RL loss with
`seq-mean-token-mean` aggregation passes a denominator counting sequences instead.

With LoRA (params holding adapters) the gradient is taken w.r.t. the adapters alone: the step
splits the params (`models.lora.split`), differentiates the loss of `merge(adapters, base)` over
the adapters with the base closed over (it gets no gradient at all, not a zero one), and clips,
measures and applies the update over the adapters; the base passes through untouched.

A step whose loss or gradient norm is not finite leaves params and optimizer state untouched
(a `lax.cond` inside the compiled step) and reports `finite = 0`; the loop counts these.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from swe_rl_jax.models import lora
from swe_rl_jax.parallel.rules import Rules, activation_sharding
from swe_rl_jax.train.losses import Batch, LossFn, count_loss_tokens
from swe_rl_jax.train.state import TrainState

Metrics = dict[str, jax.Array]
TrainStep = Callable[[TrainState, Batch], tuple[TrainState, Metrics]]

# Logical names of a batch array's dimensions, by rank: [B], [B, S], [B, S, extra].
_BATCH_AXES = ("batch", "length", None)


def batch_shardings(mesh: jax.sharding.Mesh, rules: Rules, batch: Batch) -> dict[str, NamedSharding]:
    """Batch arrays (arrays or ShapeDtypeStructs) sharded over `batch` on their first axis."""
    return {
        k: activation_sharding(mesh, rules, _BATCH_AXES[: len(v.shape)], v.shape) for k, v in batch.items()
    }


def _split(batch: Batch, k: int, shardings: dict[str, NamedSharding]) -> Batch:
    """[B, ...] → [k, B/k, ...] with micro-batch m = rows m, m+k, m+2k, ...: each micro-batch
    takes rows from every device's shard, so splitting moves no data between devices."""

    def split(key: str, x: jax.Array) -> jax.Array:
        if x.shape[0] % k:
            raise ValueError(f"batch[{key!r}] has {x.shape[0]} rows, not divisible by {k} micro-batches")
        y = x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1)
        sharding = shardings[key]
        row_axes = sharding.spec[0] if len(sharding.spec) else None
        names = (row_axes,) if isinstance(row_axes, str) else tuple(row_axes or ())
        if y.shape[1] % math.prod(sharding.mesh.shape[a] for a in names):
            return y  # micro-batch rows do not divide over the batch shards: let XLA choose
        return jax.lax.with_sharding_constraint(y, NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec)))

    return {key: split(key, x) for key, x in batch.items()}


def merge_aux(total: dict[str, Any], new: dict[str, Any], maximum: Callable[[Any, Any], Any] = max) -> dict[str, Any]:
    """Accumulates aux metrics over micro-batches or minibatches: sums, except keys ending in
    `_max`, which keep the maximum. Keys missing from `total` start from `new`."""
    return {k: (maximum(total[k], v) if k.endswith("_max") else total[k] + v) if k in total else v
            for k, v in new.items()}


def make_train_step(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    state_shardings: TrainState,
    batch_shardings: dict[str, NamedSharding],
    *,
    num_micro_batches: int = 1,
    denominator_fn: Callable[[Batch], jax.Array] = count_loss_tokens,
    learning_rate: Optional[optax.Schedule] = None,
) -> TrainStep:
    """`step(state, batch) -> (state, metrics)`, compiled once; `state` is donated.

    metrics: loss (sum / denominator), grad_norm (before clipping), denominator, finite (1/0),
    lr (when `learning_rate` is given, the rate this update used), and the `aux` entries merged
    over micro-batches (`merge_aux`: summed, `*_max` maxed).
    """
    k = num_micro_batches
    if k < 1:
        raise ValueError(f"num_micro_batches must be >= 1, got {k}")

    def step(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
        if lora.has_adapters(state.params):  # only the adapters train; the base is a constant
            trained, frozen = lora.split(state.params)
            grad_fn = jax.value_and_grad(lambda a, b: loss_fn(lora.merge(a, frozen), b), has_aux=True)
            rebuild = lambda t: lora.merge(t, frozen)  # noqa: E731
        else:
            trained, grad_fn, rebuild = state.params, jax.value_and_grad(loss_fn, has_aux=True), lambda t: t
        denominator = jnp.maximum(denominator_fn(batch).astype(jnp.float32), 1.0)
        if k == 1:
            (loss_sum, aux), grads = grad_fn(trained, batch)
        else:
            def accumulate(carry: Any, micro: Batch) -> tuple[Any, None]:
                (l, a), g = grad_fn(trained, micro)
                cl, ca, cg = carry
                return (cl + l, merge_aux(ca, a, jnp.maximum), jax.tree.map(jnp.add, cg, g)), None

            micro = _split(batch, k, batch_shardings)
            shapes = jax.eval_shape(grad_fn, trained, jax.tree.map(lambda x: x[0], micro))
            (l0, a0), g0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
            (loss_sum, aux, grads), _ = jax.lax.scan(accumulate, (l0, a0, g0), micro)
        loss = loss_sum / denominator
        grads = jax.tree.map(lambda g: g / denominator.astype(g.dtype), grads)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

        def apply(params: Any, opt_state: Any) -> tuple[Any, Any]:
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        # A branch, not a per-leaf jnp.where: the where keeps old and new copies of params and
        # optimizer state alive at once (+5 GiB/device for a 7B model on 8 devices), while the
        # branch updates the donated buffers in place.
        trained, opt_state = jax.lax.cond(finite, apply, lambda p, o: (p, o), trained, state.opt_state)
        new_state = state.replace(
            step=state.step + finite.astype(state.step.dtype), params=rebuild(trained), opt_state=opt_state
        )
        metrics = {
            "loss": loss, "grad_norm": grad_norm, "denominator": denominator,
            "finite": finite.astype(jnp.int32), **aux,
        }
        if learning_rate is not None:
            metrics["lr"] = jnp.asarray(learning_rate(state.step), jnp.float32)
        return new_state, metrics

    replicated = NamedSharding(next(iter(batch_shardings.values())).mesh, PartitionSpec())
    return jax.jit(
        step,
        in_shardings=(state_shardings, batch_shardings),
        out_shardings=(state_shardings, replicated),
        donate_argnums=(0,),
    )
