"""Retrying coroutines with exponential backoff."""
import asyncio
import random


def compute_delay(attempt, base=0.1, cap=10.0, jitter=0.0):
    """Delay before retry number ``attempt`` (1-based): base * 2**(attempt-1), at most ``cap``."""
    delay = min(base * 2 ** attempt, cap)
    if jitter:
        delay += random.uniform(0, jitter * delay)
    return delay


def retry(attempts=3, base=0.1, cap=10.0, exceptions=(Exception,)):
    """Decorator: retries the decorated coroutine function when it raises one of ``exceptions``."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")

    def decorate(func):
        async def wrapper(*args, **kwargs):
            for attempt in range(1, attempts + 1):
                try:
                    return await func(*args, **kwargs)
                except Exception:
                    if attempt == attempts:
                        raise
                    await asyncio.sleep(compute_delay(attempt, base, cap))

        wrapper.attempts = attempts
        return wrapper

    return decorate
