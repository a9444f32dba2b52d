import asyncio

import pytest

from taskq.retry import compute_delay, retry


def test_first_retry_waits_base():
    assert compute_delay(1, base=0.5) == 0.5


def test_delay_is_capped():
    assert compute_delay(20, base=1, cap=3) == 3


def test_retry_gives_up_after_attempts():
    calls = []

    @retry(attempts=2, base=0)
    async def flaky():
        calls.append(1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        asyncio.run(flaky())
    assert len(calls) == 2
