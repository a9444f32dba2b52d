"""Size caps, the per-sample time limit, and the catch-all that makes every reward total.

Time limit design: a reward runs under `signal.setitimer(ITIMER_REAL)`; the SIGALRM handler
raises `RewardTimeout` (a BaseException, so no `except Exception` in reward code can swallow it),
which `run_guarded` turns into the `timeout` outcome with the reward's minimum score. Python
only runs signal handlers between bytecodes, so reward code uses no regexes and keeps every
single C call (str.find, str.replace, ...) on inputs bounded by the caps below, so the alarm is
honoured promptly. The alarm needs the main thread; from other threads, or when the
caller already has an interval timer running (we never clobber it), rewards run without a limit.
The process pool in `batch.py` always runs rewards in a worker's main thread and adds a hard
kill on top, for the case where a worker stops answering anyway.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator

from swe_rl_jax.rewards.errors import FormatError

DEFAULT_TIME_LIMIT_S = 5.0
# ~250k tokens: far beyond any context window we train with, small enough to parse in milliseconds.
MAX_RESPONSE_CHARS = 1 << 20
# An edited file may not grow past this many characters: replace-all edits can double a file per
# block, so 10^4 blocks could otherwise build strings of astronomical size before any timer fires.
MAX_EDITED_FILE_CHARS = 1 << 22
_MAX_REASON_CHARS = 500

RewardResult = tuple[float, dict[str, Any]]


class RewardTimeout(BaseException):
    """Raised by the SIGALRM handler when a reward runs past its time limit."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise RewardTimeout()


def _alarm_available() -> bool:
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
    )


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raises RewardTimeout inside the block after `seconds` (see the module docstring for when
    the limit cannot be armed; nested calls inside an armed limit reuse the outer one)."""
    if not seconds or seconds <= 0 or not _alarm_available():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        # Disarm before restoring the handler: a signal arriving in between then still finds ours.
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.signal(signal.SIGALRM, previous)


def outcome(score: float, kind: str, reason: str) -> RewardResult:
    return float(score), {"kind": kind, "reason": reason[:_MAX_REASON_CHARS]}


def run_guarded(
    min_score: float,
    time_limit_s: float | None,
    fn: Callable[..., RewardResult],
    *args: Any,
) -> RewardResult:
    """Calls `fn(*args)` under the time limit; never raises (except KeyboardInterrupt & co.).

    A timeout or any unexpected exception yields `min_score` with info kind `timeout` /
    `internal_error`, so one bad sample can never stop a training step.
    """
    try:
        with time_limit(time_limit_s):
            score, info = fn(*args)
        return float(score), info
    except RewardTimeout:
        return outcome(min_score, "timeout", f"reward exceeded its {time_limit_s} s time limit")
    except Exception as e:  # noqa: BLE001 - the public boundary must be total
        return outcome(min_score, "internal_error", f"{type(e).__name__}: {e}")


def check_response(response: object) -> FormatError | None:
    """The checks every reward does first: a str, and not absurdly long (see MAX_RESPONSE_CHARS)."""
    if not isinstance(response, str):
        return FormatError("not_a_string", f"response is a {type(response).__name__}, not a str")
    if len(response) > MAX_RESPONSE_CHARS:
        return FormatError(
            "response_too_long",
            f"response has {len(response)} characters (cap {MAX_RESPONSE_CHARS})",
        )
    return None
