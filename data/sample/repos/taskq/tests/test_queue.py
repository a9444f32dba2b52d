import asyncio

import pytest

from taskq.queue import QueueClosed, TaskQueue


def test_put_get_fifo():
    async def main():
        q = TaskQueue()
        await q.put(1)
        await q.put(2)
        return [await q.get(), await q.get()]

    assert asyncio.run(main()) == [1, 2]


def test_get_on_closed_empty_queue_raises():
    async def main():
        q = TaskQueue()
        await q.close()
        await q.get()

    with pytest.raises(QueueClosed):
        asyncio.run(main())
