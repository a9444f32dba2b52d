"""`sft`: sharded supervised fine-tuning on rejection-sampled examples, then eval and HF export.

    python -m swe_rl_jax.cli sft --config configs/sorft_sft.yaml [key=value ...]
"""
from __future__ import annotations

import json

from swe_rl_jax.commands.common import parse_config_args
from swe_rl_jax.sft.run import SFTConfig, run_sft


def main(argv: list[str]) -> int:
    summary = run_sft(parse_config_args("sft", SFTConfig, argv, None, __doc__))
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0 if summary["stop_reason"] != "diverged" else 1
