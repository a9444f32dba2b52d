"""Overriding configuration values from environment variables.

``APP_SERVER__PORT=9000`` with prefix ``"APP_"`` sets ``server.port``: a double underscore
separates nesting levels and names are lower-cased.
"""
import os

DEFAULT_PREFIX = "CONFIGLET_"
NESTING = "__"


def _env_key(name, prefix):
    """The dotted configuration key for an environment variable name, or None."""
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix):]
    if not rest:
        return None
    return ".".join(part.lower() for part in rest.split(NESTING))


def environ_overrides(prefix=DEFAULT_PREFIX, environ=None):
    """The overrides found in ``environ`` (default: ``os.environ``) as {dotted key: value}."""
    environ = os.environ if environ is None else environ
    out = {}
    for name, value in sorted(environ.items()):
        key = _env_key(name, prefix)
        if key is not None:
            out[key] = value
    return out


def overlay_environ(config, prefix=DEFAULT_PREFIX, environ=None):
    """Applies the environment overrides to ``config`` in place and returns it."""
    for key, value in environ_overrides(prefix, environ).items():
        config.set(key, value)
    return config
