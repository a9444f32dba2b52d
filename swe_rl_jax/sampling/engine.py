"""The rollout engine: requests in, one SampleResult per request out (docs/SAMPLING.md).

Two ways to run a batch of requests over the decode slots of sampling/slots.py:

* **static** (`slots=0`): one compiled program per shape bucket does everything: prefill the
  unique prompts once, fan the cache rows out to the samples, sample token 0, then a
  `lax.while_loop` feeds the last token (sampling/decode.py, cache updated in place) and samples
  the next until every row has hit an EOS id or its `max_new_tokens`. Every row of the batch
  waits for the longest one.
* **continuous batching** (`slots=B`): B decode slots; a host loop (sampling/continuous.py)
  runs segments of up to `segment_steps` decode steps per device call and, whenever slots free
  up, prefills waiting requests' prompts and starts them in those slots, so long-tailed
  response lengths keep every slot busy.

A request's samples depend only on its key, prompt and sampling values: token i is drawn with
fold_in(request key, i); `generate` gives sample r (prompt-major) the key fold_in(rng, r). The
slot, the batch, the arrival order, the buckets and the mesh change nothing but float rounding.

With a mesh, the engine runs in the rollout layout of `rules` (parallel/rules.py; default
`tp`): weights split over `tensor` (heads, kv heads, MLP, vocabulary), the KV cache over
`tensor` on kv heads and over the batch axes on rows. `handoff` moves params from any layout
(e.g. the trainer's fsdp state) into it on device, cast to the compute dtype.

With a `PrefixCache` (sampling/prefix_cache.py) passed to `run`, a prompt that extends one the
cache holds prefills only its new tokens (a continued prefill over the stored KV), in both modes.

Compilations: each program is traced once per distinct (config, shape bucket, static sampling
options); `Engine.compilations` counts traces (each one is one XLA compile). `prefilled_tokens`
counts the real prompt tokens the prefills ran (not padding; with a prefix cache, not the reused).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from swe_rl_jax.models import ModelConfig
from swe_rl_jax.models.decoder import KVCache, compute_dtype
from swe_rl_jax.models.params import Params
from swe_rl_jax.parallel.distributed import fetch
from swe_rl_jax.parallel.rules import MeshSharding, Rules, activation_sharding, get_rules, param_shardings, rules_for_mesh
from swe_rl_jax.sampling import continuous
from swe_rl_jax.sampling.buckets import Buckets
from swe_rl_jax.sampling.params import SamplingParams
from swe_rl_jax.sampling.prefix_cache import (PrefixCache, continuation_inputs, continue_prefill, grow_pool, pool_slots,
                                             write_pool)
from swe_rl_jax.sampling.results import SampleResult, finish
from swe_rl_jax.sampling.slots import (Admission, Bank, Options, Produced, Rows, decode, empty_rows, insert, prefill,
                                      start_rows)

log = logging.getLogger(__name__)

ROLLOUT_RULES = "tp"  # the default rollout layout (parallel/rules.py)


@dataclass(frozen=True)
class Request:
    """One response to generate. `key`: its PRNG key (typed or raw uint32, default
    implementation); the same request with the same key gives the same tokens wherever it runs.
    `sampling.n` is ignored (one response per request)."""

    prompt: Sequence[int]
    sampling: SamplingParams
    key: Any


class _Group(NamedTuple):
    """Requests that share a compiled program: the same static options and EOS ids."""

    options_key: tuple
    indices: list[int]


def _key_data(keys: jax.Array) -> np.ndarray:
    """Raw uint32 key data [..., 2] of typed or raw keys of the default implementation."""
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        keys = jax.random.key_data(keys)
    data = np.asarray(keys, np.uint32)
    if data.shape[-1:] != (2,):
        raise ValueError(f"PRNG keys must use the default implementation (2 uint32 words), got shape {data.shape}")
    return data


@jax.jit
def _fold_in_each(rng: jax.Array, ids: jax.Array) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(rng, i))(ids)


def request_keys(rng: jax.Array | int, count: int, first: int = 0) -> np.ndarray:
    """Key data [count, 2] of requests first..first+count-1 of a call: fold_in(rng, r)."""
    if isinstance(rng, int):
        rng = jax.random.key(rng)
    ids = first + np.arange(max(1 << (count - 1).bit_length(), 1), dtype=np.int32)  # bucketed: few compiles
    return _key_data(_fold_in_each(rng, ids))[:count]


def pack_prompts(prompts: Sequence[Sequence[int]], num_rows: int, prompt_slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded tokens and mask [num_rows, prompt_slots]; rows past len(prompts) are empty."""
    tokens = np.zeros((num_rows, prompt_slots), np.int32)
    mask = np.zeros((num_rows, prompt_slots), bool)
    for row, p in enumerate(prompts):
        tokens[row, prompt_slots - len(p):] = p
        mask[row, prompt_slots - len(p):] = True
    return tokens, mask


class Engine:
    """Holds the compiled rollout programs for one mesh layout, bucket policy and batching mode.

    mesh / rules: optional rollout layout (rules default to the `tp` preset); params are handed
    off into it on every call (a no-op when they already are, see `handoff`). Without a mesh the
    params are used as they are. slots: 0 = static batches, else the number of decode slots of
    continuous batching (capped by the bucket of the request count). segment_steps: decode steps
    per device call in continuous batching. refill_after: a segment returns early, to refill,
    once this many slots have freed while requests wait (0: slots // 8, at least 1).
    prefix_cache_tokens: the size of the prefix caches this engine's users keep (`SamplerPolicy`
    makes one for its token-exact episodes; 0: none). The engine itself keeps none: a cache is
    passed to `run` by its owner, who ties it to the weights.
    """

    def __init__(self, buckets: Buckets = Buckets(), mesh: Optional[Mesh] = None, rules: Optional[Rules] = None,
                 slots: int = 0, segment_steps: int = 16, refill_after: int = 0, prefix_cache_tokens: int = 0):
        if slots < 0 or segment_steps < 1 or refill_after < 0 or prefix_cache_tokens < 0:
            raise ValueError(f"need slots >= 0, segment_steps >= 1, refill_after >= 0, prefix_cache_tokens >= 0; "
                             f"got {slots}, {segment_steps}, {refill_after}, {prefix_cache_tokens}")
        self.buckets, self.mesh = buckets, mesh
        self.slots, self.segment_steps, self.refill_after = slots, segment_steps, refill_after
        self.prefix_cache_tokens = prefix_cache_tokens
        self.rules = None if mesh is None else rules_for_mesh(get_rules(ROLLOUT_RULES) if rules is None else rules, mesh)
        self.shard = None if mesh is None else MeshSharding(mesh, self.rules)
        self.compilations = 0
        self.prefilled_tokens = 0
        self._handoff: dict[ModelConfig, Callable] = {}
        self._static = jax.jit(self._counted(self._static_program), static_argnums=(0, 1))
        self._from_bank = jax.jit(self._counted(self._bank_program), static_argnums=(0, 1))
        self._prefill = jax.jit(self._counted(lambda c, p, t, m: prefill(c, self.shard, p, t, m)), static_argnums=0)
        self._continue = jax.jit(self._counted(self._continue_program), static_argnums=0, donate_argnums=2)
        self._write_pool = jax.jit(self._counted(self._write_pool_program), donate_argnums=0)
        self._grow_pool = jax.jit(self._counted(self._grow_pool_program), static_argnums=(0, 2))
        self._admit = jax.jit(self._counted(self._admit_program), static_argnums=(0, 1), donate_argnums=2)
        self._decode = jax.jit(self._counted(self._decode_program), static_argnums=(0, 1, 2), donate_argnums=4)
        self._empty = jax.jit(self._counted(self._empty_rows), static_argnums=(0, 1, 2, 3))
        self._layers = jax.jit(self._counted(_per_layer), static_argnums=0)

    # ---- layout ---------------------------------------------------------------------------

    @property
    def batch_multiple(self) -> int:
        """Batch buckets divide evenly over the mesh axes of the `batch` rule."""
        if self.mesh is None:
            return 1
        return int(np.prod([self.mesh.shape[a] for a in self.rules.get("batch", ())]))

    def param_shardings(self, config: ModelConfig) -> Any:
        """The rollout layout of `config`'s params (None without a mesh)."""
        return None if self.mesh is None else param_shardings(config, self.mesh, self.rules)

    def handoff(self, config: ModelConfig, params: Params) -> Params:
        """`params` in the rollout layout, cast to the compute dtype: one on-device reshard (a
        jitted identity with the rollout shardings as outputs; XLA moves only the shards each
        device lacks), nothing when they are already there. Without a mesh: unchanged."""
        if self.mesh is None:
            return params
        target, dtype = self.param_shardings(config), compute_dtype(config)
        placed = jax.tree.map(lambda x, s: isinstance(x, jax.Array) and x.dtype == dtype
                              and x.sharding.is_equivalent_to(s, x.ndim), params, target)
        if all(jax.tree.leaves(placed)):
            return params
        mesh_devices = set(self.mesh.devices.flat)
        if any(getattr(x, "committed", False) and x.sharding.device_set != mesh_devices for x in jax.tree.leaves(params)):
            params = jax.device_put(params, target)  # another device set: a device-to-device copy first
        if config not in self._handoff:
            self._handoff[config] = jax.jit(lambda p: jax.tree.map(lambda x: x.astype(dtype), p), out_shardings=target)
        return self._handoff[config](params)

    def _put(self, x: np.ndarray, axes: tuple) -> Any:
        """A host input of a program, rows over the batch axes (when they divide) on the mesh."""
        if self.mesh is None:
            return x
        return jax.device_put(x, activation_sharding(self.mesh, self.rules, axes, x.shape))

    def _put_rows(self, x: np.ndarray) -> Any:
        return self._put(x, ("batch",) + (None,) * (x.ndim - 1))

    # ---- programs (traced once per shape bucket and static options) ------------------------

    def _counted(self, fn: Callable) -> Callable:
        def traced(*args: Any) -> Any:
            # Runs only when jit traces, i.e. once per new shape bucket / static option set.
            self.compilations += 1
            log.info("sampling: compiling %s (#%d)", fn.__name__, self.compilations)
            return fn(*args)
        traced.__name__ = fn.__name__
        return traced

    def _static_program(self, config: ModelConfig, options: Options, params: Params, prompt_tokens: jax.Array,
                        prompt_mask: jax.Array, admission: Admission, eos_ids: jax.Array) -> tuple[jax.Array, ...]:
        """The whole static rollout: (tokens, logp, logp_truncated [B, N], lengths [B], hit_eos [B])."""
        bank = prefill(config, self.shard, params, prompt_tokens, prompt_mask)
        return self._bank_program(config, options, params, bank, admission, eos_ids)

    def _bank_program(self, config: ModelConfig, options: Options, params: Params, bank: Bank, admission: Admission,
                      eos_ids: jax.Array) -> tuple[jax.Array, ...]:
        """The static rollout from prefilled prompts (the prefix cache's path)."""
        rows, first = start_rows(config, options, self.shard, bank, admission, eos_ids)
        limit = jnp.max(admission.max_new) - 1
        rows, rest = decode(config, options, self.shard, _per_layer(config, params), rows, eos_ids, limit,
                            jnp.int32(0), options.new_tokens - 1, aligned=True)
        joined = [jnp.concatenate([a, b], axis=1) for a, b in zip(first[:3], rest[:3])]
        return (*joined, first.count + rest.count, rows.hit_eos)

    def _continue_program(self, config: ModelConfig, params: Params, pool: KVCache,
                          *args: jax.Array) -> tuple[Bank, KVCache]:
        """A continued prefill and the write of its new tokens' KV into the pool, in one program (one
        compilation per shape, not two)."""
        *inputs, dst = args
        bank = continue_prefill(config, self.shard, params, pool, *inputs)
        return bank, write_pool(self.shard, pool, bank.cache, dst)

    def _write_pool_program(self, pool: KVCache, cache: KVCache, dst: jax.Array) -> KVCache:
        return write_pool(self.shard, pool, cache, dst)

    def _grow_pool_program(self, config: ModelConfig, pool: Optional[KVCache], size: int) -> KVCache:
        return grow_pool(config, self.shard, pool, size)

    def _admit_program(self, config: ModelConfig, options: Options, rows: Rows, bank: Bank, admission: Admission,
                       where: jax.Array, eos_ids: jax.Array) -> tuple[Rows, Produced]:
        new_rows, first = start_rows(config, options, self.shard, bank, admission, eos_ids)
        return insert(rows, new_rows, where, self.shard), first

    def _decode_program(self, config: ModelConfig, options: Options, width: int, params: Params, rows: Rows,
                        eos_ids: jax.Array, limit: jax.Array, refill_after: jax.Array) -> tuple[Rows, Produced]:
        return decode(config, options, self.shard, params, rows, eos_ids, limit, refill_after, width, aligned=False)

    def _empty_rows(self, config: ModelConfig, options: Options, num_rows: int, prompt_slots: int) -> Rows:
        return empty_rows(config, options, self.shard, num_rows, prompt_slots)

    # ---- requests --------------------------------------------------------------------------

    def _options(self, config: ModelConfig, sp: SamplingParams, new_tokens: int) -> Options:
        return Options(self.buckets.new_tokens(new_tokens), sp.greedy, sp.top_k, sp.uses_top_p)

    @staticmethod
    def _eos(config: ModelConfig, sp: SamplingParams) -> np.ndarray:
        eos = config.eos_token_ids if sp.eos_ids is None else sp.eos_ids
        return np.asarray(list(eos), np.int32).reshape(-1)

    def _admission(self, requests: Sequence[Request], keys: np.ndarray, bank_rows: Sequence[int],
                   num_rows: int) -> Admission:
        """Per-request device inputs, padded to `num_rows` (padding: max_new 0, never active)."""
        def column(values: list, dtype: Any, pad: Any) -> np.ndarray:
            return np.asarray(values + [pad] * (num_rows - len(values)), dtype)

        padded_keys = np.zeros((num_rows, 2), np.uint32)
        padded_keys[:len(requests)] = keys
        admission = Admission(
            bank_row=column(list(bank_rows), np.int32, 0), keys=padded_keys,
            temperature=column([r.sampling.logprob_temperature for r in requests], np.float32, 1.0),
            top_p=column([r.sampling.top_p for r in requests], np.float32, 1.0),
            max_new=column([r.sampling.max_new_tokens for r in requests], np.int32, 0))
        return Admission(*(self._put_rows(x) for x in admission))

    def _groups(self, config: ModelConfig, requests: Sequence[Request]) -> list[_Group]:
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            sp = r.sampling
            if len(r.prompt) == 0:
                raise ValueError("empty prompt: every prompt needs at least one token")
            groups.setdefault((sp.greedy, sp.top_k, sp.uses_top_p, tuple(self._eos(config, sp))), []).append(i)
        return [_Group(k, v) for k, v in groups.items()]

    def _static_batch(self, config: ModelConfig, requests: Sequence[Request],
                      keys: np.ndarray) -> tuple[list[tuple[int, ...]], int, int, Options, Admission, np.ndarray]:
        """The static program's unique prompts, their batch and prompt buckets, options, placed
        admission and EOS ids for these requests."""
        unique: dict[tuple[int, ...], int] = {}
        bank_rows = [unique.setdefault(tuple(int(t) for t in r.prompt), len(unique)) for r in requests]
        multiple = self.batch_multiple
        first = requests[0].sampling
        options = self._options(config, first, max(r.sampling.max_new_tokens for r in requests))
        admission = self._admission(requests, keys, bank_rows, self.buckets.batch(len(requests), multiple))
        return (list(unique), self.buckets.batch(len(unique), multiple),
                self.buckets.prompt(max(len(p) for p in unique)), options, admission, self._eos(config, first))

    def _static_inputs(self, config: ModelConfig, params: Params, requests: Sequence[Request],
                       keys: np.ndarray) -> tuple[Options, tuple]:
        """The static program's options and placed inputs for these requests."""
        prompts, num_rows, prompt_slots, options, admission, eos = self._static_batch(config, requests, keys)
        prompt_tokens, prompt_mask = pack_prompts(prompts, num_rows, prompt_slots)
        return options, (params, self._put_rows(prompt_tokens), self._put_rows(prompt_mask), admission, eos)

    def _run_static(self, config: ModelConfig, params: Params, requests: Sequence[Request],
                    keys: np.ndarray, prefix_cache: Optional[PrefixCache]) -> list[tuple]:
        prompts, num_rows, prompt_slots, options, admission, eos = self._static_batch(config, requests, keys)
        if prefix_cache is None:  # prefill and rollout in one program
            self.prefilled_tokens += sum(len(p) for p in prompts)
            prompt_tokens, prompt_mask = pack_prompts(prompts, num_rows, prompt_slots)
            outputs = self._static(config, options, params, self._put_rows(prompt_tokens), self._put_rows(prompt_mask),
                                   admission, eos)
        else:
            bank = self._prefill_bank(config, params, prompts, num_rows, prompt_slots, prefix_cache)
            outputs = self._from_bank(config, options, params, bank, admission, eos)
        tokens, logp, logp_trunc, lengths, hit_eos = fetch(outputs)
        return [(tokens[r, :n], logp[r, :n], logp_trunc[r, :n], bool(hit_eos[r]))
                for r, n in enumerate(int(n) for n in lengths[:len(requests)])]

    def _prefill_bank(self, config: ModelConfig, params: Params, prompts: Sequence[tuple[int, ...]], num_rows: int,
                      prompt_slots: int, prefix_cache: Optional[PrefixCache]) -> Bank:
        """The unique `prompts` prefilled, left-padded into [num_rows, prompt_slots]. With a prefix
        cache: each prompt continues from the longest prefix the cache holds (a plain prefill
        when none holds any), and the cache then keeps the new tokens' KV."""
        prompt_tokens, prompt_mask = pack_prompts(prompts, num_rows, prompt_slots)
        if prefix_cache is None:
            self.prefilled_tokens += sum(len(p) for p in prompts)
            return self._prefill(config, params, self._put_rows(prompt_tokens), self._put_rows(prompt_mask))
        try:
            matches = [prefix_cache.match(p) for p in prompts]
            self.prefilled_tokens += sum(len(p) - m.length for p, m in zip(prompts, matches))
            # Slots are reserved before the KV is computed, so one program can both read the prefixes
            # and write the new tokens; the slots the prefixes occupy are held, never reused here.
            dst = prefix_cache.reserve(prompts, matches, num_rows, prompt_slots)
            writes = bool((dst < prefix_cache.pool_tokens).any())
            if writes and pool_slots(prefix_cache.pool) < prefix_cache.pool_tokens:
                prefix_cache.pool = self._grow_pool(config, prefix_cache.pool, prefix_cache.pool_tokens)
            if any(m.length for m in matches):
                inputs = continuation_inputs(prompts, matches, num_rows, prompt_slots, self.buckets)
                bank, prefix_cache.pool = self._continue(config, params, prefix_cache.pool,
                                                         *(self._put_rows(x) for x in (*inputs, prompt_mask, dst)))
            else:
                bank = self._prefill(config, params, self._put_rows(prompt_tokens), self._put_rows(prompt_mask))
                if writes:
                    prefix_cache.pool = self._write_pool(prefix_cache.pool, bank.cache, self._put_rows(dst))
            return bank
        except BaseException:
            prefix_cache.clear()  # an entry may name slots that were never written
            raise

    def _run_continuous(self, config: ModelConfig, params: Params, requests: Sequence[Request],
                        keys: np.ndarray, prefix_cache: Optional[PrefixCache]) -> list[tuple]:
        multiple = self.batch_multiple
        num_rows = min(self.buckets.batch(self.slots, multiple), self.buckets.batch(len(requests), multiple))
        prompt_slots = self.buckets.prompt(max(len(r.prompt) for r in requests))
        first = requests[0].sampling
        options = self._options(config, first, max(r.sampling.max_new_tokens for r in requests))
        eos = self._eos(config, first)
        decode_params = self._layers(config, params) if not config.scan_layers else params
        limit = np.int32(self.segment_steps)

        def prefill_prompts(prompts: Sequence[tuple[int, ...]]) -> Bank:
            return self._prefill_bank(config, params, prompts, self.buckets.batch(len(prompts), multiple), prompt_slots,
                                      prefix_cache)

        def admit(rows: Rows, bank: Bank, indices: Sequence[int], bank_rows: Sequence[int],
                  where: Sequence[int]) -> tuple[Rows, Produced]:
            count = self.buckets.batch(len(indices))
            admission = self._admission([requests[i] for i in indices], keys[list(indices)], bank_rows, count)
            slots = np.asarray(list(where) + [num_rows] * (count - len(where)), np.int32)  # padding: dropped
            return self._admit(config, options, rows, bank, admission, slots, eos)

        def decode_segment(rows: Rows, refill_after: int) -> tuple[Rows, Produced]:
            return self._decode(config, options, self.segment_steps, decode_params, rows, eos, limit,
                                np.int32(refill_after))

        programs = continuous.Programs(
            empty=lambda: self._empty(config, options, num_rows, prompt_slots),
            prefill=prefill_prompts, admit=admit, decode=decode_segment)
        refill_after = self.refill_after or max(1, num_rows // 8)
        return continuous.run(programs, [tuple(int(t) for t in r.prompt) for r in requests], num_rows, refill_after)

    def run(self, config: ModelConfig, params: Params, requests: Sequence[Request],
            tokenizer: Any = None, prefix_cache: Optional[PrefixCache] = None) -> list[SampleResult]:
        """One SampleResult per request, in order (prompt_index = request index, sample 0).
        Requests with different static options (greedy, top_k, top-p on/off, EOS ids) run as
        separate batches. prefix_cache: prompts continue from the prefixes it holds, and it keeps
        theirs (sampling/prefix_cache.py); it is emptied first unless it holds these params' KV."""
        if any(r.sampling.stop for r in requests) and tokenizer is None:
            raise ValueError("stop strings need a tokenizer (they are matched on decoded text)")
        keys = np.stack([_key_data(r.key if not isinstance(r.key, int) else jax.random.key(r.key))
                         for r in requests]) if requests else np.zeros((0, 2), np.uint32)
        return self._run(config, params, requests, keys, tokenizer, lambda i: (i, 0), prefix_cache)

    def _run(self, config: ModelConfig, params: Params, requests: Sequence[Request], keys: np.ndarray,
             tokenizer: Any, index: Callable[[int], tuple[int, int]],
             prefix_cache: Optional[PrefixCache] = None) -> list[SampleResult]:
        results: list[Optional[SampleResult]] = [None] * len(requests)
        if prefix_cache is not None:
            prefix_cache.bind(config, params)  # the caller's arrays: a handoff may copy them on every call
        params = self.handoff(config, params)
        for group in self._groups(config, requests):
            members = [requests[i] for i in group.indices]
            run = self._run_continuous if self.slots else self._run_static
            for i, (ids, logp, logp_trunc, hit_eos) in zip(group.indices, run(config, params, members,
                                                                                keys[group.indices], prefix_cache)):
                results[i] = finish(*index(i), ids, logp, logp_trunc, hit_eos, requests[i].sampling.stop, tokenizer)
        return results

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
        """One SampleResult per prompt x sample, prompt-major (prompt 0's n samples first);
        sample r draws with the key fold_in(rng, first_sample + r). first_sample: the global
        index of this call's first sample, when a host samples its share of a larger request
        (rl/host_sampling.py)."""
        sp = sampling_params
        if not prompts_token_ids:
            return []
        if sp.stop and tokenizer is None:
            raise ValueError("stop strings need a tokenizer (they are matched on decoded text)")
        requests = [Request(p, sp, None) for p in prompts_token_ids for _ in range(sp.n)]
        keys = request_keys(rng, len(requests), first_sample)
        return self._run(config, params, requests, keys, tokenizer, lambda r: divmod(r, sp.n))

    def lower(self, config: ModelConfig, params: Params, prompts_token_ids: Sequence[Sequence[int]],
              sampling_params: SamplingParams) -> jax.stages.Lowered:
        """The static program `generate` runs for these arguments, lowered (for inspection: e.g.
        `.compile().as_text()` names the ops of a profile, see tools/profile_decode.py)."""
        sp = sampling_params
        requests = [Request(p, sp, None) for p in prompts_token_ids for _ in range(sp.n)]
        options, inputs = self._static_inputs(config, params, requests, request_keys(0, len(requests)))
        return self._static.lower(config, options, *inputs)

    def lower_shapes(self, config: ModelConfig, params: Params, num_prompts: int, prompt_len: int,
                     sampling_params: SamplingParams) -> jax.stages.Lowered:
        """`lower` from shapes alone, for ahead-of-time planning (swe_rl_jax/plan/): `params` are
        ShapeDtypeStructs in this engine's layout (`param_shardings`, compute dtype), possibly on
        devices this host does not have (a TPU topology). The request: `num_prompts` distinct
        prompts of `prompt_len` tokens, each sampled `sampling_params.n` times, as one static
        batch (continuous batching holds at most `slots` of these rows at a time)."""
        if self.mesh is None:
            raise ValueError("lower_shapes needs an engine with a mesh (the params' devices)")
        sp = sampling_params
        multiple = self.batch_multiple
        rows = self.buckets.batch(num_prompts, multiple)
        samples = self.buckets.batch(num_prompts * sp.n, multiple)
        slots = self.buckets.prompt(prompt_len)

        def struct(shape: tuple[int, ...], dtype: Any, batched: bool = True) -> jax.ShapeDtypeStruct:
            axes = ("batch",) + (None,) * (len(shape) - 1) if batched else (None,) * len(shape)
            return jax.ShapeDtypeStruct(shape, dtype, sharding=activation_sharding(self.mesh, self.rules, axes, shape))

        admission = Admission(bank_row=struct((samples,), jnp.int32), keys=struct((samples, 2), jnp.uint32),
                              temperature=struct((samples,), jnp.float32), top_p=struct((samples,), jnp.float32),
                              max_new=struct((samples,), jnp.int32))
        eos = struct((len(self._eos(config, sp)),), jnp.int32, batched=False)
        return self._static.lower(config, self._options(config, sp, sp.max_new_tokens), params,
                                  struct((rows, slots), jnp.int32), struct((rows, slots), jnp.bool_), admission, eos)


def _per_layer(config: ModelConfig, params: Params) -> Params:
    """With `scan_layers` false the decode step takes one weight dict per layer, sliced once per
    rollout: a scan slices every layer's weights out of the stacked arrays at every step, a
    copy of all weights per token on CPU (sampling/decode.py)."""
    if config.scan_layers:
        return params
    return {**params, "layers": [jax.tree.map(lambda a, i=i: a[i], params["layers"]) for i in range(config.num_layers)]}


_ENGINES: dict[tuple, Engine] = {}


def default_engine(mesh: Optional[Mesh] = None, rules: Optional[Rules] = None, slots: int = 0) -> Engine:
    """A process-wide engine per layout and batching mode, so repeated `generate` calls reuse
    compilations."""
    key = (mesh, None if rules is None else tuple(sorted(rules.items())), slots)
    if key not in _ENGINES:
        _ENGINES[key] = Engine(mesh=mesh, rules=rules, slots=slots)
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
    rules: Optional[Rules] = None,
    slots: int = 0,
) -> list[SampleResult]:
    """Samples `sampling_params.n` responses per prompt; results are prompt-major.

    rng: a PRNG key (or an int seed); the same key gives the same samples. tokenizer: anything
    with `decode(ids) -> str` (e.g. `ChatTokenizer`); fills `text` and enables stop strings.
    mesh / rules / slots: see `Engine`.
    """
    engine = default_engine(mesh, rules, slots)
    return engine.generate(config, params, prompts_token_ids, sampling_params, rng, tokenizer)
