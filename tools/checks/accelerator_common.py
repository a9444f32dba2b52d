"""What the parts of tools/accelerator_check.py share: the sizes a run uses (by backend and
--quick), a part's result (checks with their limits, measurements, skips with reasons), and a
counter of XLA compilations."""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Optional

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # one per XLA compilation


@dataclass(frozen=True)
class Profile:
    """The sizes of one run. A CPU runs every part in miniature; an accelerator the real sizes
    (`--quick`: a subset that takes about two minutes)."""

    name: str
    variants: tuple[str, ...]  # hf_reference.VARIANTS checked against transformers
    greedy_variants: tuple[str, ...]
    greedy_tokens: int
    attn_seq: int  # tokens per row of the attention comparison (a tiny decoder)
    attn_heads: tuple[int, int, int]  # query heads, kv heads, head dim
    train_model: str  # a preset name, or "tiny" (a 2-layer random model)
    train_seq: int
    train_batch: int
    train_steps: int  # timed steps after the first (compiling) one
    sampler_slots: int
    sampler_requests: int
    prompt_len: int
    new_tokens: int
    learning_factor: int  # the edit stage's budget, in multiples of configs/resolve_demo.yaml's
    seeds: int


def profile_for(platform: str, quick: bool) -> Profile:
    if platform == "cpu":
        return Profile("cpu-miniature" + ("-quick" if quick else ""),
                       variants=("qwen3_headdim",) if quick else
                       ("qwen2_tied", "qwen2_untied_kv1", "qwen3_headdim", "llama3_scaled"),
                       greedy_variants=("llama3_scaled",), greedy_tokens=8, attn_seq=40, attn_heads=(4, 2, 16),
                       train_model="tiny", train_seq=64, train_batch=2, train_steps=10, sampler_slots=4,
                       sampler_requests=8, prompt_len=12, new_tokens=12, learning_factor=0, seeds=0)
    if quick:
        return Profile("accelerator-quick", variants=("qwen2_tied", "qwen3_headdim", "llama3_scaled"),
                       greedy_variants=("llama3_scaled",), greedy_tokens=24, attn_seq=512, attn_heads=(8, 2, 128),
                       train_model="qwen2.5-0.5b", train_seq=2048, train_batch=4, train_steps=10, sampler_slots=64,
                       sampler_requests=128, prompt_len=256, new_tokens=128, learning_factor=0, seeds=0)
    return Profile("accelerator", variants=("qwen2_tied", "qwen2_untied_kv1", "qwen3_headdim", "llama3_scaled"),
                   greedy_variants=("qwen2_tied", "qwen3_headdim", "llama3_scaled"), greedy_tokens=32, attn_seq=1024,
                   attn_heads=(8, 2, 128), train_model="qwen2.5-0.5b", train_seq=4096, train_batch=8,
                   train_steps=10, sampler_slots=128, sampler_requests=256, prompt_len=512, new_tokens=256,
                   learning_factor=20, seeds=3)


@dataclass
class Check:
    """One property: `value` against `limit` (ok when value <= limit unless stated in `ok`)."""

    name: str
    ok: bool
    value: Any = None
    limit: Any = None
    note: str = ""


@dataclass
class Part:
    """A part's outcome: ran (its checks decide pass/fail), or skipped with the reason."""

    name: str
    checks: list[Check] = field(default_factory=list)
    measurements: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # "what: why", for sub-items not run
    skip_reason: Optional[str] = None  # the whole part was not run
    error: Optional[str] = None  # the part stopped on an exception (a defect to name)
    seconds: float = 0.0

    def check(self, name: str, value: Any, limit: Any, ok: Optional[bool] = None, note: str = "") -> bool:
        passed = bool(value <= limit) if ok is None else bool(ok)
        self.checks.append(Check(name, passed, _plain(value), _plain(limit), note))
        progress(f"{self.name}: {name}: {'ok' if passed else 'FAILED'} ({_plain(value)}, limit {_plain(limit)})")
        return passed

    @property
    def status(self) -> str:
        if self.skip_reason is not None:
            return "skipped"
        if self.error is not None or not all(c.ok for c in self.checks):
            return "fail"
        return "pass"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, **{k: v for k, v in asdict(self).items() if k != "name"}}


def progress(line: str) -> None:
    """One line on stderr as a part or a check starts or ends: the whole check takes minutes to
    hours, and its report comes only at the end."""
    print(f"accelerator_check: {line}", file=sys.stderr, flush=True)


def _plain(x: Any) -> Any:
    """numpy scalars -> Python numbers (JSON), floats rounded to 4 significant digits."""
    if hasattr(x, "item"):
        x = x.item()
    return float(f"{x:.4g}") if isinstance(x, float) else x


class CompileCounter:
    """Counts XLA compilations (jax.monitoring's backend-compile events) and their seconds, in
    windows: `with counter.window() as w: ...; w["count"]`."""

    _instance: Optional["CompileCounter"] = None

    def __init__(self) -> None:
        from jax import monitoring

        self.count, self.seconds = 0, 0.0
        monitoring.register_event_duration_secs_listener(self._on_event)

    @classmethod
    def get(cls) -> "CompileCounter":
        """One listener per process (jax keeps listeners for the process's life)."""
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def _on_event(self, event: str, duration: float, **_: Any) -> None:
        if event == COMPILE_EVENT:
            self.count += 1
            self.seconds += duration

    @contextlib.contextmanager
    def window(self) -> Iterator[dict[str, float]]:
        out: dict[str, float] = {}
        count, seconds, start = self.count, self.seconds, time.perf_counter()
        try:
            yield out
        finally:
            out.update(count=self.count - count, compile_seconds=self.seconds - seconds,
                       wall_seconds=time.perf_counter() - start)
