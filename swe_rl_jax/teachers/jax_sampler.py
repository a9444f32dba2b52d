"""A teacher that is any local checkpoint run through the project's own JAX sampler."""
from __future__ import annotations

from typing import Any, Sequence

import jax

from swe_rl_jax.models import ModelConfig
from swe_rl_jax.sampling import SamplingParams, generate
from swe_rl_jax.teachers.base import TeacherRequest, TeacherResponse
from swe_rl_jax.tokenizer import ChatTokenizer


class SamplerTeacher:
    def __init__(self, config: ModelConfig, params: Any, tokenizer: ChatTokenizer, seed: int = 0,
                 batch_size: int = 8):
        self.config, self.params, self.tokenizer = config, params, tokenizer
        self.key = jax.random.PRNGKey(seed)
        self.batch_size = batch_size

    def generate(self, requests: Sequence[TeacherRequest]) -> list[TeacherResponse]:
        out = []
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start:start + self.batch_size]
            first = chunk[0]
            if any((r.n, r.temperature, r.max_tokens) != (first.n, first.temperature, first.max_tokens) for r in chunk):
                raise ValueError("SamplerTeacher needs one n/temperature/max_tokens per batch of requests")
            sampling = SamplingParams(max_new_tokens=first.max_tokens, temperature=first.temperature, n=first.n,
                                      eos_ids=self.tokenizer.eos_ids)
            prompts = [self.tokenizer.encode_prompt(r.messages) for r in chunk]
            results = generate(self.config, self.params, prompts, sampling, jax.random.fold_in(self.key, start),
                               tokenizer=self.tokenizer)
            for i, r in enumerate(chunk):
                texts = tuple(x.text or "" for x in results[i * first.n:(i + 1) * first.n])
                out.append(TeacherResponse(r.task_id, texts))
        return out
