"""Engine mechanics: shape buckets and compile counts, shared prefill, finish reasons, stop strings."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from swe_rl_jax.config import ConfigError
from swe_rl_jax.models import ModelConfig, forward, init_params
from swe_rl_jax.sampling import Buckets, Engine, SamplingParams, round_up
from swe_rl_jax.sampling.results import apply_stop

CONFIG = ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True, eos_token_ids=(1,))


class LetterTokenizer:
    """decode(ids) -> one letter per id: enough to exercise stop strings without a vocabulary."""

    def decode(self, ids) -> str:
        return "".join(chr(ord("a") + int(i) % 26) for i in ids)


@pytest.fixture(scope="module")
def params():
    params = init_params(CONFIG, jax.random.key(5))
    params["embed"] = params["embed"] * 20.0  # tied embeddings: spreads the logits
    return params


_forward = jax.jit(lambda params, tokens: forward(CONFIG, params, tokens))


def _greedy_reference(params, prompt: list[int], steps: int) -> list[int]:
    """Greedy decoding by full forward passes, no cache: a fixed 32-slot buffer filled left to
    right (causal attention makes the unused slots after the last real token irrelevant)."""
    ids = np.zeros((1, 32), np.int32)
    ids[0, : len(prompt)] = prompt
    for i in range(len(prompt), len(prompt) + steps):
        ids[0, i] = int(np.asarray(_forward(params, ids))[0, i - 1].argmax())
    return ids[0, len(prompt): len(prompt) + steps].tolist()


def test_round_up_buckets():
    assert [round_up(n) for n in (1, 2, 3, 5, 16, 17)] == [1, 2, 4, 8, 16, 32]
    assert round_up(3, floor=16) == 16 and round_up(5, multiple_of=8) == 8 and round_up(9, multiple_of=8) == 16
    assert [round_up(n, steps_per_octave=4) for n in (17, 20, 21, 100, 4097)] == [20, 20, 24, 112, 5120]
    with pytest.raises(ConfigError):
        Buckets(prompt_floor=0)


def test_default_buckets_split_each_octave_in_four():
    # octave [512, 1024) in steps of 128, [256, 512) in steps of 64: at most 25 % padding
    assert [Buckets().prompt(n) for n in (300, 500, 513, 576, 700)] == [320, 512, 640, 640, 768]
    assert Buckets().new_tokens(24) == 24 and Buckets().new_tokens(20) == 20


def test_prompt_lengths_within_a_bucket_reuse_one_compilation(params):
    engine = Engine(Buckets(prompt_floor=8, new_tokens_floor=8, steps_per_octave=1))  # whole octaves
    run = lambda prompts, **kw: engine.generate(  # noqa: E731
        CONFIG, params, prompts, SamplingParams(**{"max_new_tokens": 6, "eos_ids": (), **kw}), 0)
    run([[5] * 3, [6] * 9])  # prompt bucket 16, batch bucket 2
    assert engine.compilations == 1
    # Other lengths in the same buckets, other temperature / top_p values, fewer new tokens,
    # another seed: all the same program.
    run([[7] * 16, [8] * 12], temperature=0.5, top_p=0.9)
    run([[9] * 10, [9] * 11], temperature=1.3, top_p=0.5, max_new_tokens=3)
    assert engine.compilations == 2  # top_p < 1 vs == 1 selects the code path once
    run([[7] * 16, [8] * 12])
    assert engine.compilations == 2
    run([[7] * 17, [8] * 2])  # prompt bucket 32
    assert engine.compilations == 3
    run([[1, 2]] * 3)  # batch bucket 4
    assert engine.compilations == 4


def test_n_samples_share_the_prefill_and_duplicates_dedupe(params):
    engine = Engine()
    prompts = [[4, 5, 6], [7, 8, 9, 10, 11]]
    sp = SamplingParams(max_new_tokens=10, temperature=0.0, eos_ids=(), n=3)
    results = engine.generate(CONFIG, params, prompts + [prompts[0]], sp, 0)
    assert [(r.prompt_index, r.sample_index) for r in results] == [(p, s) for p in range(3) for s in range(3)]
    for r in results:
        expected = _greedy_reference(params, prompts[r.prompt_index % 2], 10)
        assert r.token_ids.tolist() == expected and r.finish_reason == "length"


def test_eos_and_length_finish_reasons(params):
    engine = Engine()
    prompts = [[4, 5, 6], [9, 3, 12, 7]]
    reference = [_greedy_reference(params, p, 8) for p in prompts]
    # Make the 4th greedy token of prompt 0 an EOS id (if it appears earlier, it stops there).
    eos = reference[0][3]
    sp = SamplingParams(max_new_tokens=8, temperature=0.0, eos_ids=(63, eos))
    results = engine.generate(CONFIG, params, prompts, sp, 0)
    for r, ref in zip(results, reference):
        cut = ref.index(eos) + 1 if eos in ref else len(ref)
        assert r.token_ids.tolist() == ref[:cut]
        assert r.finish_reason == ("eos" if eos in ref else "length")
        assert r.length == len(r.logprobs) == cut
    assert results[0].finish_reason == "eos" and results[0].length <= 4


def test_stop_strings_cut_tokens_and_text(params):
    engine = Engine()
    prompt = [4, 5, 6]
    tokenizer = LetterTokenizer()
    ref = _greedy_reference(params, prompt, 12)
    text = tokenizer.decode(ref)
    stop = text[5:7]  # completed by token 6 at the latest
    cut = text.find(stop) + len(stop)
    sp = SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=(), stop=("zzzz", stop))
    (r,) = engine.generate(CONFIG, params, [prompt], sp, 0, tokenizer=tokenizer)
    assert r.finish_reason == "stop"
    assert r.token_ids.tolist() == ref[:cut] and len(r.logprobs) == cut
    assert r.text == text[: text.find(stop)]
    # Without a stop string hit: full text, finish by length.
    (r,) = engine.generate(CONFIG, params, [prompt], SamplingParams(max_new_tokens=12, temperature=0.0,
                                                                    eos_ids=(), stop=("zzzz",)), 0, tokenizer=tokenizer)
    assert r.finish_reason == "length" and r.text == text


def test_apply_stop_finds_the_completing_token():
    decode = lambda ids: "".join(["ab", "c", "<st", "op>", "d"][i] for i in ids)  # noqa: E731
    assert apply_stop(np.arange(5), ["<stop>"], decode) == (4, "abc")
    assert apply_stop(np.arange(5), ["c<s", "<stop>"], decode) == (3, "ab")
    assert apply_stop(np.arange(5), ["x"], decode) is None


def test_invalid_requests_are_rejected(params):
    for bad in (dict(temperature=-1.0), dict(top_p=0.0), dict(top_k=-1), dict(n=0), dict(max_new_tokens=0),
                dict(stop=("",))):
        with pytest.raises(ConfigError):
            SamplingParams(**bad)
    with pytest.raises(ValueError, match="tokenizer"):
        Engine().generate(CONFIG, params, [[1, 2]], SamplingParams(stop=("x",)), 0)
    with pytest.raises(ValueError, match="empty prompt"):
        Engine().generate(CONFIG, params, [[]], SamplingParams(), 0)
