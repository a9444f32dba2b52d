"""taskq: a tiny asyncio task queue."""
from taskq.queue import QueueClosed, TaskQueue
from taskq.retry import retry
from taskq.scheduler import Scheduler
from taskq.worker import Task, Worker

__version__ = "0.4.0"

__all__ = ["QueueClosed", "Scheduler", "Task", "TaskQueue", "Worker", "retry"]
