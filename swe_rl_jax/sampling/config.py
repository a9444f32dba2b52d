"""RolloutConfig: how rollouts run (their layout on the devices and their batching), and the
engine it builds. What to generate is SamplingParams (sampling/params.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import jax

from swe_rl_jax.config import require
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import multi_process
from swe_rl_jax.sampling.engine import ROLLOUT_RULES, Engine


@dataclass(frozen=True)
class RolloutConfig:
    # Mesh of the rollouts; None: the run's own mesh (RL: the training mesh, so the handoff
    # reshards between two layouts on the same devices).
    mesh: Optional[MeshConfig] = None
    # Sharding preset of the rollouts (parallel/rules.py): `tp` splits heads, kv heads, MLP and
    # vocabulary over `tensor` and the batch over data x fsdp; `fsdp_tp` also keeps weights split
    # over fsdp and gathers each layer at its use (for weights too large to replicate).
    rules: str = ROLLOUT_RULES
    # Decode slots of continuous batching (at most the bucket of the request count); 0 runs
    # each call as one static batch whose rows all wait for the longest.
    slots: int = 64
    # Decode steps per device call of continuous batching (host overhead vs. refill latency).
    segment_steps: int = 16
    # A segment returns early to refill once this many slots have freed while requests wait
    # (0: slots // 8, at least 1).
    refill_after: int = 0
    # Prompt KV kept across calls for token-exact multi-turn episodes (requests with `prompt_ids`,
    # policies/sampler.py), so each agent turn prefills only its new tokens (sampling/prefix_cache.py):
    # at most this many token slots on device, grown as used; 0 = off. Single-turn prompts never
    # use it and cost nothing. 65,536 slots: 8 episodes in flight of 8k tokens; 3.0 GB of float32
    # KV for SmolLM2-135M, 3.8 GB of bfloat16 for Qwen2.5-7B.
    prefix_cache_tokens: int = 65536

    def __post_init__(self) -> None:
        get_rules(self.rules)
        require(self.slots >= 0, "slots", f"must be >= 0, got {self.slots}")
        require(self.segment_steps >= 1, "segment_steps", f"must be >= 1, got {self.segment_steps}")
        require(self.refill_after >= 0, "refill_after", f"must be >= 0, got {self.refill_after}")
        require(self.prefix_cache_tokens >= 0, "prefix_cache_tokens", f"must be >= 0, got {self.prefix_cache_tokens}")


def build_engine(config: RolloutConfig, run_mesh: Optional[jax.sharding.Mesh] = None,
                 span_hosts: bool = False) -> Engine:
    """The rollout engine of `config`; `run_mesh` stands in for an unset `config.mesh` (no mesh
    at all when both are unset: single-device rollouts). With several processes each host
    samples its own prompts (rl/host_sampling.py), so the engine's mesh is over this host's
    devices: `config.mesh` sized to them, or fsdp over all of them. `span_hosts`: one SPMD sampler
    over every process's devices instead (agent-rl: every host calls it with the same requests,
    rl/host_episodes.py), the mesh as with one process."""
    if multi_process() and not span_hosts:
        mesh = make_mesh(config.mesh or MeshConfig(fsdp=-1), jax.local_devices())
    else:
        mesh = make_mesh(config.mesh) if config.mesh is not None else run_mesh
    return Engine(mesh=mesh, rules=get_rules(config.rules) if mesh is not None else None, slots=config.slots,
                  segment_steps=config.segment_steps, refill_after=config.refill_after,
                  prefix_cache_tokens=config.prefix_cache_tokens)
