"""A GRPO step (sampling, scoring, update) on 8 fake CPU devices equals the same step on one."""
import numpy as np

from swe_rl_jax.parallel.fake_devices import run_snippet

SNIPPET = r"""
import json, jax, numpy as np
from swe_rl_jax.models import model_config_from_dict
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.grpo import GRPOTrainer
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

cfg = model_config_from_dict(dict(family="qwen2", qkv_bias=True, vocab_size=64, hidden_size=64, intermediate_size=128,
                                  num_layers=2, num_heads=4, num_kv_heads=2))
def one_step(devices, preset):
    mesh, rules = make_mesh(MeshConfig(fsdp=len(devices)), devices), get_rules(preset)
    opt = make_optimizer(OptimizerConfig(lr=1e-2, total_steps=2, schedule="constant"))
    state, sh = create_train_state(cfg, opt, mesh, rules, jax.random.PRNGKey(0))
    trainer = GRPOTrainer(TrainerSetup(cfg, sh, opt, mesh, rules, pad_id=0), state,
                          GRPOConfig(group_size=2, kl_coef=0.04),
                          SamplingParams(max_new_tokens=6, temperature=1.0, eos_ids=()),
                          UpdateConfig(prompts_per_step=8, overlong="none", micro_batches=2))
    tokens = []
    def score(payloads, results):
        tokens.extend(r.token_ids.tolist() for r in results)
        return [(float(np.mean(r.token_ids < 32)), {"kind": "ok"}) for r in results]
    prompts = lambda k: [([1, 2, 3 + i % 5], None) for i in range(k)]
    state, m = trainer.step(state, 0, prompts, score)
    w = np.asarray(jax.device_get(state.params["layers"]["q_proj"])).ravel()[:64].tolist()
    return {"tokens": tokens, "loss": m["loss"], "kl": m["kl"], "grad_norm": m["grad_norm"], "w": w}
out = {"one": one_step(jax.devices()[:1], "fsdp")}
for preset in ("dp", "fsdp", "fsdp_tp"):
    out[preset] = one_step(jax.devices(), preset)
print(json.dumps(out))
"""


def test_grpo_step_sharded_equals_single_device():
    out = run_snippet(SNIPPET, num_devices=8, timeout=600)
    one = out["one"]
    for preset in ("dp", "fsdp", "fsdp_tp"):
        got = out[preset]
        assert got["tokens"] == one["tokens"], preset  # same samples from the same key
        for key in ("loss", "kl", "grad_norm"):
            assert abs(got[key] - one[key]) <= 1e-5, (preset, key)
        np.testing.assert_allclose(got["w"], one["w"], atol=1e-5, err_msg=preset)
    assert one["grad_norm"] > 0  # the step really moved the policy (the first loss is 0: Σ A = 0 per group)
