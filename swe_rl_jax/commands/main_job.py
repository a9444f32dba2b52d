"""`main`: the README's first command.

Until the SFT and RL pipeline lands (issues 7-9), the embedded default is the model demo: load
SmolLM2-135M-Instruct from the installed package, check it against transformers, answer a prompt,
export to HF format.
"""
from __future__ import annotations

from swe_rl_jax.commands import demo


def main(argv: list[str]) -> int:
    return demo.main(argv)
