"""Token selection from one step's logits: greedy, temperature, top-k, top-p.

Each call returns two log-probs of the chosen token:

* `logp`: under the temperature-scaled *full* softmax, log softmax(logits / T)[token]. This is
  what the RL trainer recomputes with a teacher-forced forward pass, so the two can be compared
  (importance ratios, KL) whatever truncation the sampler used.
* `logp_truncated`: under the distribution the token was actually drawn from, i.e. the
  temperature-scaled softmax renormalised over the tokens top-k / top-p kept (equal to `logp`
  when neither is active).

Greedy decoding (T = 0) reports `logp` under the untempered softmax (T = 1), the natural
reference for a deterministic policy, and `logp_truncated` = 0 (the argmax has probability 1).

Order of the filters follows Hugging Face: temperature, then top-k, then top-p on the
top-k survivors renormalised. Top-p keeps a token when the mass of the strictly more likely
tokens before it (in sorted order) is below p, so the most likely token is always kept and the
kept set is the smallest prefix whose mass reaches p. Ties at the top-k boundary are broken by
`lax.top_k`'s order (lower index first).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def _pick(values: jax.Array, index: jax.Array) -> jax.Array:
    return jnp.take_along_axis(values, index[:, None], axis=-1)[:, 0]


def select_tokens(
    logits: jax.Array,
    keys: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    *,
    greedy: bool,
    top_k: int,
    use_top_p: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(tokens [B] int32, logp [B], logp_truncated [B]) from float32 logits [B, V].

    keys: [B] PRNG keys, one per row, so a row's draw does not depend on the batch it is in.
    temperature, top_p: float32 scalars (traced, so changing them never recompiles).
    greedy, top_k, use_top_p: static, they choose the computation.
    """
    if greedy:
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        logp = _pick(jax.nn.log_softmax(logits, axis=-1), tokens)
        return tokens, logp, jnp.zeros_like(logp)

    scaled = logits / temperature
    logp_full = jax.nn.log_softmax(scaled, axis=-1)
    draw = jax.vmap(jax.random.categorical)
    if top_k == 0 and not use_top_p:
        tokens = draw(keys, scaled).astype(jnp.int32)
        logp = _pick(logp_full, tokens)
        return tokens, logp, logp

    # Candidates in descending order: the top k, or the whole vocabulary sorted for top-p.
    k = top_k if top_k > 0 else logits.shape[-1]
    candidates, candidate_ids = jax.lax.top_k(scaled, k)
    if use_top_p:
        probs = jax.nn.softmax(candidates, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        candidates = jnp.where(mass_before < top_p, candidates, -jnp.inf)
    choice = draw(keys, candidates)
    tokens = _pick(candidate_ids, choice).astype(jnp.int32)
    logp_truncated = _pick(jax.nn.log_softmax(candidates, axis=-1), choice)
    return tokens, _pick(logp_full, tokens), logp_truncated
