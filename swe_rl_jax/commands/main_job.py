"""`main`: the README's first command — the whole SoRFT-style pipeline on its embedded default
(configs/main.yaml: the shipped sample and SmolLM2-135M-Instruct on CPU). See pipeline/main_job.py.

    python -m swe_rl_jax.cli main [--config FILE] [key=value ...]
"""
from __future__ import annotations

from swe_rl_jax.commands.common import CONFIGS_DIR, parse_config_args
from swe_rl_jax.pipeline.main_job import MainConfig, run_main


def main(argv: list[str]) -> int:
    run_main(parse_config_args("main", MainConfig, argv, str(CONFIGS_DIR / "main.yaml"), __doc__))
    return 0
