"""Typed configs: YAML files and `key=value` overrides loaded into frozen dataclasses.

Every config class in the project is a frozen dataclass. `from_dict` checks each key
against the dataclass fields and each value against the field's type hint, so an unknown
key, a wrong type or an impossible value fails at start-up with the dotted key in the
message, before anything is traced or compiled. Classes add cross-field checks by
defining `validate(self)` and raising `ConfigError` from it.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, TypeVar, Union

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type, or impossible. The message names the key."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Checks `value` against type hint `tp`; returns it in canonical form (lists → tuples)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        if len(errors) == 1:  # Optional[X]: X's own error (an unknown key of a section, a bad value)
            raise ConfigError(errors[0])
        raise ConfigError(f"{key}: {value!r} does not match {_type_name(tp)}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {list(args)}")
        return value
    if origin in (tuple, list, Sequence) or tp in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if origin is tuple and args:
            if len(args) != len(value):
                raise ConfigError(f"{key}: expected {len(args)} items, got {len(value)}")
            return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(args, value)))
        elem = args[0] if args else Any
        return tuple(_coerce(v, elem, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        kt, vt = args if args else (Any, Any)
        return {_coerce(k, kt, key): _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, prefix=key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads `1e-5` (no dot) as a string; accept any plain number spelling.
            try:
                return float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{key}: expected {tp.__name__}, got {value!r}")
    return value


def from_dict(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    """Builds dataclass `cls` from a mapping, rejecting unknown keys and wrong types."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or cls.__name__}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"unknown config key {where}{unknown[0]!s} for {cls.__name__}; "
            f"known keys: {', '.join(sorted(fields))}"
        )
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        default = _default_of(fields[name])
        if dataclasses.is_dataclass(default) and isinstance(value, Mapping):
            # A partial section overrides the field's own default, not the section type's
            # defaults: `optimizer: {lr: 1e-3}` keeps the preset's schedule.
            value = _deep_merge(to_dict(default), value)
        kwargs[name] = _coerce(value, hints[name], key)
    missing = [
        n for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"missing required config key {where}{missing[0]} for {cls.__name__}")
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if prefix and not str(e).startswith(prefix):
            # A class naming its own section in its checks ("lora.rank: ...") is not named twice.
            msg, section = str(e), prefix.rsplit(".", 1)[-1] + "."
            raise ConfigError(f"{prefix}.{msg[len(section):] if msg.startswith(section) else msg}") from None
        raise


def _default_of(f: dataclasses.Field) -> Any:
    """The field's default value; None when there is none or it cannot be built on its own (a
    default section that is only valid once the user fills in a required key)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        try:
            return f.default_factory()
        except ConfigError:
            return None
    return None


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        out[k] = _deep_merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, Mapping) else v
    return out


def to_dict(config: Any) -> Any:
    """The inverse of `from_dict`: plain dicts/lists, suitable for YAML or JSON."""
    if dataclasses.is_dataclass(config):
        return {f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, (tuple, list)):
        return [to_dict(v) for v in config]
    if isinstance(config, Mapping):
        return {k: to_dict(v) for k, v in config.items()}
    return config


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Applies `a.b.c=value` strings to a nested dict (values parsed as YAML scalars)."""
    out = _deepcopy_dict(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {key}: cannot parse value {raw!r}: {e}") from None
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {key}: {part} is not a section")
            node = nxt
        node[parts[-1]] = value
    return out


def _deepcopy_dict(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deepcopy_dict(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy_dict(v) for v in d]
    return d


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping, got {type(data).__name__}")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Loads `cls` from an optional YAML file plus `key=value` overrides."""
    data = read_yaml(path) if path is not None else {}
    return from_dict(cls, apply_overrides(data, overrides))


def require(cond: bool, key: str, message: str) -> None:
    """Raises ConfigError naming `key` when `cond` is false (for `validate` methods)."""
    if not cond:
        raise ConfigError(f"{key}: {message}")
