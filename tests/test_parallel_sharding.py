"""Meshes, rule tables, and sharded forward/train-step parity on 8 fake CPU devices."""
from __future__ import annotations

import pytest
from jax.sharding import AbstractMesh, PartitionSpec

from swe_rl_jax.config import ConfigError
from swe_rl_jax.models import preset
from swe_rl_jax.parallel.fake_devices import run_snippet
from swe_rl_jax.parallel.mesh import MeshConfig, parse_mesh
from swe_rl_jax.parallel.rules import get_rules, logical_spec, rules_for_mesh


def test_mesh_config_fills_the_free_axis_and_rejects_bad_sizes():
    assert MeshConfig().shape(8) == (1, 8, 1)
    assert MeshConfig(data=2, fsdp=-1, tensor=2).shape(8) == (2, 2, 2)
    assert parse_mesh("fsdp=4,tensor=2") == MeshConfig(data=1, fsdp=4, tensor=2)
    assert parse_mesh("data=8") == MeshConfig(data=8, fsdp=1, tensor=1)
    with pytest.raises(ConfigError):
        MeshConfig(data=-1, fsdp=-1)
    with pytest.raises(ConfigError):
        MeshConfig(fsdp=3).shape(8)
    with pytest.raises(ConfigError):
        parse_mesh("pipeline=2")


def test_rules_use_each_mesh_axis_once_and_replicate_indivisible_dims():
    mesh = AbstractMesh((1, 4, 2), ("data", "fsdp", "tensor"))
    fsdp, tp = get_rules("fsdp"), get_rules("fsdp_tp")
    # [vocab, embed]: vocab takes fsdp, so embed (also fsdp) stays whole.
    assert logical_spec(("vocab", "embed"), (64, 32), mesh, fsdp) == PartitionSpec("fsdp", None)
    # vocab 63 does not divide by 4: replicated, and fsdp goes to the embed dim instead.
    assert logical_spec(("vocab", "embed"), (63, 32), mesh, fsdp) == PartitionSpec(None, "fsdp")
    # 1 kv head over tensor=2: replicated; the 4 query heads are split.
    assert logical_spec(("layers", "embed", "kv_heads", "head_dim"), (2, 32, 1, 8), mesh, tp) == PartitionSpec(
        None, "fsdp", None, None)
    assert logical_spec(("layers", "embed", "heads", "head_dim"), (2, 32, 4, 8), mesh, tp) == PartitionSpec(
        None, "fsdp", "tensor", None)
    assert logical_spec(("batch", "length"), (8, 5), mesh, tp) == PartitionSpec(("data", "fsdp"), None)
    assert logical_spec(("batch", "length"), (6, 5), mesh, tp) == PartitionSpec(None, None)
    assert logical_spec(("layers", "norm"), (2, 32), mesh, get_rules("dp")) == PartitionSpec(None, None)
    with pytest.raises(ConfigError):
        get_rules("pipeline")


def test_every_published_preset_gets_a_valid_fsdp_tp_layout():
    # Validity = jax accepts the NamedSharding for the shape (checked in the snippet below for a
    # tiny model); here: every sharded dim divides, for every published shape.
    mesh = AbstractMesh((2, 8, 4), ("data", "fsdp", "tensor"))
    from swe_rl_jax.models.params import param_specs

    for name in ("qwen2.5-7b", "qwen3-8b", "llama3.1-8b", "smollm2-135m"):
        for path, (shape, axes) in param_specs(preset(name)).items():
            spec = logical_spec(axes, shape, mesh, get_rules("fsdp_tp"))
            for size, part in zip(shape, spec):
                names = (part,) if isinstance(part, str) else tuple(part or ())
                n = 1
                for a in names:
                    n *= dict(zip(mesh.axis_names, mesh.axis_sizes))[a]
                assert size % n == 0, (name, path, shape, spec)


def test_tp_rollout_rules_split_heads_mlp_vocab_and_the_kv_cache_over_tensor():
    from swe_rl_jax.models.params import param_specs
    from swe_rl_jax.sampling.decode import CACHE_AXES

    mesh = AbstractMesh((2, 2, 8), ("data", "fsdp", "tensor"))
    tp = get_rules("tp")
    for name in ("qwen2.5-coder-32b", "llama3.3-70b"):  # 40 / 64 heads, 8 kv heads
        specs = {path: logical_spec(axes, shape, mesh, tp) for path, (shape, axes) in param_specs(preset(name)).items()}
        assert specs["layers/q_proj"] == specs["layers/k_proj"] == PartitionSpec(None, None, "tensor", None)
        assert specs["layers/o_proj"] == PartitionSpec(None, "tensor", None, None)
        assert specs["layers/gate_proj"] == PartitionSpec(None, None, "tensor")
        assert specs["layers/down_proj"] == PartitionSpec(None, "tensor", None)
        assert specs["embed"] == PartitionSpec("tensor", None) and specs["lm_head"] == PartitionSpec(None, "tensor")
        # Weights whole over data x fsdp, which split the rows instead.
        assert not any(a in ("data", "fsdp") for spec in specs.values() for part in spec
                       for a in ((part,) if isinstance(part, str) else part or ()))
    cache_spec = logical_spec(("layers", *CACHE_AXES["k"]), (80, 16, 8, 128, 64), mesh, tp)  # [L, B, K, hd, T]
    assert cache_spec == PartitionSpec(None, ("data", "fsdp"), "tensor", None, None)
    assert rules_for_mesh(tp, AbstractMesh((4,), ("data",)))["batch"] == ("data",)


SNIPPET = r"""
import json, tempfile
import jax, jax.numpy as jnp, numpy as np
from swe_rl_jax.checkpoints import load_hf, save_hf
from swe_rl_jax.models import ModelConfig, forward, init_params
from swe_rl_jax.models.params import flatten
from swe_rl_jax.parallel import *
from swe_rl_jax.train import *

assert jax.device_count() == 8
cfg = ModelConfig(family="qwen2", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                  num_heads=4, num_kv_heads=2, qkv_bias=True)
rng = np.random.default_rng(0)
tokens = rng.integers(0, 128, (16, 16)).astype(np.int32)
batch = {"tokens": tokens, "loss_mask": (rng.random((16, 16)) < 0.6).astype(np.float32)}
oc = OptimizerConfig(lr=1e-3, warmup_steps=0, total_steps=10, weight_decay=0.1)
key = jax.random.PRNGKey(1)

def run(mesh_cfg, rules_name, devices=None):
    mesh, rules, opt = make_mesh(mesh_cfg, devices), get_rules(rules_name), make_optimizer(oc)
    state, sh = create_train_state(cfg, opt, mesh, rules, key)
    tok_sharding = activation_sharding(mesh, rules, ("batch", "length"), tokens.shape)
    logits = jax.jit(lambda p, t: forward(cfg, p, t), in_shardings=(sh.params, tok_sharding))(state.params, tokens)
    logits = np.asarray(logits)  # read before the step donates the state
    step = make_train_step(make_sft_loss(cfg, chunk=8, shard=MeshSharding(mesh, rules)), opt, sh,
                           batch_shardings(mesh, rules, batch), num_micro_batches=2)
    state, metrics = step(state, batch)
    specs = {k: str(v.sharding.spec) for k, v in flatten(state.params).items()}
    return logits, float(metrics["loss"]), {k: np.asarray(v) for k, v in flatten(state.params).items()}, specs

ref_logits, ref_loss, ref_params, _ = run(MeshConfig(fsdp=1), "dp", jax.devices()[:1])
# Independent of all sharding code: plain forward on plain init_params.
plain = np.asarray(forward(cfg, init_params(cfg, key), tokens))
out = {"plain_vs_ref": float(np.abs(plain - ref_logits).max()), "cases": {}}
for name, mesh_cfg in [("dp", MeshConfig(data=2, fsdp=4)), ("fsdp", MeshConfig(fsdp=8)),
                       ("fsdp_tp", MeshConfig(fsdp=4, tensor=2)), ("fsdp_tp", MeshConfig(data=2, fsdp=2, tensor=2))]:
    logits, loss, params, specs = run(mesh_cfg, name)
    out["cases"][f"{name}:{mesh_cfg}"] = {
        "logits": float(np.abs(logits - ref_logits).max()),
        "loss": abs(loss - ref_loss),
        "params": max(float(np.abs(params[k] - ref_params[k]).max()) for k in ref_params),
        "embed_spec": specs["embed"], "q_spec": specs["layers/q_proj"],
    }

# Sharded HF import: each device gets its slices; values equal the plain loader's.
with tempfile.TemporaryDirectory() as d:
    save_hf(d, cfg, init_params(cfg, key))
    _, plain_params = load_hf(d)
    mesh = make_mesh(MeshConfig(fsdp=4, tensor=2))
    _, sharded = load_hf_sharded(d, mesh, get_rules("fsdp_tp"))
    expect = param_shardings(cfg, mesh, get_rules("fsdp_tp"))
    out["hf_max_diff"] = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                             for a, b in zip(jax.tree.leaves(plain_params), jax.tree.leaves(sharded)))
    out["hf_shardings_match"] = all(a.sharding == b for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(expect)))
    out["hf_shard_shape"] = list(sharded["layers"]["q_proj"].addressable_shards[0].data.shape)
print(json.dumps(out))
"""


def test_forward_and_train_step_match_single_device_under_every_preset():
    out = run_snippet(SNIPPET, num_devices=8, timeout=240)
    assert out["plain_vs_ref"] < 1e-6
    assert len(out["cases"]) == 4
    for case, diffs in out["cases"].items():
        assert diffs["logits"] < 1e-5, case
        assert diffs["loss"] < 1e-5, case
        assert diffs["params"] < 1e-5, case
    assert out["cases"]["dp:MeshConfig(data=2, fsdp=4, tensor=1)"]["embed_spec"] == "P(None, None)"
    assert out["cases"]["fsdp:MeshConfig(data=1, fsdp=8, tensor=1)"]["embed_spec"] == "P('fsdp', None)"
    assert out["cases"]["fsdp_tp:MeshConfig(data=1, fsdp=4, tensor=2)"]["q_spec"] == (
        "P(None, 'fsdp', 'tensor', None)")
    assert out["hf_max_diff"] == 0.0
    assert out["hf_shardings_match"]
    assert out["hf_shard_shape"] == [2, 16, 2, 16]  # [L, D/fsdp, H/tensor, hd]
