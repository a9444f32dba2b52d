"""Exceptions raised by configlet."""


class ConfigError(Exception):
    """Base class of every configlet error."""


class MissingKeyError(ConfigError, KeyError):
    """A required key is absent."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key

    def __str__(self):
        return f"missing configuration key: {self.key}"


class ConversionError(ConfigError, ValueError):
    """A value cannot be converted to the requested type."""

    def __init__(self, key, value, type_name):
        super().__init__(key, value, type_name)
        self.key = key
        self.value = value
        self.type_name = type_name

    def __str__(self):
        return f"cannot convert {self.key}={self.value!r} to {self.type_name}"
