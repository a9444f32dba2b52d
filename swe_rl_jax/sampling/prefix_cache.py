"""Prompt KV kept across engine calls, so a prompt that extends an earlier one prefills only its new
tokens (docs/SAMPLING.md, "Prefix cache").

A token-exact agent episode (agent/tokens.py) asks turn k+1 with turn k's prompt + its sampled ids
+ the observation's ids. Re-prefilling every prompt whole costs the sum of an episode's contexts
over its turns; with this cache it costs about its final length.

What is kept: the keys and values of every prompt the engine prefilled, at its real tokens only
(never the bank's left padding), in a pool of token slots on device, {"k", "v"}: [L, C, K, hd]. An
entry is a prompt's token ids and the pool slot of each of its tokens. Entries share slots: a prompt
that continues a stored one holds that one's slots for its prefix and new slots for its own tokens,
so a chain of turns, or the G episodes of a GRPO group with one task prompt, keeps each token once.

Lookup: the longest common prefix of a prompt with any entry (an earlier turn of its episode, a
sibling episode that shares its beginning, the same prompt asked again), at most the prompt's length
- 1: its last token runs in any case, for the next token's logits. KV at a position depends only on
the tokens up to it, so any entry that starts with the same tokens holds the right KV for them.

Dropped: an entry that a newly stored prompt extends (the new entry holds its slots and matches all
it matched: dead weight, as an episode moves on); the least recently used entries, when the pool is
full and new tokens need slots. Memory: the pool grows by doublings, as slots are needed, up to
`max_tokens` slots (2 x L x K x hd x the compute dtype's bytes each), and never past it; a prompt
whose new tokens do not fit even in an emptied pool is not kept.

Never stale: KV depends on the weights. A cache is bound to the params arrays it was filled with
(`bind`, called by the engine on every call) and any other params empty it; `SamplerPolicy` owns one
per policy, and the RL trainer builds a new policy on each step's weights.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.config import require
from swe_rl_jax.models import ModelConfig, hidden_states, logits_from_hidden, positions_from_mask
from swe_rl_jax.models.decoder import KVCache, ShardingHooks, compute_dtype
from swe_rl_jax.models.params import Params
from swe_rl_jax.sampling.buckets import Buckets, round_up
from swe_rl_jax.sampling.slots import Bank, pin_prefill_cache

# The smallest pool: growing one by doublings from a few slots would compile a program per size.
MIN_POOL_TOKENS = 1024


class Match(NamedTuple):
    """What the cache holds of one prompt: its first `length` tokens, at pool `slots`."""

    length: int
    slots: np.ndarray  # int32 [length]
    covered: bool  # an entry holds the whole prompt already: nothing new to keep


class _Entry(NamedTuple):
    tokens: np.ndarray  # int32 [n]
    slots: np.ndarray  # int32 [n], the pool slot of each token's keys and values


class PrefixCache:
    """Host index of the pool (module docstring); the engine runs the device programs that read and
    write `pool`. Counters: `hits` (prompts that reused a prefix), `reused_tokens` (tokens they did
    not prefill), `evictions` (entries dropped for room)."""

    def __init__(self, max_tokens: int):
        require(max_tokens >= 1, "prefix_cache_tokens", f"must be >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self.hits = self.reused_tokens = self.evictions = 0
        self.clear()

    def clear(self) -> None:
        """Forget every entry and free the pool (counters stay)."""
        self.pool: Optional[KVCache] = None
        self._refs = np.zeros(0, np.int32)  # entries holding each slot; the pool's logical size
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._next_id = 0
        self._weights: Optional[tuple] = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_tokens(self) -> int:
        """Pool slots some entry holds (at most `max_tokens`)."""
        return int(np.count_nonzero(self._refs))

    @property
    def pool_tokens(self) -> int:
        """The pool's size in slots as planned (the engine grows the device pool to it before writing)."""
        return len(self._refs)

    def bind(self, config: ModelConfig, params: Params) -> None:
        """Empties the cache unless it was filled with these very params arrays."""
        weights = (config, *jax.tree.leaves(params))
        old = self._weights
        if old is None or len(old) != len(weights) or old[0] != config or any(
                a is not b for a, b in zip(old[1:], weights[1:])):
            self.clear()
            self._weights = weights

    def match(self, prompt: Sequence[int]) -> Match:
        """The longest common prefix of `prompt` with any entry, capped at len(prompt) - 1."""
        tokens = np.asarray(prompt, np.int32)
        best, best_key = 0, None
        for key, entry in self._entries.items():
            n = min(len(entry.tokens), len(tokens))
            differ = np.flatnonzero(entry.tokens[:n] != tokens[:n])
            common = int(differ[0]) if differ.size else n
            if common > best:
                best, best_key = common, key
        if best_key is None:
            return Match(0, np.zeros(0, np.int32), False)
        self._entries.move_to_end(best_key)
        length = min(best, len(tokens) - 1)
        if length:
            self.hits += 1
            self.reused_tokens += length
        return Match(length, self._entries[best_key].slots[:length].copy(), best == len(tokens))

    def reserve(self, prompts: Sequence[Sequence[int]], matches: Sequence[Match], num_rows: int,
                prompt_slots: int) -> np.ndarray:
        """Keeps the prompts of a bank (rows of `prompts`, left-padded into `prompt_slots`) whose
        matches were taken before their prefill: entries for them, pool slots for their new tokens.
        Returns the pool slot each bank slot's KV goes to, [num_rows, prompt_slots] (`pool_tokens`,
        out of range, where nothing is written); the pool may have to grow to `pool_tokens` first.
        The engine reads the matched prefixes and writes the new tokens in one program, so a slot
        freed here for new tokens is read before it is overwritten."""
        keep = [p for p, m in enumerate(matches) if not m.covered]
        for p in keep:  # the new entries hold their prefixes' slots: no eviction below frees them
            self._refs[matches[p].slots] += 1
        fresh: dict[int, np.ndarray] = {}
        for p in keep:
            slots = self._allocate(len(prompts[p]) - matches[p].length)
            if slots is None:
                self._refs[matches[p].slots] -= 1
            else:
                fresh[p] = slots
        dst = np.full((num_rows, prompt_slots), self.pool_tokens, np.int32)
        for p, slots in fresh.items():
            tokens = np.asarray(prompts[p], np.int32)
            for key in [k for k, e in self._entries.items()
                        if len(e.tokens) <= len(tokens) and np.array_equal(e.tokens, tokens[:len(e.tokens)])]:
                self._drop(key)
            self._entries[self._next_id] = _Entry(tokens, np.concatenate([matches[p].slots, slots]))
            self._next_id += 1
            dst[p, prompt_slots - len(slots):] = slots
        return dst

    def _allocate(self, count: int) -> Optional[np.ndarray]:
        """`count` free slots (held once), growing the pool up to `max_tokens`, then evicting the
        least recently used entries; None when even an emptied pool has no room."""
        if count > self.max_tokens:  # never fits: keep what the cache holds
            return None
        free = np.flatnonzero(self._refs == 0)
        if free.size < count and self.pool_tokens < self.max_tokens:
            wanted = self.pool_tokens - free.size + count
            size = min(self.max_tokens, round_up(wanted, MIN_POOL_TOKENS))
            self._refs = np.concatenate([self._refs, np.zeros(size - self.pool_tokens, np.int32)])
            free = np.flatnonzero(self._refs == 0)
        while free.size < count and self._entries:
            self._drop(next(iter(self._entries)))
            self.evictions += 1
            free = np.flatnonzero(self._refs == 0)
        if free.size < count:
            return None
        slots = free[:count].astype(np.int32)
        self._refs[slots] = 1
        return slots

    def _drop(self, key: int) -> None:
        self._refs[self._entries.pop(key).slots] -= 1


def continuation_inputs(prompts: Sequence[Sequence[int]], matches: Sequence[Match], num_rows: int,
                        prompt_slots: int, buckets: Buckets) -> tuple[np.ndarray, ...]:
    """Host inputs of `continue_prefill` for a bank of `prompts` whose first `matches[p].length`
    tokens are in the pool: (prefix slots, prefix mask [num_rows, S0]; prefix lengths [num_rows];
    suffix tokens, suffix mask [num_rows, S1]; layout [num_rows, prompt_slots]). S0 and S1 are
    `buckets.prompt` sizes, so programs compile per bucket, not per length. Both parts are
    left-padded; `layout` gives, for each slot of the bank's usual left-padded row, the slot of the
    prefix ++ suffix cache it comes from (0 in the padding)."""
    suffix_lengths = [len(p) - m.length for p, m in zip(prompts, matches)]
    s0 = buckets.prompt(max(m.length for m in matches))
    s1 = buckets.prompt(max(suffix_lengths))
    prefix_slots = np.zeros((num_rows, s0), np.int32)
    prefix_mask = np.zeros((num_rows, s0), bool)
    prefix_len = np.zeros((num_rows,), np.int32)
    tokens = np.zeros((num_rows, s1), np.int32)
    mask = np.zeros((num_rows, s1), bool)
    layout = np.zeros((num_rows, prompt_slots), np.int32)
    for row, (prompt, m, n_new) in enumerate(zip(prompts, matches, suffix_lengths)):
        n = m.length
        prefix_slots[row, s0 - n:] = m.slots
        prefix_mask[row, s0 - n:] = True
        prefix_len[row] = n
        tokens[row, s1 - n_new:] = prompt[n:]
        mask[row, s1 - n_new:] = True
        layout[row, prompt_slots - len(prompt):] = np.concatenate(
            [np.arange(s0 - n, s0), np.arange(s0 + s1 - n_new, s0 + s1)])
    return prefix_slots, prefix_mask, prefix_len, tokens, mask, layout


def _pin_pool(x: jax.Array, shard: Optional[ShardingHooks]) -> jax.Array:
    """[L, C, K, hd]: kv heads over `tensor` as in every cache; every row may read any slot."""
    return x if shard is None else shard.activation(x, ("layers", None, "kv_heads", "head_dim"))


def continue_prefill(config: ModelConfig, shard: Optional[ShardingHooks], params: Params, pool: KVCache,
                     prefix_slots: jax.Array, prefix_mask: jax.Array, prefix_len: jax.Array, tokens: jax.Array,
                     mask: jax.Array, layout: jax.Array, prompt_mask: jax.Array) -> Bank:
    """The Bank `slots.prefill` gives for the whole prompts, computing only the suffixes: their
    prefixes' KV gathered from the pool into a cache [L, P, S0 + S1, K, hd], the suffix tokens run
    at `cache_index` S0, RoPE positions continuing from each prefix's length, kv_mask = prefix mask
    ++ suffix mask (a hole between the two left-padded parts is masked like any padding; positions
    only feed RoPE), then every row's slots gathered into the bank's left-padded layout (`layout`)
    so `start_rows` and the decode slots see the bank a full prefill would have made."""
    s0 = prefix_slots.shape[1]
    num_rows, s1 = tokens.shape
    cache = {}
    for name, buf in pool.items():
        prefix = buf[:, prefix_slots]  # [L, P, S0, K, hd]
        suffix = jnp.zeros((buf.shape[0], num_rows, s1, *buf.shape[2:]), buf.dtype)
        cache[name] = pin_prefill_cache(jnp.concatenate([prefix, suffix], axis=2), shard)
    kv_mask = jnp.concatenate([prefix_mask, mask], axis=1)
    positions = prefix_len[:, None] + positions_from_mask(mask)
    h, cache = hidden_states(config.replace(scan_layers=True), params, tokens, positions, kv_mask=kv_mask, cache=cache,
                             cache_index=s0, shard=shard)
    logits = logits_from_hidden(config, params, h[:, -1:])[:, 0]
    rows = jnp.arange(num_rows)[:, None]
    cache = {name: pin_prefill_cache(buf[:, rows, layout], shard) for name, buf in cache.items()}
    return Bank(cache, logits, prompt_mask)


def write_pool(shard: Optional[ShardingHooks], pool: KVCache, cache: KVCache, dst: jax.Array) -> KVCache:
    """`pool` with the bank cache's slot (p, s) [L, P, S, K, hd] written at pool slot dst[p, s]
    (an out-of-range slot: not written)."""
    def put(buf: jax.Array, new: jax.Array) -> jax.Array:
        flat = new.reshape(new.shape[0], -1, *new.shape[3:])
        return _pin_pool(buf.at[:, dst.reshape(-1)].set(flat.astype(buf.dtype), mode="drop"), shard)

    return {name: put(pool[name], cache[name]) for name in pool}


def grow_pool(config: ModelConfig, shard: Optional[ShardingHooks], pool: Optional[KVCache], size: int) -> KVCache:
    """A pool of `size` slots holding `pool`'s (if any) in its first ones."""
    def grown(buf: Optional[jax.Array]) -> jax.Array:
        shape = (config.num_layers, size, config.num_kv_heads, config.head_dim_)
        if buf is None:
            return _pin_pool(jnp.zeros(shape, compute_dtype(config)), shard)
        extra = jnp.zeros((shape[0], size - buf.shape[1], *shape[2:]), buf.dtype)
        return _pin_pool(jnp.concatenate([buf, extra], axis=1), shard)

    return {name: grown(None if pool is None else pool[name]) for name in ("k", "v")}


def pool_slots(pool: Optional[KVCache]) -> int:
    """Slots the device pool has (0: none yet)."""
    return 0 if pool is None else int(pool["k"].shape[1])

