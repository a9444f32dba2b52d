"""An asyncio queue of tasks that can be closed."""
import asyncio
import collections


class QueueClosed(Exception):
    """Raised by ``put`` and ``get`` once the queue is closed."""


class TaskQueue:
    def __init__(self, maxsize=0):
        self.maxsize = maxsize
        self._items = collections.deque()
        self._closed = False
        self._not_empty = asyncio.Condition()
        self._unfinished = 0
        self._all_done = asyncio.Event()
        self._all_done.set()

    def qsize(self):
        return len(self._items)

    def full(self):
        return self.maxsize > 0 and len(self._items) >= self.maxsize

    @property
    def closed(self):
        return self._closed

    async def put(self, item):
        if self._closed:
            raise QueueClosed("put() on a closed queue")
        async with self._not_empty:
            while self.full():
                await self._not_empty.wait()
            self._items.append(item)
            self._unfinished += 1
            self._all_done.clear()
            self._not_empty.notify()

    async def get(self):
        async with self._not_empty:
            while not self._items:
                if self._closed:
                    raise QueueClosed("get() on a closed, empty queue")
                await self._not_empty.wait()
            item = self._items.popleft()
            self._not_empty.notify()
            return item

    def task_done(self):
        if self._unfinished <= 0:
            raise ValueError("task_done() called too many times")
        self._unfinished -= 1
        if self._unfinished == 0:
            self._all_done.set()

    async def join(self):
        await self._all_done.wait()

    async def close(self):
        async with self._not_empty:
            self._closed = True
