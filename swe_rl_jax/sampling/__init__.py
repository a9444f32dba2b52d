"""The rollout engine: batched generation with a static-shape KV cache (see docs/SAMPLING.md)."""
from swe_rl_jax.sampling.buckets import Buckets, round_up
from swe_rl_jax.sampling.engine import Engine, default_engine, generate
from swe_rl_jax.sampling.params import SamplingParams
from swe_rl_jax.sampling.results import SampleResult
from swe_rl_jax.sampling.sampler import select_tokens

__all__ = ["Buckets", "round_up", "Engine", "default_engine", "generate", "SamplingParams",
           "SampleResult", "select_tokens"]
