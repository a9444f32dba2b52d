"""The JAX decoder against the transformers PyTorch models, for every family and switch."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hf_reference import VARIANTS, left_padded_batch, make_hf_model, torch_logits
from swe_rl_jax.checkpoints import load_hf
from swe_rl_jax.models import forward


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    model = make_hf_model(request.param, out)
    config, params = load_hf(out)
    return request.param, model, config, params


def test_float32_logits_match_left_padded_batch(pair):
    _, model, config, params = pair
    tokens, mask = left_padded_batch(np.random.default_rng(0), [17, 9, 4, 1], config.vocab_size)
    ref = torch_logits(model, tokens, mask)
    ours = np.asarray(forward(config, params, tokens, mask))
    valid = mask.astype(bool)
    assert np.abs(ours - ref)[valid].max() <= 1e-4
    # Padding must not leak into real rows: the unpadded row alone gives the same logits.
    alone = np.asarray(forward(config, params, tokens[1:2, -9:]))
    assert np.abs(alone[0] - ours[1, -9:]).max() <= 1e-5


def test_no_mask_matches(pair):
    _, model, config, params = pair
    tokens = np.random.default_rng(1).integers(0, config.vocab_size, (2, 33)).astype(np.int32)
    assert np.abs(np.asarray(forward(config, params, tokens)) - torch_logits(model, tokens)).max() <= 1e-4


def test_bfloat16_close_to_float32(pair):
    _, _, config, params = pair
    tokens, mask = left_padded_batch(np.random.default_rng(2), [16, 8], config.vocab_size)
    ref = np.asarray(forward(config, params, tokens, mask))
    bf_config = dataclasses.replace(config, dtype="bfloat16")
    bf_params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    out = np.asarray(forward(bf_config, bf_params, tokens, mask))
    assert out.dtype == np.float32
    valid = mask.astype(bool)
    rel = np.linalg.norm((out - ref)[valid]) / np.linalg.norm(ref[valid])
    assert rel <= 2e-2, rel
    assert rel > 0  # bf16 really ran


def test_scan_and_unrolled_layers_agree(pair):
    _, _, config, params = pair
    tokens = np.random.default_rng(3).integers(0, config.vocab_size, (1, 12)).astype(np.int32)
    scanned = np.asarray(forward(config, params, tokens))
    unrolled = np.asarray(forward(dataclasses.replace(config, scan_layers=False), params, tokens))
    np.testing.assert_allclose(scanned, unrolled, atol=1e-6)
