"""Everything that answers prompts (messages in, n answers out): the in-process JAX sampler, an
OpenAI-compatible endpoint, or a file of recorded answers; one interface for rejection sampling,
`eval`, `resolve` and any later stage that asks a model (policies/base.py). `PolicyConfig` and
`make_policy` (policies/config.py) load a checkpoint, hence JAX: import them from there."""
from swe_rl_jax.policies.base import (Policy, PolicyError, PolicyRequest, PolicyResponse, Sampled,
                                      check_any_answered, derive_seed)
from swe_rl_jax.policies.http import HttpPolicy, HttpPolicyConfig
from swe_rl_jax.policies.recorded import RecordedAnswersError, RecordedPolicy

__all__ = ["Policy", "PolicyError", "PolicyRequest", "PolicyResponse", "Sampled", "check_any_answered", "derive_seed",
           "HttpPolicy", "HttpPolicyConfig", "RecordedAnswersError", "RecordedPolicy"]
