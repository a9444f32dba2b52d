"""SFT on agent episodes (sft/episodes.py): rows cut from token-exact trajectories, and updates whose
first loss is transformers' negative log-likelihood of the written tokens and which raise their
likelihood in the exported checkpoint, as transformers reads it."""
from __future__ import annotations

import numpy as np
import pytest

from swe_rl_jax.model_source import ModelSource
from swe_rl_jax.sft.episodes import episode_sft_rows, sft_on_episodes
from swe_rl_jax.train import OptimizerConfig


def test_rows_end_at_the_last_written_token_with_the_mask_unshifted():
    rows = episode_sft_rows([{"ids": [5, 6, 7, 8, 9, 10], "mask": [0, 1, 1, 0, 1, 0]},
                             {"ids": [3, 4, 5], "mask": [0, 0, 1]}], pad_id=0, min_length=8)
    np.testing.assert_array_equal(rows["tokens"], [[5, 6, 7, 8, 9, 0, 0, 0], [3, 4, 5, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(rows["loss_mask"], [[0, 1, 1, 0, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0]])


@pytest.mark.parametrize("episode", [{"ids": [1, 2, 3], "mask": [0, 0, 0]},  # nothing written
                                     {"ids": [1, 2, 3], "mask": [1, 1, 0]},  # no prompt before it
                                     {"ids": [1, 2, 3], "mask": [0, 1]}])  # lengths differ
def test_rows_refuse_an_episode_that_teaches_nothing(episode):
    with pytest.raises(ValueError, match="episode 0"):
        episode_sft_rows([episode], pad_id=0)


def _written_nll(model_dir, episodes) -> float:
    """transformers' mean negative log-likelihood of the written tokens, each given what precedes it."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    total, count = 0.0, 0
    for e in episodes:
        ids = torch.tensor([e["ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].double(), -1)
        for s in np.flatnonzero(e["mask"]):
            total -= float(logp[s - 1, e["ids"][s]])
            count += 1
    return total / count


def test_updates_start_at_transformers_nll_and_raise_the_written_tokens_likelihood(tiny_llama, tmp_path):
    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(3):  # prompt, answer, observation, answer: two turns, as an agent's
        spans = [(rng.integers(3, 49152, n).tolist(), w) for n, w in ((7, 0), (5, 1), (6, 0), (4, 1))]
        episodes.append({"ids": [i for ids, _ in spans for i in ids], "mask": [w for ids, w in spans for _ in ids]})
    before = _written_nll(tiny_llama, episodes)
    summary = sft_on_episodes(ModelSource(checkpoint=str(tiny_llama), tokenizer="smollm2"), episodes, tmp_path,
                              steps=6, batch_size=3, optimizer=OptimizerConfig(lr=1e-2, schedule="constant"))
    # Step 1's batch is every episode, its loss taken before the update; float32 on both sides.
    assert summary["loss_first"] == pytest.approx(before, rel=1e-4)
    after = _written_nll(summary["export_dir"], episodes)
    assert after < before - 1.0, (before, after)
    assert summary["loss_last"] < summary["loss_first"]
