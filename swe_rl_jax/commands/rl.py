"""`rl`: GRPO (SWE-RL) or PPO (SoRFT, `algorithm: ppo`) on task records with rule-based rewards;
resumable; HF export at the end.

    python -m swe_rl_jax.cli rl --config configs/swe_rl_grpo.yaml [key=value ...]
    python -m swe_rl_jax.cli rl --config configs/sorft_ppo.yaml [key=value ...]

Rerunning the same command with the same out_dir resumes from its latest checkpoint.
"""
from __future__ import annotations

import json

from swe_rl_jax.commands.common import parse_config_args
from swe_rl_jax.rl.run import RLConfig, run_rl


def main(argv: list[str]) -> int:
    print(json.dumps(run_rl(parse_config_args("rl", RLConfig, argv, None, __doc__)), indent=2, sort_keys=True))
    return 0
