"""Time helpers shared by the scheduler and the worker."""
import time
from datetime import datetime, timedelta


def monotonic():
    return time.monotonic()


def now():
    return datetime.now()


def parse_interval(text):
    """``"90s"``, ``"5m"``, ``"1h"`` or a number of seconds, as a timedelta."""
    text = str(text).strip()
    units = {"s": 1, "m": 60, "h": 3600}
    if text and text[-1] in units:
        return timedelta(seconds=float(text[:-1]) * units[text[-1]])
    return timedelta(seconds=float(text))
