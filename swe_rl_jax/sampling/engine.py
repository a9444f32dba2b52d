"""The rollout engine: one compiled function per shape bucket does prefill and the whole decode.

    prefill the unique prompts once (models.hidden_states)  ->  fan the cache rows out to n
    samples each  ->  sample token 0 from the prefill logits  ->  lax.while_loop: feed the last
    token (sampling/decode.py, cache updated in place), sample the next, until every row has hit
    an EOS id or `max_new_tokens` is reached

Layout of the static-shape KV cache for a [prompt bucket S, new-token bucket N] request:
slots [0, S) hold the left-padded prompt (padding masked out by `kv_mask`), slot S + i - 1
holds generated token i - 1 when token i is computed. RoPE positions count from each row's
first real token, so left padding changes nothing for a row (see models/decoder.py).

Randomness: the key of sample r at step i is fold_in(fold_in(rng, i), r), with r the global
sample index (prompt-major). A sample therefore depends only on (rng, r, its prefix), not on
the batch bucket, the padding or the mesh it ran with.

Compilations: the jitted function is traced once per distinct (config, shape bucket, static
sampling options, mesh); `Engine.compilations` counts traces (each one is one XLA compile).
"""
from __future__ import annotations

import logging
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from swe_rl_jax.models import ModelConfig, hidden_states, init_cache, logits_from_hidden, positions_from_mask
from swe_rl_jax.models.params import Params
from swe_rl_jax.sampling.buckets import Buckets
from swe_rl_jax.sampling.decode import DecodeCache, decode_step, to_decode_cache
from swe_rl_jax.sampling.params import SamplingParams
from swe_rl_jax.sampling.results import SampleResult, finish
from swe_rl_jax.sampling.sampler import select_tokens

log = logging.getLogger(__name__)


class _Static(NamedTuple):
    """Everything besides array shapes that selects a compiled program."""

    new_tokens: int  # N, the generation bucket
    greedy: bool
    top_k: int
    use_top_p: bool
    mesh: Optional[Mesh]
    data_axis: str


class _Request(NamedTuple):
    """Device inputs of one rollout, padded to the buckets."""

    prompt_tokens: np.ndarray  # int32 [P, S], left-padded unique prompts
    prompt_mask: np.ndarray  # bool [P, S]
    row_of: np.ndarray  # int32 [B], the prefill row each sample continues
    sample_ids: np.ndarray  # int32 [B], global sample index (PRNG stream id)
    eos_ids: np.ndarray  # int32 [E]
    temperature: np.ndarray  # float32 []
    top_p: np.ndarray  # float32 []
    max_new_tokens: np.ndarray  # int32 []


class _Loop(NamedTuple):
    """The decode loop's carry."""

    step: jax.Array  # the token index being computed
    cache: DecodeCache  # heads-major (sampling/decode.py)
    kv_mask: jax.Array  # [B, T], the slots each row may attend to
    token: jax.Array  # [B], the token sampled at step - 1
    done: jax.Array  # [B], hit an EOS id
    lengths: jax.Array  # [B]
    tokens: jax.Array  # [B, N] outputs, valid up to lengths
    logp: jax.Array
    logp_truncated: jax.Array


def _shard_batch(x: jax.Array, static: _Static, batch_dim: int) -> jax.Array:
    """Keeps the batch dimension split over the data axis (a no-op without a mesh)."""
    if static.mesh is None:
        return x
    spec = [None] * x.ndim
    spec[batch_dim] = static.data_axis
    return jax.lax.with_sharding_constraint(x, NamedSharding(static.mesh, PartitionSpec(*spec)))


def rollout(
    config: ModelConfig, static: _Static, params: Params, request: _Request, rng: jax.Array
) -> tuple[jax.Array, ...]:
    """Traced body of the engine. Returns (tokens [B, N], logp [B, N], logp_truncated [B, N],
    lengths [B], hit_eos [B]); entries past a row's length are padding."""
    prompt_tokens, prompt_mask = request.prompt_tokens, request.prompt_mask
    num_prompts, prompt_slots = prompt_tokens.shape
    batch = request.row_of.shape[0]
    num_slots = prompt_slots + static.new_tokens
    shard = lambda x, dim=0: _shard_batch(x, static, dim)  # noqa: E731

    def sample(logits: jax.Array, step: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        step_key = jax.random.fold_in(rng, step)
        keys = jax.vmap(lambda r: jax.random.fold_in(step_key, r))(request.sample_ids)
        return select_tokens(logits, keys, request.temperature, request.top_p,
                             greedy=static.greedy, top_k=static.top_k, use_top_p=static.use_top_p)

    def is_eos(tokens: jax.Array) -> jax.Array:
        return (tokens[:, None] == request.eos_ids[None, :]).any(axis=-1)

    # Prefill: every unique prompt once; only the last slot's logits are needed (left padding
    # puts each prompt's last token there).
    # The prefill's cache holds the prompt slots only; the decode layout adds the new ones. The
    # prefill always scans its layers: slicing the weights inside the scan is amortized over
    # every prompt token, and it ran faster than unrolled layers (docs/SAMPLING.md).
    cache = jax.tree.map(lambda c: shard(c, 1), init_cache(config, num_prompts, prompt_slots))
    h, cache = hidden_states(config.replace(scan_layers=True), params, prompt_tokens,
                             positions_from_mask(prompt_mask), kv_mask=prompt_mask, cache=cache, cache_index=0)
    logits = logits_from_hidden(config, params, h[:, -1:])[:, 0]

    # Fan out: sample r continues prompt row_of[r]; the n samples of a prompt share its prefill.
    row_of = request.row_of
    cache = jax.tree.map(lambda c: shard(c[:, row_of], 1), cache)
    kv_mask = shard(jnp.concatenate([prompt_mask[row_of], jnp.zeros((batch, static.new_tokens), bool)], axis=1))
    logits = shard(logits[row_of])
    prompt_len = prompt_mask.sum(axis=1, dtype=jnp.int32)[row_of]

    if not config.scan_layers:  # slice each layer's weights once, not at every decode step
        params = {**params, "layers": [jax.tree.map(lambda a, i=i: a[i], params["layers"])
                                       for i in range(config.num_layers)]}
    cache = jax.tree.map(lambda c: shard(c, c.ndim - 4),
                         to_decode_cache(cache, num_slots, per_layer=not config.scan_layers))
    token, logp, logp_trunc = sample(logits, jnp.int32(0))
    first = lambda value, dtype: jnp.zeros((batch, static.new_tokens), dtype).at[:, 0].set(value)  # noqa: E731
    state = _Loop(step=jnp.int32(1), cache=cache, kv_mask=kv_mask, token=token, done=is_eos(token),
                  lengths=jnp.ones((batch,), jnp.int32), tokens=first(token, jnp.int32),
                  logp=first(logp, jnp.float32), logp_truncated=first(logp_trunc, jnp.float32))

    def cond(s: _Loop) -> jax.Array:
        return (s.step < request.max_new_tokens) & ~jnp.all(s.done)

    def body(s: _Loop) -> _Loop:
        slot = prompt_slots + s.step - 1  # where the previous token's keys and values go
        kv_mask = jax.lax.dynamic_update_slice(s.kv_mask, jnp.ones((batch, 1), bool), (0, slot))
        logits, cache = decode_step(config, params, s.token, prompt_len + s.step - 1, kv_mask, s.cache, slot)
        token, logp, logp_trunc = sample(logits, s.step)
        # Finished rows keep running (static shapes); what they write lies past their length.
        column = lambda buf, new: jax.lax.dynamic_update_slice(buf, new[:, None], (0, s.step))  # noqa: E731
        live = ~s.done
        return _Loop(step=s.step + 1, cache=cache, kv_mask=kv_mask, token=token,
                     done=s.done | (live & is_eos(token)), lengths=s.lengths + live.astype(jnp.int32),
                     tokens=column(s.tokens, token), logp=column(s.logp, logp),
                     logp_truncated=column(s.logp_truncated, logp_trunc))

    s = jax.lax.while_loop(cond, body, state)
    # The loop ends a row only at EOS or at the limit, so `done` means "ended by EOS".
    return s.tokens, s.logp, s.logp_truncated, s.lengths, s.done


class Engine:
    """Holds the compiled rollout programs for one mesh layout and bucket policy.

    mesh: optional; the batch is split over `data_axis` (its size must divide the batch
    buckets, which the engine ensures). Params are used with the sharding they carry when
    they already live on `mesh`, and replicated onto it otherwise (a transfer per call: place
    them once).
    """

    def __init__(self, buckets: Buckets = Buckets(), mesh: Optional[Mesh] = None, data_axis: str = "data"):
        if mesh is not None and data_axis not in mesh.axis_names:
            raise ValueError(f"data axis {data_axis!r} not in mesh axes {mesh.axis_names}")
        self.buckets = buckets
        self.mesh = mesh
        self.data_axis = data_axis
        self.compilations = 0
        self._compiled = jax.jit(self._trace, static_argnums=(0, 1))

    def _trace(self, config: ModelConfig, static: _Static, params: Params, request: _Request,
               rng: jax.Array) -> tuple[jax.Array, ...]:
        # Runs only when jit traces, i.e. once per new shape bucket / static option set.
        self.compilations += 1
        log.info("sampling: compiling rollout #%d: prompts %s, samples %d, new tokens %d, %s",
                 self.compilations, request.prompt_tokens.shape, request.row_of.shape[0],
                 static.new_tokens, static._replace(mesh=None))
        return rollout(config, static, params, request, rng)

    @property
    def _data_size(self) -> int:
        return 1 if self.mesh is None else self.mesh.shape[self.data_axis]

    def _place(self, params: Params, request: _Request) -> tuple[Params, _Request]:
        """Puts the batch on the data axis and params (unless already on the mesh) replicated."""
        if self.mesh is None:
            return params, request
        replicated = NamedSharding(self.mesh, PartitionSpec())

        def place_param(x: Any) -> jax.Array:
            sharding = getattr(x, "sharding", None)
            if isinstance(sharding, NamedSharding) and sharding.mesh == self.mesh:
                return x
            return jax.device_put(x, replicated)

        batch_sharded = lambda x: jax.device_put(  # noqa: E731
            x, NamedSharding(self.mesh, PartitionSpec(self.data_axis, *[None] * (x.ndim - 1))))
        request = request._replace(
            prompt_tokens=batch_sharded(request.prompt_tokens),
            prompt_mask=batch_sharded(request.prompt_mask),
            row_of=batch_sharded(request.row_of),
            sample_ids=batch_sharded(request.sample_ids),
        )
        return jax.tree.map(place_param, params), request

    def _pack(self, prompts: Sequence[Sequence[int]], sp: SamplingParams,
              eos_ids: Sequence[int], first_sample: int = 0) -> tuple[_Request, int]:
        """Left-pads the unique prompts into buckets; returns the request and the sample count."""
        unique: dict[tuple[int, ...], int] = {}
        prompt_rows = [unique.setdefault(tuple(int(t) for t in p), len(unique)) for p in prompts]
        if any(len(p) == 0 for p in unique):
            raise ValueError("empty prompt: every prompt needs at least one token")
        num_samples = len(prompts) * sp.n
        num_prompts, prompt_slots, batch = self._bucketed(len(unique), max(len(p) for p in unique), num_samples)
        tokens = np.zeros((num_prompts, prompt_slots), np.int32)
        mask = np.zeros((num_prompts, prompt_slots), bool)
        for row, p in enumerate(unique):
            tokens[row, prompt_slots - len(p):] = p
            mask[row, prompt_slots - len(p):] = True
        row_of = np.zeros((batch,), np.int32)
        row_of[:num_samples] = np.repeat(np.asarray(prompt_rows, np.int32), sp.n)
        request = _Request(
            prompt_tokens=tokens, prompt_mask=mask, row_of=row_of,
            sample_ids=first_sample + np.arange(batch, dtype=np.int32),
            eos_ids=np.asarray(list(eos_ids), np.int32).reshape(-1),
            temperature=np.float32(sp.logprob_temperature),
            top_p=np.float32(sp.top_p), max_new_tokens=np.int32(sp.max_new_tokens))
        return request, num_samples

    def _bucketed(self, num_prompts: int, longest_prompt: int, num_samples: int) -> tuple[int, int, int]:
        """(prompt rows, prompt slots, sample rows) of a request, rounded up to the buckets; row
        counts also divide over the data axis."""
        data = self._data_size
        return (self.buckets.batch(num_prompts, multiple_of=data), self.buckets.prompt(longest_prompt),
                self.buckets.batch(num_samples, multiple_of=data))

    def _static(self, sp: SamplingParams) -> _Static:
        return _Static(self.buckets.new_tokens(sp.max_new_tokens), sp.greedy, sp.top_k, sp.uses_top_p,
                       self.mesh, self.data_axis)

    def _inputs(self, config: ModelConfig, params: Params, prompts_token_ids: Sequence[Sequence[int]],
                sp: SamplingParams, first_sample: int = 0) -> tuple[_Static, Params, _Request, int]:
        """The compiled program's static options and placed inputs, and the sample count."""
        eos_ids = config.eos_token_ids if sp.eos_ids is None else sp.eos_ids
        request, num_samples = self._pack(prompts_token_ids, sp, eos_ids, first_sample)
        params, request = self._place(params, request)
        return self._static(sp), params, request, num_samples

    def lower_shapes(self, config: ModelConfig, params: Params, num_prompts: int, prompt_len: int,
                     sampling_params: SamplingParams, mesh: Optional[Mesh] = None) -> jax.stages.Lowered:
        """`lower` from shapes alone, for ahead-of-time planning (swe_rl_jax/plan/): `params` may
        be ShapeDtypeStructs carrying their shardings, on devices this host does not have (a TPU
        topology). The request: `num_prompts` distinct prompts of `prompt_len` tokens, each
        sampled `sampling_params.n` times, laid out as `_place` lays it out; `mesh` holds it when
        the engine has none (give the params' mesh: `generate` then replicates it there)."""
        sp = sampling_params
        rows, slots, batch = self._bucketed(num_prompts, prompt_len, num_prompts * sp.n)
        num_eos = len(config.eos_token_ids if sp.eos_ids is None else sp.eos_ids)
        on = self.mesh if self.mesh is not None else mesh
        if on is None:
            raise ValueError("lower_shapes needs a mesh: the engine's, or the one the params live on")

        def struct(shape: tuple[int, ...], dtype: Any, batched: bool = False) -> jax.ShapeDtypeStruct:
            split = batched and self.mesh is not None
            spec = PartitionSpec(self.data_axis, *[None] * (len(shape) - 1)) if split else PartitionSpec()
            return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(on, spec))

        request = _Request(
            prompt_tokens=struct((rows, slots), jnp.int32, True), prompt_mask=struct((rows, slots), jnp.bool_, True),
            row_of=struct((batch,), jnp.int32, True), sample_ids=struct((batch,), jnp.int32, True),
            eos_ids=struct((num_eos,), jnp.int32), temperature=struct((), jnp.float32),
            top_p=struct((), jnp.float32), max_new_tokens=struct((), jnp.int32))
        rng = struct((), jax.eval_shape(lambda: jax.random.key(0)).dtype)
        return self._compiled.lower(config, self._static(sp), params, request, rng)

    def lower(self, config: ModelConfig, params: Params, prompts_token_ids: Sequence[Sequence[int]],
              sampling_params: SamplingParams) -> jax.stages.Lowered:
        """The program `generate` runs for these arguments, lowered (for inspection: e.g.
        `.compile().as_text()` names the ops of a profile, see tools/profile_decode.py)."""
        static, params, request, _ = self._inputs(config, params, prompts_token_ids, sampling_params)
        return self._compiled.lower(config, static, params, request, jax.random.key(0))

    def generate(
        self,
        config: ModelConfig,
        params: Params,
        prompts_token_ids: Sequence[Sequence[int]],
        sampling_params: SamplingParams,
        rng: jax.Array | int,
        tokenizer: Any = None,
        first_sample: int = 0,
    ) -> list[SampleResult]:
        """One SampleResult per prompt x sample, prompt-major (prompt 0's n samples first).
        first_sample: the global index of this call's first sample (its PRNG stream), when a
        host samples its share of a larger request (rl/sampling_hosts.py)."""
        sp = sampling_params
        if not prompts_token_ids:
            return []
        if sp.stop and tokenizer is None:
            raise ValueError("stop strings need a tokenizer (they are matched on decoded text)")
        if isinstance(rng, int):
            rng = jax.random.key(rng)
        static, params, request, num_samples = self._inputs(config, params, prompts_token_ids, sp, first_sample)
        outputs = jax.device_get(self._compiled(config, static, params, request, rng))
        tokens, logp, logp_trunc, lengths, hit_eos = (np.asarray(o) for o in outputs)
        results = []
        for r in range(num_samples):
            n = int(lengths[r])
            results.append(finish(r // sp.n, r % sp.n, tokens[r, :n], logp[r, :n], logp_trunc[r, :n],
                                  bool(hit_eos[r]), sp.stop, tokenizer))
        return results


_ENGINES: dict[tuple[Optional[Mesh], str], Engine] = {}


def default_engine(mesh: Optional[Mesh] = None, data_axis: str = "data") -> Engine:
    """A process-wide engine per mesh layout, so repeated `generate` calls reuse compilations."""
    key = (mesh, data_axis)
    if key not in _ENGINES:
        _ENGINES[key] = Engine(mesh=mesh, data_axis=data_axis)
    return _ENGINES[key]


def generate(
    config: ModelConfig,
    params: Params,
    prompts_token_ids: Sequence[Sequence[int]],
    sampling_params: SamplingParams,
    rng: jax.Array | int,
    *,
    tokenizer: Any = None,
    mesh: Optional[Mesh] = None,
    data_axis: str = "data",
    first_sample: int = 0,
) -> list[SampleResult]:
    """Samples `sampling_params.n` responses per prompt; results are prompt-major.

    rng: a PRNG key (or an int seed); the same key gives the same samples. tokenizer: anything
    with `decode(ids) -> str` (e.g. `ChatTokenizer`); fills `text` and enables stop strings.
    first_sample: see `Engine.generate`.
    """
    engine = default_engine(mesh, data_axis)
    return engine.generate(config, params, prompts_token_ids, sampling_params, rng, tokenizer, first_sample)
