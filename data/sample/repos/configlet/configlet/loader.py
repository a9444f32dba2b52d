"""Loading INI-style configuration text into a ``Config`` object."""
import os

from configlet.errors import ConfigError, ConversionError, MissingKeyError
from configlet.types import get_converter

_MISSING = object()


class Config:
    """Nested configuration values, addressed with dotted keys such as ``"server.port"``."""

    separator = "."

    def __init__(self, data=None, source=None):
        self._data = dict(data or {})
        self.source = source

    def __repr__(self):
        return f"Config({self._data!r}, source={self.source!r})"

    def __contains__(self, key):
        return self.get(key, _MISSING) is not _MISSING

    def __eq__(self, other):
        if not isinstance(other, Config):
            return NotImplemented
        return self._data == other._data

    def get(self, key, default=None):
        node = self._data
        for part in key.split(self.separator):
            if part not in node:
                return default
            node = node[part]
        return node

    def require(self, key):
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise MissingKeyError(key)
        return value

    def get_as(self, key, type_name, default=_MISSING):
        value = self.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise MissingKeyError(key)
            return default
        convert = get_converter(type_name)
        try:
            return convert(value)
        except (TypeError, ValueError):
            raise ConversionError(key, value, type_name) from None

    def section(self, name):
        value = self.get(name)
        if value is None:
            return Config({}, source=self.source)
        return Config(value, source=self.source)

    def as_dict(self):
        return _copy_tree(self._data)

    def set(self, key, value):
        parts = key.split(self.separator)
        node = self._data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value


def _copy_tree(node):
    if isinstance(node, dict):
        return {k: _copy_tree(v) for k, v in node.items()}
    return node


def merge(base, override):
    """A new dict: ``base`` updated recursively with ``override``."""
    out = _copy_tree(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_ini_text(text, source=None):
    """Parses ``[section]`` headers and ``key = value`` lines; ``#`` and ``;`` start comments."""
    data = {}
    section = data
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = data
            for part in line[1:-1].strip().split("."):
                section = section.setdefault(part.strip(), {})
            continue
        if "=" not in line:
            raise ConfigError(f"{source or '<text>'}:{lineno}: expected 'key = value', got {raw!r}")
        key, _, value = line.partition("=")
        section[key.strip()] = value.strip()
    return Config(data, source=source)


def load_file(path, encoding="utf-8"):
    """Reads one configuration file."""
    if not os.path.exists(path):
        raise ConfigError(f"configuration file not found: {path}")
    with open(path, encoding=encoding) as f:
        return parse_ini_text(f.read(), source=path)


def load_files(paths, encoding="utf-8"):
    """Reads several files; later files override earlier ones."""
    data = {}
    for path in paths:
        data = merge(data, load_file(path, encoding).as_dict())
    return Config(data, source=",".join(paths))
