"""Workers take tasks from a queue and run a handler on each."""
import asyncio
import logging
from dataclasses import dataclass, field

from taskq.queue import QueueClosed

log = logging.getLogger(__name__)


@dataclass
class Task:
    name: str
    payload: dict = field(default_factory=dict)
    attempts: int = 0


class Worker:
    """Runs ``handler(task)`` for every task of ``queue`` until stopped or the queue closes."""

    def __init__(self, queue, handler, name="worker"):
        self.queue = queue
        self.handler = handler
        self.name = name
        self.processed = 0
        self.failed = 0
        self._stopping = False

    async def run(self):
        while not self._stopping:
            try:
                task = await self.queue.get()
            except QueueClosed:
                break
            await self._handle(task)
        log.info("%s stopped after %d tasks", self.name, self.processed)

    async def _handle(self, task):
        task.attempts += 1
        try:
            await self.handler(task)
        except Exception:
            self.failed += 1
            log.exception("%s: task %s failed", self.name, task.name)
        else:
            self.processed += 1
        finally:
            self.queue.task_done()

    def stop(self):
        self._stopping = True


async def run_workers(queue, handler, count=4):
    """Runs ``count`` workers until the queue is closed and drained."""
    workers = [Worker(queue, handler, name=f"worker-{i}") for i in range(count)]
    await asyncio.gather(*(w.run() for w in workers))
    return workers
