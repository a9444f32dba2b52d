"""A policy behind any OpenAI-compatible `/chat/completions` endpoint (vLLM, SGLang, hosted APIs).

Each of the n samples of a request is fetched as its own call with `n=1` and cached under its own
key (request content + sample index): endpoints differ in `n` support, and per-sample entries let an
interrupted run resume sample by sample. Sample i of a request with a seed is sent with the seed
derive_seed(seed, first + i) (and cached as sample first + i). `temperature`, `top_p`,
`max_tokens`, `stop` and `seed` are passed through.
Calls run on a thread pool of `concurrency` (the samples of every request of a batch, across
instances, are in flight together); 429, 5xx, timeouts, connection errors and broken reads (a
truncated body, an SSL error mid-read) are retried with exponential backoff, honouring
`Retry-After` up to `backoff_max_s`; other 4xx are not retried. The API key is read from an environment variable (checked when the policy is
made, read again at call time) and only ever placed in the Authorization header: it is not part of
cache keys, files, logs or errors, and the CLI masks it in any error it prints. Redirects are
not followed: a 3xx answer is a failed request, so the key is never sent to another URL and only
completions from `base_url` itself are cached.

The endpoint's context: when the policy starts it asks `GET {base_url}/models` once; vLLM's and
SGLang's model cards carry `max_model_len` (prompt + answer tokens). A request whose prompt tokens
plus `max_tokens` exceed it is not sent (its response says why in `skipped`): the server would
refuse it. The prompt is counted with `tokenizer` (a checkpoint directory, or `smollm2`, whose chat
template renders the messages) when given, else estimated from below (`estimate_tokens`), so an
estimate never skips a prompt that fits; one it lets through that does not fit is refused by the
server and counted as failed. No limit reported (or the query failed): every prompt is sent.
"""
from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from swe_rl_jax.config import ConfigError, require
from swe_rl_jax.redaction import register_secret
from swe_rl_jax.policies.base import PolicyRequest, PolicyResponse, derive_seed
from swe_rl_jax.policies.cache import CompletionCache, cache_key

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class HttpPolicyConfig:
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str
    api_key_env: str = "OPENAI_API_KEY"  # name of the variable, never the key itself
    concurrency: int = 64  # requests in flight at once
    max_retries: int = 5
    timeout_s: float = 120.0
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    cache_dir: str = "outputs/policy_cache"
    # Counts prompt tokens against the endpoint's context: a checkpoint directory (its tokenizer and
    # chat template) or `smollm2`; "" = estimate_tokens.
    tokenizer: str = ""

    def __post_init__(self) -> None:
        require(self.base_url.startswith(("http://", "https://")), "base_url", f"not an http(s) URL: {self.base_url!r}")
        require(self.concurrency > 0, "concurrency", "must be > 0")
        require(self.max_retries >= 0, "max_retries", "must be >= 0")
        require(self.timeout_s > 0, "timeout_s", "must be > 0")


class RequestFailed(Exception):
    pass


# Characters per token that BPE vocabularies stay under on code and prose: SmolLM2's at most 3.9
# and Qwen2.5's at most 4.5 over this repository's source files and docs (the median 3.4 and 4.0).
CHARS_PER_TOKEN = 6


def estimate_tokens(messages: Sequence[dict[str, str]]) -> int:
    """A lower estimate of a chat prompt's tokens, for when no tokenizer is configured: the
    characters of its messages / CHARS_PER_TOKEN (the chat template's own tokens not counted)."""
    return sum(len(m.get("content", "")) for m in messages) // CHARS_PER_TOKEN


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx code


def api_key(env: str) -> str | None:
    """The key in environment variable `env` (None when unset or empty). A key with whitespace or
    a control character (say, the trailing newline of a key file) is a ConfigError that does not
    show it: http.client would reject the header with the key in its message."""
    key = os.environ.get(env)
    if not key:
        return None
    register_secret(key)
    if not (key.isascii() and key.isprintable()) or any(c.isspace() for c in key):
        raise ConfigError(f"api_key_env: ${env} holds an unusable API key (whitespace or a control character, "
                          "e.g. the trailing newline of a key file); the key itself is not shown")
    return key


class HttpPolicy:
    def __init__(self, config: HttpPolicyConfig):
        self.config = config
        self.cache = CompletionCache(config.cache_dir)
        self.stats = {"calls": 0, "cache_hits": 0, "retries": 0, "failures": 0, "prompts_too_long": 0}
        self._lock = threading.Lock()
        self._opener = urllib.request.build_opener(_NoRedirects())
        api_key(config.api_key_env)  # a malformed key fails now, before any work
        self.tokenizer = None
        if config.tokenizer:
            from swe_rl_jax.model_source import resolve_checkpoint
            from swe_rl_jax.tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(resolve_checkpoint(config.tokenizer))
        self.context = self._context_limit()

    def _headers(self) -> dict[str, str]:
        key = api_key(self.config.api_key_env)
        return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}

    def _context_limit(self) -> int | None:
        """The served model's `max_model_len` from `GET /models` (vLLM, SGLang); None when the
        endpoint reports none for `model` or cannot be asked: not an error, the requests will tell."""
        url = self.config.base_url.rstrip("/") + "/models"
        try:
            with self._opener.open(urllib.request.Request(url, headers=self._headers()),
                                   timeout=min(self.config.timeout_s, 10.0)) as resp:
                cards = json.loads(resp.read().decode("utf-8"))["data"]
            limit = next(card.get("max_model_len") for card in cards if card.get("id") == self.config.model)
        except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError, AttributeError, StopIteration):
            return None
        return limit if type(limit) is int and limit > 0 else None

    def too_long(self, request: PolicyRequest) -> str:
        """Why `request` is not sent ("" when it fits, or no limit is known): its prompt's tokens
        plus `max_tokens` exceed the endpoint's context, which the server would refuse."""
        if self.context is None:
            return ""
        if self.tokenizer is not None:
            length, counted = len(self.tokenizer.encode_prompt(list(request.messages))), "tokens"
        else:
            length, counted = estimate_tokens(request.messages), "tokens (estimated)"
        if length + request.max_tokens <= self.context:
            return ""
        return (f"prompt of {length} {counted} + max_tokens {request.max_tokens} > the endpoint's context of "
                f"{self.context} (max_model_len)")

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    def generate(self, requests: Sequence[PolicyRequest]) -> list[PolicyResponse]:
        skipped = [self.too_long(r) for r in requests]
        self.stats["prompts_too_long"] += sum(map(bool, skipped))
        jobs = [(r, r.first + i) for r, skip in zip(requests, skipped) if not skip for i in range(r.n)]
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            results = list(pool.map(lambda job: self._sample(*job), jobs))
        out, k = [], 0
        for r, skip in zip(requests, skipped):
            if skip:
                out.append(PolicyResponse(r.task_id, (), skipped=skip))
                continue
            got = results[k:k + r.n]
            k += r.n
            completions = tuple(c for c, _ in got if c is not None)
            errors = sorted({e for _, e in got if e})
            out.append(PolicyResponse(r.task_id, completions, "; ".join(errors)))
        return out

    def _payload(self, request: PolicyRequest, index: int) -> dict[str, Any]:
        payload = {
            "model": self.config.model,
            "messages": [dict(m) for m in request.messages],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "n": 1,
        }
        if request.top_p < 1.0:
            payload["top_p"] = request.top_p
        if request.top_k:
            payload["top_k"] = request.top_k
        if request.stop:
            payload["stop"] = list(request.stop)
        if request.seed is not None:
            payload["seed"] = derive_seed(request.seed, index)
        return payload

    def _sample(self, request: PolicyRequest, index: int) -> tuple[str | None, str]:
        payload = self._payload(request, index)
        key = cache_key({"base_url": self.config.base_url, "sample": index, **payload})
        cached = self.cache.get(key)
        if cached is not None:
            self._count("cache_hits")
            return cached, ""
        try:
            completion = self._post_with_retries(payload)
        except RequestFailed as e:
            self._count("failures")
            return None, str(e)
        self.cache.put(key, completion)
        return completion, ""

    def _post_with_retries(self, payload: dict[str, Any]) -> str:
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        body = json.dumps(payload).encode("utf-8")
        headers = self._headers()
        last = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                self._count("retries")
            self._count("calls")
            retry_after = None
            try:
                req = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with self._opener.open(req, timeout=self.config.timeout_s) as resp:
                    return _completion_text(json.loads(resp.read().decode("utf-8")))
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code} from {url}"
                if 300 <= e.code < 400:
                    raise RequestFailed(f"{last}: a redirect, not followed (the API key goes to base_url only)") from None
                if e.code not in RETRYABLE_STATUS:
                    raise RequestFailed(last) from None
                retry_after = _retry_after(e.headers.get("Retry-After"))
            except (OSError, http.client.HTTPException) as e:
                # URLError, timeouts, refused or reset connections, SSL errors, and a body cut short
                # (IncompleteRead) or a dropped connection while reading: all transient.
                last = f"{type(e).__name__} calling {url}: {getattr(e, 'reason', e)}"
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError) as e:
                raise RequestFailed(f"malformed response from {url}: {type(e).__name__}") from None
            if attempt < self.config.max_retries:
                delay = min(self.config.backoff_max_s, self.config.backoff_s * 2**attempt)
                # A server's Retry-After is honoured up to backoff_max_s: "retry in an hour" must not
                # stall a run for an hour.
                wait = min(retry_after, self.config.backoff_max_s) if retry_after is not None else \
                    delay * (0.5 + random.random() / 2)
                time.sleep(wait)
        raise RequestFailed(f"{last} (gave up after {self.config.max_retries + 1} attempts)")


def _completion_text(data: dict[str, Any]) -> str:
    content = data["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise TypeError("content is not a string")
    return content


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
