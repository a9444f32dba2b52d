"""A policy that is a checkpoint run in this process by the project's JAX engine (sampling/).

All requests of a `generate` call go to the continuous-batching engine together, in groups of
similar prompt length (one group per prompt-length bucket of the engine), so one long prompt does
not size every decode slot's cache. Sample i of a request draws with the key
fold_in(key(seed), first + i), seed = the request's seed or derive_seed(policy seed, task_id): its
tokens do not depend on the other requests of the batch (up to float rounding, sampling/engine.py).

A request's `prompt_ids`, when given, is its prompt as is (a token-exact multi-turn episode); the
response carries each answer's sampled token ids and log-probs (`samples`). Those prompts go through
the policy's prefix cache (sampling/prefix_cache.py; size `prefix_cache_tokens`, default the engine's,
`RolloutConfig.prefix_cache_tokens`): each turn of an episode prefills only what the last turn's
prompt lacked. The cache belongs to the policy, which holds one set of weights, and a new policy (the
RL trainer builds one on each step's weights) starts empty. Prompts rendered from `messages` skip it.

A prompt is not sent (the response says why in `skipped`) when it is longer than
`max_prompt_tokens` or leaves no room in the model's context (`max_position_embeddings`);
`max_tokens` is cut to what the context has left after the prompt.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from swe_rl_jax.models import ModelConfig
from swe_rl_jax.policies.base import PolicyRequest, PolicyResponse, Sampled, derive_seed
from swe_rl_jax.sampling import Engine, SamplingParams
from swe_rl_jax.sampling.engine import Request, request_keys
from swe_rl_jax.sampling.prefix_cache import PrefixCache
from swe_rl_jax.tokenizer import ChatTokenizer


class SamplerPolicy:
    def __init__(self, config: ModelConfig, params: Any, tokenizer: ChatTokenizer, engine: Optional[Engine] = None,
                 seed: int = 0, max_prompt_tokens: int = 0, prefix_cache_tokens: Optional[int] = None):
        self.engine = engine or Engine()
        self.config, self.tokenizer = config, tokenizer
        self.params = self.engine.handoff(config, params)
        size = self.engine.prefix_cache_tokens if prefix_cache_tokens is None else prefix_cache_tokens
        self.prefix_cache = PrefixCache(size) if size else None
        self.seed = seed
        self.max_prompt_tokens = max_prompt_tokens  # 0: only the context length limits a prompt
        self.stats = {"generate_calls": 0, "prompts_too_long": 0}

    def too_long(self, length: int) -> str:
        """Why a prompt of `length` tokens is not sent ("" when it fits)."""
        context = self.config.max_position_embeddings
        if self.max_prompt_tokens and length > self.max_prompt_tokens:
            return f"prompt of {length} tokens > max_prompt_tokens {self.max_prompt_tokens}"
        if length >= context:
            return f"prompt of {length} tokens leaves no room in the model's context of {context}"
        return ""

    def generate(self, requests: Sequence[PolicyRequest]) -> list[PolicyResponse]:
        answers: list[list[str]] = [[""] * r.n for r in requests]
        sampled: list[list[Sampled]] = [[Sampled((), (), "length")] * r.n for r in requests]
        skipped = [""] * len(requests)
        errors = [""] * len(requests)
        # (prompt bucket, token-exact) -> (request, sample, engine request)
        groups: dict[tuple[int, bool], list[tuple[int, int, Request]]] = {}
        for k, r in enumerate(requests):
            ids = list(r.prompt_ids) or self.tokenizer.encode_prompt(list(r.messages))
            skipped[k] = self.too_long(len(ids))
            if skipped[k]:
                self.stats["prompts_too_long"] += 1
                continue
            sp = SamplingParams(max_new_tokens=min(r.max_tokens, self.config.max_position_embeddings - len(ids)),
                                temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, stop=tuple(r.stop),
                                eos_ids=self.tokenizer.eos_ids)
            seed = r.seed if r.seed is not None else derive_seed(self.seed, r.task_id)
            keys = request_keys(seed, r.n, r.first)
            bucket = groups.setdefault((self.engine.buckets.prompt(len(ids)), bool(r.prompt_ids)), [])
            bucket.extend((k, i, Request(ids, sp, keys[i])) for i in range(r.n))
        for (_, token_exact), members in sorted(groups.items()):
            self.stats["generate_calls"] += 1
            try:
                results = self.engine.run(self.config, self.params, [m[2] for m in members], tokenizer=self.tokenizer,
                                          prefix_cache=self.prefix_cache if token_exact else None)
            except Exception as e:  # e.g. device out of memory: counted per request, never silent
                for k, _, _ in members:
                    errors[k] = f"{type(e).__name__}: {e}"
                continue
            for (k, i, _), result in zip(members, results):
                answers[k][i] = result.text or ""
                sampled[k][i] = Sampled(tuple(int(t) for t in result.token_ids),
                                        tuple(float(x) for x in result.logprobs), result.finish_reason)
        return [PolicyResponse(r.task_id, () if errors[k] or skipped[k] else tuple(answers[k]), errors[k], skipped[k],
                               () if errors[k] or skipped[k] else tuple(sampled[k]))
                for k, r in enumerate(requests)]
