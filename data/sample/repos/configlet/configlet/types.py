"""Converters from configuration strings to Python values.

Converters are registered by name with the ``converter`` decorator and looked up with
``get_converter``; ``Config.get_as`` uses them.
"""
import re

TRUE_VALUES = frozenset({"1", "true", "yes"})
FALSE_VALUES = frozenset({"0", "false", "no"})

_CONVERTERS = {}
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def converter(name):
    """Registers the decorated function as the converter called ``name``."""

    def register(func):
        if name in _CONVERTERS:
            raise ValueError(f"converter {name!r} is already registered")
        _CONVERTERS[name] = func
        return func

    return register


def get_converter(name):
    try:
        return _CONVERTERS[name]
    except KeyError:
        raise LookupError(f"unknown converter {name!r}") from None


def registered_converters():
    return sorted(_CONVERTERS)


@converter("str")
def to_str(value):
    return str(value)


@converter("int")
def to_int(value):
    text = str(value).strip().replace("_", "")
    return int(text, 0)


@converter("float")
def to_float(value):
    return float(str(value).strip())


@converter("bool")
def to_bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_VALUES:
        return True
    if text in FALSE_VALUES:
        return False
    raise ValueError(f"not a boolean: {value!r}")


@converter("list")
def to_list(value, separator=","):
    if isinstance(value, (list, tuple)):
        return list(value)
    return [item.strip() for item in str(value).split(separator) if item.strip()]


@converter("duration")
def to_duration(value):
    """Seconds as a float, from strings such as ``"250ms"``, ``"30s"`` or ``"2h"``."""
    if isinstance(value, (int, float)):
        return float(value)
    match = _DURATION_RE.match(str(value))
    if match is None:
        raise ValueError(f"not a duration: {value!r}")
    number, unit = match.groups()
    return float(number) * _DURATION_UNITS[unit or "s"]
