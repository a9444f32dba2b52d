"""Decode slots on device: the traced pieces both rollout modes are built from.

A rollout keeps B rows ("slots"), each with its own KV-cache row of T = S + N slots: the prompt
left-padded into [0, S), generated token i at S + i. Per row it tracks how many tokens it has
sampled (`step`), its prompt length (RoPE positions count from its first real token) and its
request's key and sampling values, so a row neither knows nor cares when, or next to whom, it
started:

    prefill(prompts)                -> Bank: prompt caches and last-token logits, one per unique prompt
    start_rows(bank, admission)     -> Rows for A requests, token 0 sampled from the prefill logits
    insert(rows, new_rows, where)   -> the new rows scattered into the B slots (continuous batching)
    decode(rows, ...)               -> Rows after up to `width` steps, and the tokens they produced

The static program is prefill -> start_rows -> decode to the end (engine.py); continuous batching
calls prefill/start_rows/insert whenever slots free up and decode in segments between
(continuous.py). Both draw token i of a request with fold_in(request key, i), so a request's
samples depend only on its key, prompt and sampling values.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from swe_rl_jax.models import ModelConfig, hidden_states, init_cache, logits_from_hidden, positions_from_mask
from swe_rl_jax.models.decoder import KVCache, ShardingHooks
from swe_rl_jax.models.params import Params
from swe_rl_jax.sampling.decode import DecodeCache, decode_step, pin_cache, scatter_rows, to_decode_cache
from swe_rl_jax.sampling.sampler import select_tokens


class Options(NamedTuple):
    """The static choices of a rollout program (part of its compilation key)."""

    new_tokens: int  # N, the generation bucket: each cache row holds S + N slots
    greedy: bool
    top_k: int
    use_top_p: bool


class Bank(NamedTuple):
    """Prefilled prompts: cache [L, P, S, K, hd], last-token logits [P, V], mask [P, S]."""

    cache: KVCache
    logits: jax.Array
    prompt_mask: jax.Array


class Admission(NamedTuple):
    """A requests to start (host inputs), one entry each."""

    bank_row: jax.Array  # int32 [A], the prefilled prompt it continues
    keys: jax.Array  # uint32 [A, 2], the request's PRNG key data
    temperature: jax.Array  # float32 [A] (1 for greedy)
    top_p: jax.Array  # float32 [A]
    max_new: jax.Array  # int32 [A], its generation limit (<= N)


class Rows(NamedTuple):
    """Per-slot decode state; every field has the slots on its first (batch) axis."""

    cache: DecodeCache  # heads-major (sampling/decode.py)
    kv_mask: jax.Array  # bool [B, T], the cache slots a row may attend to
    token: jax.Array  # int32 [B], the last sampled token (fed at the next step)
    prompt_len: jax.Array  # int32 [B]
    step: jax.Array  # int32 [B], tokens sampled so far
    active: jax.Array  # bool [B], still generating
    hit_eos: jax.Array  # bool [B], ended by an EOS id
    keys: jax.Array  # uint32 [B, 2]
    temperature: jax.Array  # float32 [B]
    top_p: jax.Array  # float32 [B]
    max_new: jax.Array  # int32 [B]


class Produced(NamedTuple):
    """What one `decode` call generated: column j holds each row's token of its j-th step
    there; row b's first `count[b]` columns are real."""

    tokens: jax.Array  # int32 [B, width]
    logp: jax.Array  # float32 [B, width]
    logp_truncated: jax.Array  # float32 [B, width]
    count: jax.Array  # int32 [B]


def _pin_rows(x: jax.Array, shard: Optional[ShardingHooks]) -> jax.Array:
    return x if shard is None else shard.activation(x, ("batch",) + (None,) * (x.ndim - 1))


def sample_rows(options: Options, logits: jax.Array, keys: jax.Array, steps: jax.Array, temperature: jax.Array,
                top_p: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Token `steps[b]` of each row from its logits, drawn with fold_in(request key, step)."""
    step_keys = jax.vmap(lambda data, i: jax.random.fold_in(jax.random.wrap_key_data(data), i))(keys, steps)
    return select_tokens(logits, step_keys, temperature, top_p, greedy=options.greedy, top_k=options.top_k,
                         use_top_p=options.use_top_p)


def _is_eos(tokens: jax.Array, eos_ids: jax.Array) -> jax.Array:
    return (tokens[:, None] == eos_ids[None, :]).any(axis=-1)


def pin_prefill_cache(c: jax.Array, shard: Optional[ShardingHooks]) -> jax.Array:
    """The decoder's cache [L, P, S, K, hd]: prompts over the batch axes, kv heads over tensor."""
    return c if shard is None else shard.activation(c, ("layers", "batch", "length", "kv_heads", "head_dim"))


def prefill(config: ModelConfig, shard: Optional[ShardingHooks], params: Params, prompt_tokens: jax.Array,
            prompt_mask: jax.Array) -> Bank:
    """Every prompt once (left-padded [P, S]); only the last slot's logits are kept (left padding
    puts each prompt's last token there). The cache holds just the S prompt slots; the decode
    layout adds the new ones. The prefill always scans its layers: slicing the weights inside
    the scan is amortized over every prompt token, and it ran faster than unrolled layers."""
    num_prompts, prompt_slots = prompt_tokens.shape
    cache = jax.tree.map(lambda c: pin_prefill_cache(c, shard), init_cache(config, num_prompts, prompt_slots))
    h, cache = hidden_states(config.replace(scan_layers=True), params, prompt_tokens, positions_from_mask(prompt_mask),
                             kv_mask=prompt_mask, cache=cache, cache_index=0, shard=shard)
    logits = logits_from_hidden(config, params, h[:, -1:])[:, 0]
    return Bank(cache, logits, prompt_mask)


def start_rows(config: ModelConfig, options: Options, shard: Optional[ShardingHooks], bank: Bank,
               admission: Admission, eos_ids: jax.Array) -> tuple[Rows, Produced]:
    """Rows for the admitted requests: their prompts' caches (fanned out: the n samples of a
    prompt share its prefill) in the decode layout, and token 0 sampled from the prefill
    logits. Returns the rows and token 0 as a one-column Produced."""
    row_of = admission.bank_row
    prompt_slots = bank.prompt_mask.shape[1]
    pin = lambda x: _pin_rows(x, shard)  # noqa: E731
    cache = jax.tree.map(lambda c: pin_prefill_cache(c[:, row_of], shard), bank.cache)
    cache = pin_cache(to_decode_cache(cache, prompt_slots + options.new_tokens, per_layer=not config.scan_layers),
                      shard)
    kv_mask = jnp.concatenate([bank.prompt_mask[row_of], jnp.zeros((row_of.shape[0], options.new_tokens), bool)], 1)
    prompt_len = bank.prompt_mask.sum(axis=1, dtype=jnp.int32)[row_of]
    logits = pin(bank.logits[row_of])
    steps = jnp.zeros(row_of.shape, jnp.int32)
    token, logp, logp_truncated = sample_rows(options, logits, admission.keys, steps, admission.temperature,
                                              admission.top_p)
    hit_eos = _is_eos(token, eos_ids)
    rows = Rows(cache=cache, kv_mask=pin(kv_mask), token=pin(token), prompt_len=pin(prompt_len), step=pin(steps + 1),
                active=pin(~hit_eos & (admission.max_new > 1)), hit_eos=pin(hit_eos), keys=pin(admission.keys),
                temperature=pin(admission.temperature), top_p=pin(admission.top_p), max_new=pin(admission.max_new))
    produced = Produced(token[:, None], logp[:, None], logp_truncated[:, None], jnp.ones_like(steps))
    return rows, produced


def empty_rows(config: ModelConfig, options: Options, shard: Optional[ShardingHooks], num_rows: int,
               prompt_slots: int) -> Rows:
    """B free slots (inactive, zero caches) for prompts of up to `prompt_slots` tokens."""
    cache = to_decode_cache(init_cache(config, num_rows, prompt_slots), prompt_slots + options.new_tokens,
                            per_layer=not config.scan_layers)
    zeros = lambda dtype, *shape: _pin_rows(jnp.zeros((num_rows, *shape), dtype), shard)  # noqa: E731
    ones = lambda dtype: _pin_rows(jnp.ones((num_rows,), dtype), shard)  # noqa: E731
    return Rows(cache=pin_cache(cache, shard), kv_mask=zeros(bool, prompt_slots + options.new_tokens),
                token=zeros(jnp.int32), prompt_len=zeros(jnp.int32), step=zeros(jnp.int32), active=zeros(bool),
                hit_eos=zeros(bool), keys=zeros(jnp.uint32, 2), temperature=ones(jnp.float32),
                top_p=ones(jnp.float32), max_new=zeros(jnp.int32))


def insert(rows: Rows, new_rows: Rows, where: jax.Array, shard: Optional[ShardingHooks]) -> Rows:
    """`new_rows` [A, ...] written into slots `where` [A] of `rows` (an index >= B drops that
    row: padding of the admission bucket)."""
    def put(buf: jax.Array, new: jax.Array, batch_axis: int) -> jax.Array:
        index = (slice(None),) * batch_axis + (where,)
        return buf.at[index].set(new.astype(buf.dtype), mode="drop")

    def put_cache(bufs: Any, news: Any) -> Any:
        if isinstance(bufs, tuple):  # per layer
            return tuple(put(b, n, 0) for b, n in zip(bufs, news))
        return put(bufs, news, 1)  # stacked [L, B, ...]

    cache = pin_cache({name: put_cache(rows.cache[name], new_rows.cache[name]) for name in rows.cache}, shard)
    fields = {name: _pin_rows(put(getattr(rows, name), getattr(new_rows, name), 0), shard)
              for name in Rows._fields if name != "cache"}
    return Rows(cache=cache, **fields)


def decode(config: ModelConfig, options: Options, shard: Optional[ShardingHooks], params: Params, rows: Rows,
           eos_ids: jax.Array, limit: jax.Array, refill_after: jax.Array, width: int,
           aligned: bool) -> tuple[Rows, Produced]:
    """Up to `min(width, limit)` decode steps for every slot, in a `lax.while_loop`.

    Stops early when no row is active, or once `refill_after` > 0 rows have finished (their
    slots can take waiting requests). `aligned`: every row started in the same call (the static
    program), so all rows write the same cache slot per step (one dynamic_update_slice);
    otherwise each row writes at its own length (a scatter over the rows).
    params: as `decode_step` takes them (per-layer list for unrolled layers).
    """
    prompt_slots = rows.kv_mask.shape[1] - options.new_tokens
    batch = rows.token.shape[0]
    started_active = rows.active

    def cond(carry: tuple[jax.Array, Rows, Produced]) -> jax.Array:
        j, s, _ = carry
        finished = jnp.sum(started_active & ~s.active)
        return (j < jnp.minimum(width, limit)) & jnp.any(s.active) & ((refill_after <= 0) | (finished < refill_after))

    def body(carry: tuple[jax.Array, Rows, Produced]) -> tuple[jax.Array, Rows, Produced]:
        j, s, out = carry
        fed = j if aligned else s.step - 1  # index of the token fed this step
        slot = prompt_slots + fed
        if aligned:
            kv_mask = jax.lax.dynamic_update_slice(s.kv_mask, jnp.ones((batch, 1), bool), (0, slot))
        else:
            kv_mask = scatter_rows(s.kv_mask, jnp.ones((batch,), bool), slot, 1)
        logits, cache = decode_step(config, params, s.token, s.prompt_len + fed, kv_mask, s.cache, slot, shard)
        token, logp, logp_truncated = sample_rows(options, logits, s.keys, s.step, s.temperature, s.top_p)
        live = s.active
        step = s.step + live.astype(jnp.int32)
        eos = live & _is_eos(token, eos_ids)
        column = lambda buf, new: jax.lax.dynamic_update_slice(buf, new[:, None], (0, j))  # noqa: E731
        out = Produced(column(out.tokens, token), column(out.logp, logp), column(out.logp_truncated, logp_truncated),
                       out.count + live.astype(jnp.int32))
        # Finished and empty rows keep running (static shapes); what they produce is never read.
        s = s._replace(cache=cache, kv_mask=kv_mask, token=jnp.where(live, token, s.token), step=step,
                       active=live & ~eos & (step < s.max_new), hit_eos=s.hit_eos | eos)
        return j + 1, s, out

    empty = lambda dtype: jnp.zeros((batch, width), dtype)  # noqa: E731
    produced = Produced(empty(jnp.int32), empty(jnp.float32), empty(jnp.float32), jnp.zeros((batch,), jnp.int32))
    _, rows, produced = jax.lax.while_loop(cond, body, (jnp.int32(0), rows, produced))
    return rows, produced
