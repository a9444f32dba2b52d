"""One entry point: `python -m swe_rl_jax.cli COMMAND ...`.

Each command lives in its own module and exposes `main(argv: list[str]) -> int`; this file only
dispatches, importing the command's module lazily so that, say, `convert` never imports
TensorFlow and `--help` is instant.
"""
from __future__ import annotations

import importlib
import sys

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "main": ("swe_rl_jax.commands.main_job", "run the main job on its embedded default config"),
    "convert": ("swe_rl_jax.commands.convert", "convert HF or GGUF checkpoints to an HF directory"),
    "demo": ("swe_rl_jax.commands.demo", "load a model, check it against transformers, chat greedily"),
    "build-data": ("swe_rl_jax.commands.build_data", "build SoRFT subtasks and SWE-RL tasks from issues"),
}


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: python -m swe_rl_jax.cli COMMAND [args...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
