"""Model-parallel rollouts on 8 fake CPU devices equal single-device rollouts, for every model
family: meshes tensor=2, 4, 8 and data=2 x tensor=4 under the `tp` rollout rules, directly and
after a handoff from an fsdp training state; the KV cache and the weights really are split.

XLA_FLAGS must be set before jax is imported, so the runs happen in a fresh subprocess.
"""
from __future__ import annotations

import numpy as np
import pytest

from swe_rl_jax.parallel.fake_devices import run_snippet

SNIPPET = r'''
import json, jax, numpy as np
from swe_rl_jax.models import model_config_from_dict, init_params
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.sampling import Buckets, Engine, SamplingParams
from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

assert jax.device_count() == 8, jax.devices()
SHAPE = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_layers=2, num_heads=8, eos_token_ids=(2,))
FAMILIES = {  # kv heads 2 and 4 do not divide tensor=4 / 8: the rules replicate them there
    "qwen2": dict(family="qwen2", num_kv_heads=2, qkv_bias=True, tie_word_embeddings=False),
    "qwen3": dict(family="qwen3", num_kv_heads=4, head_dim=16, qk_norm=True, tie_word_embeddings=True),
    "llama": dict(family="llama", num_kv_heads=8, tie_word_embeddings=False, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)),
}
MESHES = {"tensor=2": MeshConfig(fsdp=1, tensor=2), "tensor=4": MeshConfig(fsdp=1, tensor=4),
          "tensor=8": MeshConfig(fsdp=1, tensor=8), "data=2,tensor=4": MeshConfig(data=2, fsdp=1, tensor=4)}
rng = np.random.default_rng(0)
PROMPTS = [rng.integers(3, 128, size=n).tolist() for n in (3, 9, 5)]
GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0, n=2)
SAMPLED = SamplingParams(max_new_tokens=6, temperature=0.8, top_k=8, n=2)
BUCKETS = Buckets(new_tokens_floor=8)

def mesh_of(cfg):
    return make_mesh(cfg, jax.devices()[:cfg.data * cfg.fsdp * cfg.tensor])

def rows(results):
    return [(r.token_ids.tolist(), r.logprobs.tolist()) for r in results]

out = {}
for family, extra in FAMILIES.items():
    config = model_config_from_dict({**SHAPE, **extra})
    params = init_params(config, jax.random.key(0))
    name = "lm_head" if "lm_head" in params else "embed"
    params[name] = params[name] * 10.0  # spread the logits: diverse greedy continuations
    host = jax.device_get(params)
    out[family] = {"single": rows(Engine(BUCKETS, slots=8).generate(config, host, PROMPTS, GREEDY, 3))}
    for mesh_name, mesh_cfg in MESHES.items():
        engine = Engine(BUCKETS, mesh=mesh_of(mesh_cfg), rules=get_rules("tp"), slots=8)
        seen = []  # the decode program's slots: their KV cache layout
        real_decode = engine._decode
        engine._decode = lambda *a: (lambda r: (seen.append(r[0].cache["k"]), r)[1])(real_decode(*a))
        out[family][mesh_name] = rows(engine.generate(config, host, PROMPTS, GREEDY, 3))
        k = seen[-1]  # [L, B, K, hd, T]
        out[family][mesh_name + " cache"] = [list(k.shape), list(k.addressable_shards[0].data.shape)]
    # Handoff from an fsdp training state (float32 master weights, another mesh over the same
    # devices) into the data=2 x tensor=4 rollout layout, without touching the host.
    optimizer = make_optimizer(OptimizerConfig(lr=1e-3, total_steps=1, schedule="constant"))
    state, _ = create_train_state(config, optimizer, make_mesh(MeshConfig(fsdp=8)), get_rules("fsdp"),
                                  jax.random.key(1), params=params)
    engine = Engine(BUCKETS, mesh=mesh_of(MESHES["data=2,tensor=4"]), slots=8)
    with jax.transfer_guard_host_to_device("disallow"), jax.transfer_guard_device_to_host("disallow"):
        rollout_params = engine.handoff(config, state.params)
    q = rollout_params["layers"]["q_proj"]  # [L, D, H, hd]: heads split over tensor
    out[family]["handoff q_proj shard"] = list(q.addressable_shards[0].data.shape)
    out[family]["handoff"] = rows(engine.generate(config, state.params, PROMPTS, GREEDY, 3))
    if family == "qwen2":  # sampled too, and a refill (6 requests through 2 slots)
        out[family]["sampled single"] = rows(Engine(BUCKETS, slots=2).generate(config, host, PROMPTS, SAMPLED, 3))
        engine = Engine(BUCKETS, mesh=mesh_of(MESHES["data=2,tensor=4"]), slots=2)
        out[family]["sampled data=2,tensor=4"] = rows(engine.generate(config, host, PROMPTS, SAMPLED, 3))
print(json.dumps(out))
'''

KV_HEADS = {"qwen2": 2, "qwen3": 4, "llama": 8}
TENSOR = {"tensor=2": 2, "tensor=4": 4, "tensor=8": 8, "data=2,tensor=4": 4}


@pytest.fixture(scope="module")
def runs():
    return run_snippet(SNIPPET, num_devices=8, timeout=900)


def _same(got, want, what):
    assert len(got) == len(want) == 6, what
    for (tokens, logp), (want_tokens, want_logp) in zip(got, want):
        assert tokens == want_tokens, what
        np.testing.assert_allclose(logp, want_logp, atol=1e-5, err_msg=str(what))


@pytest.mark.parametrize("family", list(KV_HEADS))
def test_tensor_parallel_rollouts_equal_one_device(runs, family):
    out = runs[family]
    assert len({tuple(t) for t, _ in out["single"]}) > 2  # not a degenerate model
    for mesh, tensor in TENSOR.items():
        _same(out[mesh], out["single"], (family, mesh))
        (layers, batch, kv_heads, head_dim, slots), shard = out[mesh + " cache"]
        data = 2 if mesh.startswith("data") else 1
        split = tensor if KV_HEADS[family] % tensor == 0 else 1  # otherwise replicated by the rules
        assert shard == [layers, batch // data, kv_heads // split, head_dim, slots], (family, mesh)
    _same(out["handoff"], out["single"], (family, "handoff from fsdp"))
    assert out["handoff q_proj shard"] == [2, 64, 8 // 4, 64 // 8 if family != "qwen3" else 16]


def test_sampled_rollouts_with_refills_equal_one_device(runs):
    _same(runs["qwen2"]["sampled data=2,tensor=4"], runs["qwen2"]["sampled single"], "sampled")
