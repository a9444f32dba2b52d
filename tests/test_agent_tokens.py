"""Token-exact episodes (agent/tokens.py): the ids are the chat template's own rendering wherever the
sampled tokens are the text's tokenization, the mask covers exactly the sampled tokens, and the
trainer's log-prob of every sampled token of a multi-turn episode equals the sampler's."""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.environment import Observation
from swe_rl_jax.agent.episode import Episode
from swe_rl_jax.agent.tokens import EpisodeTokens, observation_ids
from swe_rl_jax.models import ModelConfig, forward, init_params
from swe_rl_jax.policies.base import Sampled
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.tokenizer import TokenizerError, load_tokenizer, qwen_tokenizer_dir, smollm2_gguf_path


@functools.lru_cache(maxsize=None)
def _tokenizer(name: str):
    return load_tokenizer(qwen_tokenizer_dir() if name == "qwen" else smollm2_gguf_path())


ANSWERS = ["THOUGHT: look first.\n\n```mswea_bash_command\nls -la\n```",
           "a trailing newline\n",
           "é ünïcode, <tags> and ``` fences",
           "cut off by the token limit"]
OBSERVATIONS = ["<returncode>0</returncode>\n<output>\nREADME.md\n</output>", "Format error:\n\nagain",
                "<returncode>1</returncode>\n<output>\n</output>", "the last one"]


def _build(tok, split_chars: bool, answers=ANSWERS):
    """An episode of scripted turns; `split_chars`: the 'sampled' tokens are one per character where the
    vocabulary has them (not the text's tokenization), as a model may well sample."""
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}]
    tokens = EpisodeTokens.start(tok, messages)
    spans = []
    for k, (answer, obs) in enumerate(zip(answers, OBSERVATIONS)):
        ids = [i for c in answer for i in tok.hf.encode(c, add_special_tokens=False)] if split_chars else \
            tok.hf.encode(answer, add_special_tokens=False)
        ended = k != len(answers) - 1  # the last turn ran out of tokens: no EOS
        sampled = Sampled(tuple(ids) + ((tok.eos_ids[0],) if ended else ()), (0.0,) * (len(ids) + ended),
                          "eos" if ended else "length")
        spans.append((len(tokens.ids), len(tokens.ids) + len(sampled.token_ids)))
        tokens.add_sampled(sampled)
        tokens.add_observation(observation_ids(tok, messages, answer, sampled, obs))
        messages = [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": obs}]
    return tokens, messages, spans


@pytest.mark.parametrize("name", ["smollm2", "qwen"])
def test_episode_ids_are_the_templates_rendering_and_the_mask_its_assistant_spans(name):
    tok = _tokenizer(name)
    tokens, messages, spans = _build(tok, split_chars=False)
    # Sampled tokens that are the text's own tokenization: exactly the template's rendering, with
    # the generation prompt of the next turn (transformers renders it, independently of us).
    assert tokens.ids == tok.encode_prompt(messages)
    assert len(tokens.ids) == len(tokens.mask) == len(tokens.logprobs)
    # The mask is 1 on exactly the sampled spans: each one the answer's tokens and the EOS that ended it.
    assert [i for i, m in enumerate(tokens.mask) if m] == [i for a, b in spans for i in range(a, b)]
    for (a, b), answer in zip(spans, ANSWERS):
        assert tok.hf.decode(tokens.ids[a:b], skip_special_tokens=True) == answer
    # Sampled tokens that are not what tokenizing the rendered conversation gives (one per character;
    # or, with SmolLM2's vocabulary, an answer that starts with spaces, which the template's
    # "assistant\n" merges with when the whole text is tokenized again) are kept as sampled, and the
    # text is still the template's, character for character: re-tokenizing would train on other tokens.
    spaced = ["  leading spaces" if k == 1 else a for k, a in enumerate(ANSWERS)]
    for split, split_messages, split_spans in (_build(tok, split_chars=True), _build(tok, False, spaced)):
        assert (split.ids != tok.encode_prompt(split_messages)) == (split_messages[4]["content"] == ANSWERS[1]
                                                                      or name == "smollm2")
        assert tok.hf.decode(split.ids, skip_special_tokens=False) == tok.hf.apply_chat_template(
            split_messages, add_generation_prompt=True, tokenize=False)
        assert [i for i, m in enumerate(split.mask) if m] == [i for a, b in split_spans for i in range(a, b)]


def test_a_template_that_rewrites_past_turns_is_refused():
    """A template that trims each message (Llama 3's `| trim`; Qwen3 drops past turns' reasoning) does
    not render the conversation as its earlier turns followed by the new ones: no token-exact episode."""
    import copy

    tok = _tokenizer("smollm2")
    hf = copy.copy(tok.hf)
    hf.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n"
                        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    trimming = type(tok)(hf, tok.eos_ids, tok.pad_id, tok.assistant_start_ids, tok.source)
    with pytest.raises(TokenizerError, match="rewrites past turns"):
        observation_ids(trimming, [{"role": "user", "content": "task"}], " padded answer ",
                        Sampled((1,), (0.0,), "length"), "obs")


def _tiny(vocab: int, eos: tuple[int, ...]) -> tuple[ModelConfig, dict]:
    config = ModelConfig(family="qwen2", vocab_size=vocab, hidden_size=32, intermediate_size=64, num_layers=2,
                         num_heads=4, num_kv_heads=2, qkv_bias=True, eos_token_ids=eos, max_position_embeddings=2048)
    # The layers from init_params on a small vocabulary; the vocabulary-sized matrices drawn with numpy
    # (JAX's initializer takes tens of seconds on Qwen's 151,936 rows on this CPU).
    params = init_params(dataclasses.replace(config, vocab_size=64), jax.random.key(0))
    rng = np.random.default_rng(0)
    params["embed"] = jnp.asarray(rng.normal(0, 0.02, (vocab, 32)), jnp.float32)
    params["lm_head"] = jnp.asarray(rng.normal(0, 0.08, (32, vocab)), jnp.float32)  # spread logits: tokens vary
    return config, params


@pytest.mark.parametrize("name", ["smollm2", "qwen"])
def test_the_trainers_logprob_of_every_sampled_token_equals_the_samplers_across_turns(name):
    """A multi-turn episode from the in-process sampler (a tiny random model: format errors and canned
    command outputs as observations): teacher-forced float32 log-probs over the whole episode equal
    the sampler's at every sampled position, across turn boundaries. atol 1e-4: the two programs
    (a KV-cached decode step, one forward over the row) sum the same float32 products in another
    order; the test of sampling/ holds the same bound."""
    from swe_rl_jax.policies.sampler import SamplerPolicy
    from swe_rl_jax.rl.episodes import build_episode_batch
    from swe_rl_jax.rl.policy_update import UpdateConfig, policy_logprobs
    from swe_rl_jax.sampling import Engine
    from swe_rl_jax.sampling.buckets import Buckets

    tok = _tokenizer(name)
    config, params = _tiny(len(tok.hf), tok.eos_ids)
    agent = AgentConfig(system_template="You are an agent.", step_limit=4, max_consecutive_format_errors=0,
                        sampling=SamplingParams(max_new_tokens=12, temperature=1.0))
    # One prompt bucket for every turn (the prompt grows each turn): one prefill program, not one per size.
    # With the prefix cache, as agent runs sample: each later turn prefills only its new tokens.
    policy = SamplerPolicy(config, params, tok, Engine(Buckets(prompt_floor=1024)), seed=1, prefix_cache_tokens=4096)
    episode = Episode("repo__x-1", 0, agent, tokenizer=tok)
    episode.start("Fix the bug in parse().")
    outputs = iter(["<returncode>0</returncode>\n<output>\nok\n</output>"] * 4)
    while not episode.limit_before_turn():
        response = policy.generate([episode.request(seed=3)])[0]
        action = episode.answered(response, 0.0)
        if action is not None:
            episode.observed(Observation(next(outputs), 0, 2, False, 0.0, 0.0))
    tokens = episode.tokens
    assert len(episode.turns) == 4 and sum(tokens.mask) >= 4
    assert policy.prefix_cache.hits == 3
    # The turn boundaries: each sampled span starts right after a generation prompt.
    starts = [i for i in range(1, len(tokens.mask)) if tokens.mask[i] and not tokens.mask[i - 1]]
    assert len(starts) == 4
    assert all(tokens.ids[s - len(tok.assistant_start_ids): s] == list(tok.assistant_start_ids) for s in starts)
    # The trainer's own path: the episode as a GRPO row (rl/episodes.py), log-probs as the policy
    # update computes them (rl/policy_update.policy_logprobs), against the sampler's on that row.
    batch = build_episode_batch([tokens.to_json()], tok.pad_id)
    assert batch.loss_mask.sum() == sum(tokens.mask)
    trainer = np.asarray(policy_logprobs(config, params, {k: jnp.asarray(v) for k, v in batch.arrays().items()},
                                         UpdateConfig(), temperature=1.0)[0])
    on = batch.loss_mask > 0
    np.testing.assert_allclose(trainer[on], batch.logp_sampler[on], atol=1e-4)
    # And a plain forward pass (float64 log-softmax here) agrees position by position.
    logits = np.asarray(forward(config, params, np.asarray([tokens.ids], np.int32)))[0].astype(np.float64)
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    positions = np.flatnonzero(tokens.mask)
    np.testing.assert_allclose(np.asarray(tokens.logprobs)[positions],
                               logp[positions - 1, np.asarray(tokens.ids)[positions]], atol=1e-4)
    assert all(t == 0.0 for t, m in zip(tokens.logprobs, tokens.mask) if not m)
