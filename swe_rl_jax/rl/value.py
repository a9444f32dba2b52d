"""The PPO critic: a scalar value head on a decoder backbone, its own train state and update step.

Critic params are `{"head": {"w": [D], "b": []}}` plus, for a separate critic, `"backbone"`
(a full decoder params pytree, same architecture as the policy). Two modes:

- `separate` (default, the robust choice): the critic owns its backbone, initialised from a
  checkpoint (the policy's by default) and trained end to end by the value loss with its own
  optimizer / learning rate (`PPOConfig.critic_lr`). Policy and critic share nothing.
- `shared`: a value head on the POLICY's backbone. The head reads the policy's final hidden
  states under `stop_gradient`, so the value loss trains only the head and never moves the
  policy (the actor loss alone trains the backbone). Cheap in memory (D + 1 extra floats), but
  the critic can only be linear in the policy's current features, and each critic update runs one
  extra forward pass of the policy.

Values are aligned with the rollout batch (see `rl/rollout.py`): `values[b, s]` is the head
applied to the final hidden state at position s, i.e. the value of the state in which response token
`tokens[b, s+1]` is generated, on the same predicting positions as `loss_mask`, `logp_old`, and
`rl.gae`'s `values`. The head is zero-initialised (V ≡ 0 at the start), so the first GAE pass
sees plain Monte-Carlo returns rather than noise.

The update step follows the `train.step` contract (micro-batch SUM numerator of
`rl.value_loss_sum`, denominator of `loss_agg` over the global minibatch, non-finite steps
skipped), but takes the policy params as an extra argument so a shared head can read them.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from swe_rl_jax.models import ModelConfig, abstract_params, hidden_states, init_params
from swe_rl_jax.models.decoder import RematPolicy, ShardingHooks
from swe_rl_jax.parallel import MeshSharding, Rules
from swe_rl_jax.parallel.rules import param_shardings
from swe_rl_jax.rl.objectives import LossAgg, loss_denominator, value_loss_sum
from swe_rl_jax.train import TrainState, batch_shardings
from swe_rl_jax.train.step import _split

CriticMode = Literal["separate", "shared"]
CRITIC_BATCH_KEYS = ("tokens", "positions", "loss_mask", "values_old", "returns")
CRITIC_MODES: tuple[str, ...] = ("separate", "shared")


def init_head(hidden_size: int) -> dict[str, jax.Array]:
    """A zero value head (float32): V ≡ 0 until trained."""
    return {"w": jnp.zeros((hidden_size,), jnp.float32), "b": jnp.zeros((), jnp.float32)}


def apply_head(head: dict[str, jax.Array], hidden: jax.Array) -> jax.Array:
    """[B, S, D] hidden → [B, S] float32 values."""
    return jnp.einsum("bsd,d->bs", hidden.astype(jnp.float32), head["w"]) + head["b"]


def critic_values(config: ModelConfig, params: dict[str, Any], batch: dict[str, jax.Array],
                  policy_params: Optional[Any] = None, remat: RematPolicy = "none",
                  shard: Optional[ShardingHooks] = None) -> jax.Array:
    """Per-token values [B, T] on the predicting positions. A separate critic (params hold
    "backbone") runs its own backbone; a shared head reads the policy's hidden states with
    stop-gradient (pass `policy_params`). remat, shard: as in `models.hidden_states`."""
    if "backbone" in params:
        hidden, _ = hidden_states(config, params["backbone"], batch["tokens"], batch["positions"], remat=remat,
                                  shard=shard)
    else:
        if policy_params is None:
            raise ValueError("a shared value head needs the policy params")
        hidden, _ = hidden_states(config, policy_params, batch["tokens"], batch["positions"], remat=remat,
                                  shard=shard)
        hidden = jax.lax.stop_gradient(hidden)
    return apply_head(params["head"], hidden)


def _abstract_critic_params(config: ModelConfig, mode: CriticMode, param_dtype: Any) -> dict[str, Any]:
    d = config.hidden_size
    out: dict[str, Any] = {"head": {"w": jax.ShapeDtypeStruct((d,), jnp.float32),
                                    "b": jax.ShapeDtypeStruct((), jnp.float32)}}
    if mode == "separate":
        out["backbone"] = abstract_params(config, param_dtype)
    return out


def critic_state_shardings(config: ModelConfig, mesh: jax.sharding.Mesh, rules: Rules,
                           optimizer: optax.GradientTransformation, mode: CriticMode,
                           param_dtype: Any = jnp.float32) -> TrainState:
    """Like `train.state_shardings`: the backbone sharded as the policy, the head replicated,
    optimizer moments like their parameters."""
    _check_mode(mode)
    replicated = NamedSharding(mesh, PartitionSpec())
    p_shard: dict[str, Any] = {"head": {"w": replicated, "b": replicated}}
    if mode == "separate":
        p_shard["backbone"] = param_shardings(config, mesh, rules)
    abstract_opt = jax.eval_shape(optimizer.init, _abstract_critic_params(config, mode, param_dtype))
    opt_shard = optax.tree_map_params(
        optimizer, lambda _, s: s, abstract_opt, p_shard,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, NamedSharding),
    )
    return TrainState(step=replicated, params=p_shard, opt_state=opt_shard, rng=replicated)


def create_critic_state(config: ModelConfig, optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh,
                        rules: Rules, rng: jax.Array, mode: CriticMode = "separate",
                        backbone: Optional[Any] = None,
                        param_dtype: Any = jnp.float32) -> tuple[TrainState, TrainState]:
    """(critic state, shardings). `backbone` (separate mode): the initial critic backbone, e.g. the
    policy's or a critic checkpoint's params (copied, never aliased); random from `rng` if None."""
    shardings = critic_state_shardings(config, mesh, rules, optimizer, mode, param_dtype)

    def build(key: jax.Array, b: Optional[Any]) -> TrainState:
        params: dict[str, Any] = {"head": init_head(config.hidden_size)}
        if mode == "separate":
            params["backbone"] = (init_params(config, key, param_dtype) if b is None
                                  else jax.tree.map(lambda x: jnp.array(x, param_dtype, copy=True), b))
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params), rng=key)

    state = jax.jit(build, out_shardings=shardings)(rng, backbone if mode == "separate" else None)
    return state, shardings


def abstract_critic_state(config: ModelConfig, optimizer: optax.GradientTransformation, shardings: TrainState,
                          mode: CriticMode, param_dtype: Any = jnp.float32) -> TrainState:
    """ShapeDtypeStructs with the target shardings (a `Checkpointer.restore` target)."""
    def build(key: jax.Array) -> TrainState:
        params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), _abstract_critic_params(config, mode, param_dtype))
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params), rng=key)

    shapes = jax.eval_shape(build, jax.random.PRNGKey(0))
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


def _check_mode(mode: str) -> None:
    if mode not in CRITIC_MODES:
        raise ValueError(f"unknown critic mode {mode!r}; expected one of {list(CRITIC_MODES)}")


class Critic:
    """Static parts of the critic (config, optimizer, compiled functions); the state is passed in
    and out, like the policy's `TrainState`.

    values(state, policy_params, batch) -> [B, T] (old values at rollout time);
    update(state, policy_params, batch) -> (state, metrics) on keys `tokens`, `positions`,
    `loss_mask`, `values_old`, `returns` (any others are ignored). `state` is donated.
    """

    def __init__(self, model_config: ModelConfig, shardings: TrainState, optimizer: optax.GradientTransformation,
                 mesh: jax.sharding.Mesh, rules: Rules, *, value_clip: Optional[float] = 0.2,
                 loss_agg: LossAgg = "token-mean", micro_batches: int = 1,
                 learning_rate: Optional[optax.Schedule] = None, remat: RematPolicy = "none"):
        if micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
        self.cfg, self.shardings, self.optimizer = model_config, shardings, optimizer
        self.mesh, self.rules, self.shard = mesh, rules, MeshSharding(mesh, rules)
        self.value_clip, self.loss_agg, self.micro_batches = value_clip, loss_agg, micro_batches
        self.learning_rate, self.remat = learning_rate, remat
        self._values = jax.jit(
            lambda params, policy_params, batch: critic_values(self.cfg, params, batch, policy_params,
                                                               shard=self.shard))
        self._steps: dict[tuple, Any] = {}

    def values(self, state: TrainState, policy_params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        keys = {k: batch[k] for k in ("tokens", "positions")}
        return self._values(state.params, None if "backbone" in state.params else policy_params, keys)

    def update(self, state: TrainState, policy_params: Any, batch: dict[str, jax.Array]) -> tuple[TrainState, dict]:
        sub = {k: batch[k] for k in CRITIC_BATCH_KEYS}
        shared = "backbone" not in state.params
        return self.step_for(sub)(state, policy_params if shared else None, sub)

    def step_for(self, batch: dict[str, Any]) -> Any:
        """The jitted `step(state, policy_params, batch)` for batches shaped like `batch` (arrays or
        ShapeDtypeStructs with the keys CRITIC_BATCH_KEYS), compiled once per shape."""
        key = tuple((k, batch[k].shape) for k in CRITIC_BATCH_KEYS)
        if key not in self._steps:
            sub = {k: batch[k] for k in CRITIC_BATCH_KEYS}
            self._steps[key] = self._make_step(batch_shardings(self.mesh, self.rules, sub))
        return self._steps[key]

    def _make_step(self, shardings: dict[str, NamedSharding]):
        k, cfg = self.micro_batches, self.cfg

        def loss_fn(params: Any, policy_params: Any, batch: dict[str, jax.Array]):
            values = critic_values(cfg, params, batch, policy_params, self.remat, self.shard)
            return value_loss_sum(values, batch["values_old"], batch["returns"], batch["loss_mask"],
                                  value_clip=self.value_clip, loss_agg=self.loss_agg)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def step(state: TrainState, policy_params: Any, batch: dict[str, jax.Array]):
            denominator = jnp.maximum(loss_denominator(batch["loss_mask"], self.loss_agg), 1.0)
            if k == 1:
                (loss_sum, aux), grads = grad_fn(state.params, policy_params, batch)
            else:
                def accumulate(carry: Any, micro: dict[str, jax.Array]):
                    return jax.tree.map(jnp.add, carry, grad_fn(state.params, policy_params, micro)), None

                micro = _split(batch, k, shardings)
                shapes = jax.eval_shape(grad_fn, state.params, policy_params, jax.tree.map(lambda x: x[0], micro))
                init = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
                ((loss_sum, aux), grads), _ = jax.lax.scan(accumulate, init, micro)
            loss = loss_sum / denominator
            grads = jax.tree.map(lambda g: g / denominator.astype(g.dtype), grads)
            grad_norm = optax.tree.norm(grads)
            finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

            def apply(params: Any, opt_state: Any):
                updates, opt_state = self.optimizer.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), opt_state

            params, opt_state = jax.lax.cond(finite, apply, lambda p, o: (p, o), state.params, state.opt_state)
            new_state = state.replace(step=state.step + finite.astype(state.step.dtype), params=params,
                                      opt_state=opt_state)
            metrics = {"loss": loss, "grad_norm": grad_norm, "finite": finite.astype(jnp.int32), **aux}
            if self.learning_rate is not None:
                metrics["lr"] = jnp.asarray(self.learning_rate(state.step), jnp.float32)
            return new_state, metrics

        replicated = NamedSharding(self.mesh, PartitionSpec())
        return jax.jit(step, out_shardings=(self.shardings, replicated), donate_argnums=(0,))
