"""Evaluate a policy on task records: generate (greedy by default), score, summarize."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import jax

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.eval.metrics import Outcome, outcome, summarize
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.rewards import RewardPool, score_batch
from swe_rl_jax.sampling import SamplingParams, generate
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.tokenizer import ChatTokenizer


@dataclass
class EvalResult:
    records: list[TaskRecord]  # one per response: each record `sampling.n` times, in order
    outcomes: list[Outcome]
    responses: list[str]
    summary: dict[str, dict[str, float]]


def evaluate(
    config: ModelConfig,
    params: Any,
    tokenizer: ChatTokenizer,
    records: Sequence[TaskRecord],
    sampling: SamplingParams,
    rng: jax.Array | int = 0,
    *,
    rewards: Optional[Mapping[str, str]] = None,
    batch_size: int = 16,
    num_workers: int = 0,
    pool: Optional[RewardPool] = None,
    reward_meta: Optional[Mapping[str, Any]] = None,
) -> EvalResult:
    """`sampling.n` responses per record (1 for greedy), each scored by the record's reward; the
    summary averages over all responses, i.e. the expected metric under the sampling policy."""
    if sampling.n > 1 and sampling.temperature == 0.0:
        raise ValueError("greedy evaluation gives one response per record; set n=1 or a temperature > 0")
    prompts = [tokenizer.encode_prompt(r.messages) for r in records]
    # Batches of prompts of similar length: a batch pads to its longest prompt's bucket, so one long
    # prompt among short ones would make the whole batch pay for it.
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    answers: list[list[str]] = [[""] * sampling.n for _ in prompts]
    for start in range(0, len(order), batch_size):
        key = jax.random.fold_in(jax.random.PRNGKey(rng) if isinstance(rng, int) else rng, start)
        batch = order[start:start + batch_size]
        for r in generate(config, params, [prompts[i] for i in batch], sampling, key, tokenizer=tokenizer):
            answers[batch[r.prompt_index]][r.sample_index] = r.text or ""
    return score_answers(records, answers, rewards=rewards, num_workers=num_workers, pool=pool, reward_meta=reward_meta)


def score_answers(
    records: Sequence[TaskRecord],
    answers: Sequence[Sequence[str]],
    *,
    rewards: Optional[Mapping[str, str]] = None,
    num_workers: int = 0,
    pool: Optional[RewardPool] = None,
    reward_meta: Optional[Mapping[str, Any]] = None,
) -> EvalResult:
    """Scores each record's answers (the same number per record) by the record's reward."""
    texts = [t for per_record in answers for t in per_record]
    records = [r for r, per_record in zip(records, answers) for _ in per_record]  # each record's answers in a row
    scored = score_batch([reward_task(r, t, rewards, reward_meta) for r, t in zip(records, texts)], pool=pool,
                         num_workers=num_workers or None)
    outcomes = [outcome(r.subtask, r.repo, s, info) for r, (s, info) in zip(records, scored)]
    return EvalResult(records, outcomes, texts, summarize(outcomes))
