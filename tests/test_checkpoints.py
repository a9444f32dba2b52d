"""HF import/export: round trips, transformers compatibility, and clear errors on bad input."""
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hf_reference import VARIANTS, left_padded_batch, make_hf_model, torch_logits
from swe_rl_jax.checkpoints import CheckpointError, load_hf, save_hf
from swe_rl_jax.models import forward
from swe_rl_jax.tokenizer import qwen_tokenizer_dir


def _leaves_equal(a, b):
    la, lb = jax.tree.leaves_with_path(a), jax.tree.leaves_with_path(b)
    assert [p for p, _ in la] == [p for p, _ in lb]
    for (path, x), (_, y) in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape, path
        assert np.array_equal(np.asarray(x), np.asarray(y)), path


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_round_trip_bit_exact_and_loads_in_transformers(variant, tmp_path):
    from transformers import AutoModelForCausalLM

    src = tmp_path / "src"
    model = make_hf_model(variant, src)
    config, params = load_hf(src)
    out = save_hf(tmp_path / "out", config, params)
    config2, params2 = load_hf(out)
    assert config2 == config
    _leaves_equal(params, params2)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. a config key transformers does not understand
        reloaded, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    tokens, mask = left_padded_batch(np.random.default_rng(0), [11, 5], config.vocab_size)
    np.testing.assert_array_equal(torch_logits(reloaded.eval(), tokens, mask), torch_logits(model, tokens, mask))


def test_old_rope_format_config(tmp_path):
    model = make_hf_model("llama3_scaled", tmp_path, old_rope_format=True)
    assert "rope_scaling" in json.loads((tmp_path / "config.json").read_text())
    config, params = load_hf(tmp_path)
    assert config.rope_scaling is not None and config.rope_scaling.original_max_position_embeddings == 64
    tokens = np.random.default_rng(0).integers(0, 128, (1, 40)).astype(np.int32)
    assert np.abs(np.asarray(forward(config, params, tokens)) - torch_logits(model, tokens)).max() <= 1e-4


def test_sharded_export_with_index_and_tokenizer(tmp_path):
    make_hf_model("qwen2_tied", tmp_path / "src")
    config, params = load_hf(tmp_path / "src")
    out = save_hf(tmp_path / "out", config, params, tokenizer_dir=qwen_tokenizer_dir(), max_shard_bytes=40_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and all((out / f).is_file() for f in files)
    assert not (out / "model.safetensors").exists()
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    _leaves_equal(params, load_hf(out)[1])


def test_bfloat16_round_trip(tmp_path):
    make_hf_model("qwen3_headdim", tmp_path / "src")
    config, params = load_hf(tmp_path / "src", dtype=jnp.bfloat16)
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}
    out = save_hf(tmp_path / "out", config, params)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    _leaves_equal(params, load_hf(out, dtype=jnp.bfloat16)[1])


# --- bad input: each error names the file and, where there is one, the tensor ---

@pytest.fixture
def ckpt(tmp_path):
    make_hf_model("qwen2_untied_kv1", tmp_path)
    return tmp_path


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_hf(tmp_path / "nowhere")


def test_missing_weights_file(ckpt):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_hf(ckpt)


def test_missing_config(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf(ckpt)


def test_truncated_safetensors(ckpt):
    path = ckpt / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_hf(ckpt)


def test_unknown_model_type(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model_type"] = "mixtral"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="config.json.*mixtral"):
        load_hf(ckpt)


def test_shape_disagrees_with_config(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["intermediate_size"] = 80
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*model\.layers\.0\.mlp\.(gate|up|down)_proj\.weight.*shape"):
        load_hf(ckpt)


def test_missing_tensor(ckpt):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(ckpt / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\.self_attn\.k_proj\.bias"):
        load_hf(ckpt)


def test_integer_tensor_is_refused_not_truncated(ckpt):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(ckpt / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    tensors[name] = (tensors[name] * 100).astype(np.int32)  # casting back to float would load silently
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: tensor {name} has dtype int32"):
        load_hf(ckpt)


def test_impossible_config_names_key(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["num_key_value_heads"] = 3
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="num_kv_heads"):
        load_hf(ckpt)
