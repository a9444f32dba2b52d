"""`agent-rl`: GRPO over agent episodes in the sandbox, judged by the harness; resumable, evaluated
on held-out repositories, HF export at the end (docs/AGENT.md, "Training the agent").

    python -m swe_rl_jax.cli agent-rl --config configs/agent_grpo_demo.yaml [key=value ...]

Rerunning the same command with the same out_dir resumes from its latest checkpoint.
"""
from __future__ import annotations

import json

from swe_rl_jax.commands.common import parse_config_args
from swe_rl_jax.rl.agent_run import AgentRLConfig, run_agent_rl


def main(argv: list[str]) -> int:
    config = parse_config_args("agent-rl", AgentRLConfig, argv, None, __doc__)
    print(json.dumps(run_agent_rl(config), indent=2, sort_keys=True))
    return 0
