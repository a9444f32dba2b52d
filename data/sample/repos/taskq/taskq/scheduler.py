"""Periodic jobs: ``Scheduler.every`` registers a coroutine function to run at an interval."""
from datetime import timedelta

from taskq.utils.timeutil import now, parse_interval


class Job:
    def __init__(self, func, interval, name=None):
        self.func = func
        self.interval = interval
        self.name = name or func.__name__
        self.next_run = None
        self.runs = 0

    def __repr__(self):
        return f"Job({self.name!r}, every {self.interval})"


class Scheduler:
    def __init__(self):
        self.jobs = []

    def every(self, interval, name=None):
        """Decorator registering a coroutine function to run every ``interval``."""
        delta = interval if isinstance(interval, timedelta) else parse_interval(interval)

        def register(func):
            self.jobs.append(Job(func, delta, name))
            return func

        return register

    def _due(self, current):
        for job in self.jobs:
            if job.next_run is None or job.next_run <= current:
                yield job

    async def tick(self, current=None):
        """Runs every due job once; returns the names of the jobs that ran."""
        current = current or now()
        ran = []
        for job in list(self._due(current)):
            await job.func()
            job.runs += 1
            job.next_run = current + job.interval
            ran.append(job.name)
        return ran
