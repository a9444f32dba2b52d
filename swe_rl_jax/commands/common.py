"""Argument handling shared by the config-driven commands: `--config FILE` plus `key=value` overrides."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence, TypeVar

from swe_rl_jax.config import load_config

T = TypeVar("T")

# The repository's configs/: commands name their default config here, not relative to the working
# directory, so they run from anywhere.
CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"


def field_pair(text: str) -> tuple[str, str]:
    """`--field FIELD=COLUMN`: an instance field read from another column of the export."""
    field, sep, column = text.partition("=")
    if not (sep and field and column):
        raise argparse.ArgumentTypeError(f"expected FIELD=COLUMN, got {text!r}")
    return field, column


def given_flags(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """{name: value} of the flags among `names` that were given (not None): the options a command
    passes on, so that unset flags keep the typed config's defaults."""
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def parse_config_args(prog: str, cls: type[T], argv: Sequence[str], default_config: str | None = None,
                      description: str = "") -> T:
    parser = argparse.ArgumentParser(prog=f"python -m swe_rl_jax.cli {prog}", description=description)
    parser.add_argument("--config", default=default_config, help="YAML config file (default: %(default)s)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. max_new_tokens=32")
    args = parser.parse_args(list(argv))
    return load_config(cls, args.config, args.overrides)
