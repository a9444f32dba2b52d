"""The rollout engine: static or continuous batching over a KV cache, on one device or a mesh (see docs/SAMPLING.md)."""
from swe_rl_jax.sampling.buckets import Buckets, round_up
from swe_rl_jax.sampling.engine import ROLLOUT_RULES, Engine, Request, default_engine, generate
from swe_rl_jax.sampling.params import SamplingParams
from swe_rl_jax.sampling.results import SampleResult
from swe_rl_jax.sampling.sampler import select_tokens

__all__ = ["Buckets", "round_up", "ROLLOUT_RULES", "Engine", "Request", "default_engine", "generate",
           "SamplingParams", "SampleResult", "select_tokens"]
