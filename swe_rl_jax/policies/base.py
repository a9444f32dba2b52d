"""The one interface of everything that answers prompts (docs/EVAL.md, "Policies"): messages in,
n answers out, from any back end: the in-process JAX sampler (policies/sampler.py), an
OpenAI-compatible endpoint (policies/http.py) or a file of recorded answers (policies/recorded.py).
Rejection sampling, `eval`, `resolve` and any later stage that asks a model take a `Policy`.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

Message = dict[str, str]


@dataclass(frozen=True)
class PolicyRequest:
    """n answers to one prompt. `seed`: sample i draws from (seed, i) on every back end that can
    seed (the JAX sampler always; endpoints that honour `seed`), so a request's answers do not depend
    on what else is in the batch. None: the back end derives one from its own seed and `task_id`.
    `first`: the task's index of this request's first sample, when a task's samples are asked in
    several requests (one greedy, the rest sampled; one prompt per location set): sample i of the
    request is the task's sample first + i, drawn from (seed, first + i), and a recorded policy
    returns the task's answers first .. first + n - 1."""

    task_id: str
    messages: tuple[Message, ...]
    n: int = 1
    temperature: float = 0.7
    max_tokens: int = 2048
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: Optional[int] = None
    top_k: int = 0  # 0: off (endpoints that know `top_k`, e.g. vLLM and SGLang, get it when > 0)
    first: int = 0
    # The prompt as token ids, for a back end that samples from ids (the in-process sampler): used
    # instead of the chat template's rendering of `messages` (a multi-turn episode kept as the
    # tokens it sampled, agent/tokens.py). Other back ends read `messages`.
    prompt_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Sampled:
    """One answer's tokens exactly as sampled (an EOS that ended it included) and the sampler's
    log-probability of each (temperature-scaled, the full distribution)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str  # eos | stop | length


@dataclass(frozen=True)
class PolicyResponse:
    """`completions` holds what the back end produced (possibly fewer than asked, never None).
    `error`: why samples failed (counted by the caller, never raised mid-batch); `skipped`: why
    the request was deliberately not sent (a prompt longer than the model's context), not a failure."""

    task_id: str
    completions: tuple[str, ...]
    error: str = ""
    skipped: str = ""
    samples: tuple[Sampled, ...] = ()  # per completion, from a back end that samples tokens itself

    @property
    def failed(self) -> bool:
        return bool(self.error) and not self.completions


class PolicyError(RuntimeError):
    """The policy produced nothing at all (e.g. a dead endpoint); the message holds its first error."""


class Policy(Protocol):
    def generate(self, requests: Sequence[PolicyRequest]) -> list[PolicyResponse]:
        """One response per request, in request order."""
        ...


def check_any_answered(responses: Sequence[PolicyResponse], what: str = "policy") -> None:
    """Raises PolicyError when every request that was sent failed: a run that silently keeps
    nothing because nobody answered would look like a run whose filters rejected everything."""
    sent = [r for r in responses if not r.skipped]
    failed = [r for r in sent if r.failed]
    if sent and len(failed) == len(sent):
        raise PolicyError(f"every {what} request failed ({len(failed)} of {len(sent)}); first error: {failed[0].error}")


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any values (stable across processes and Python versions, unlike hash())."""
    blob = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF
