"""A dense toy reward for pipeline tests: an untrained tiny model never produces a well-formed
answer, so the real rewards are all 0 and give GRPO nothing to learn from."""
from swe_rl_jax.rewards import register_reward


def letter_e_fraction(meta, response: str):
    return (response.count("e") / len(response) if response else 0.0), {"kind": "ok"}


register_reward("letter_e_fraction", letter_e_fraction, 0.0)
