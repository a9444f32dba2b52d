"""SamplingParams: what to generate and how to pick each token.

A frozen dataclass like every config in the project, so RL configs can embed it and load it
from YAML through `swe_rl_jax.config.from_dict`. Values that change often between calls
(temperature, top_p, max_new_tokens) are fed to the compiled rollout as arrays and never cause
a recompile; `top_k`, and whether sampling is greedy or uses top-p at all, pick the code path
and are part of the compilation key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from swe_rl_jax.config import require


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 256
    # 0 means greedy (argmax); otherwise logits are divided by it before softmax.
    temperature: float = 1.0
    # 0 disables top-k; otherwise only the k most likely tokens can be drawn.
    top_k: int = 0
    # 1.0 disables nucleus sampling; otherwise the smallest set of tokens (in order of
    # probability, after top-k) whose mass reaches top_p can be drawn.
    top_p: float = 1.0
    # Samples per prompt; they share one prefill of the prompt.
    n: int = 1
    # Any of these ids ends a sequence (the id is kept in the output). None: the model
    # config's `eos_token_ids`. An empty tuple never stops on a token.
    eos_ids: Optional[tuple[int, ...]] = None
    # Text stop strings, matched on the host after decoding (needs a tokenizer). The
    # response is cut at the token that completes the first stop string; the string itself
    # is removed from `text` but its tokens stay in `token_ids` (see docs/SAMPLING.md).
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        require(self.max_new_tokens >= 1, "max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        require(self.temperature >= 0, "temperature", f"must be >= 0, got {self.temperature}")
        require(self.top_k >= 0, "top_k", f"must be >= 0, got {self.top_k}")
        require(0 < self.top_p <= 1, "top_p", f"must be in (0, 1], got {self.top_p}")
        require(self.n >= 1, "n", f"must be >= 1, got {self.n}")
        require(all(s for s in self.stop), "stop", "stop strings must be non-empty")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def uses_top_p(self) -> bool:
        return self.top_p < 1.0

    @property
    def logprob_temperature(self) -> float:
        """The temperature of the distribution whose log-probs a rollout reports and the trainer
        recomputes: the sampling temperature, or 1 (the model's own distribution) for greedy
        rollouts, where dividing by T = 0 is undefined."""
        return 1.0 if self.greedy else self.temperature
