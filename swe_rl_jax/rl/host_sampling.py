"""Rollouts and reward scoring per host: each process samples and scores only its share of a
step's prompts, and every process then holds all results and scores.

With one process this is `generate` then `score`. With several, process p samples prompts
`process_share(len(prompts))` on its own devices with the global sample ids of that share
(`generate(first_sample=...)`): a sample depends only on (key, sample id, prefix), so the draws
are those of one process sampling everything. Results and rewards are gathered in prompt order,
so every host computes the same advantages, metrics and refill decisions, then places only its
own rows of the update batch (`parallel.distributed.place_rows`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import jax

from swe_rl_jax.models import ModelConfig
from swe_rl_jax.parallel.distributed import gather_share, local_value
from swe_rl_jax.sampling import SampleResult, SamplingParams, generate

Scored = tuple[float, dict]


def sample_and_score(
    cfg: ModelConfig, params: Any, prompts: Sequence[tuple[Sequence[int], Any]], sampling: SamplingParams,
    key: jax.Array, score: Callable[[Sequence[Any], Sequence[SampleResult]], Sequence[Scored]],
    tokenizer: Optional[Any] = None,
) -> tuple[list[SampleResult], list[Scored]]:
    """`sampling.n` responses per (prompt ids, payload) and their scores, prompt-major. params:
    the weights this host's sampler reads (with several processes, a replica on the host's own
    devices: `PolicyUpdater.rollout_params`)."""
    key = local_value(key)

    def share(mine: Sequence[tuple[Sequence[int], Any]], first: int) -> list[tuple[SampleResult, Scored]]:
        results = generate(cfg, params, [p for p, _ in mine], sampling, key, tokenizer=tokenizer,
                           first_sample=first * sampling.n)
        scored = score([mine[r.prompt_index][1] for r in results], results)
        return [(dataclasses.replace(r, prompt_index=r.prompt_index + first), s) for r, s in zip(results, scored)]

    pairs = gather_share(prompts, share)
    return [r for r, _ in pairs], [s for _, s in pairs]
