"""An episode as token ids, never re-tokenized (docs/AGENT.md, "Token-exact episodes").

Re-rendering a multi-turn conversation through the chat template and tokenizing it again need not
give the tokens the model sampled (a word split otherwise at a turn's edge, a special token the
model wrote, whitespace the template trims): the trainer would score tokens the sampler never
drew. Here an episode's ids are built once, in order: the prompt (system and task, the template's
generation prompt), then per turn the sampled ids exactly as the sampler returned them (an EOS
that ended the turn included), then the observation's ids, which are the template's own text
between the end of the assistant's content and the next generation prompt, tokenized alone. The
loss mask is 1 on sampled ids only, and each sampled id keeps the sampler's log-prob.

The observation's text comes from the template: render the conversation up to the generation
prompt (P), and with the answer and the observation appended plus the next generation prompt (F);
F must begin with P followed by the answer's text, else the template rewrites earlier turns (as
Qwen3's drops the reasoning of past turns) and no token-exact continuation exists: TokenizerError.
The rest of F, less the text of the EOS the sample ended with, is the observation's.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from swe_rl_jax.policies.base import Sampled
from swe_rl_jax.tokenizer import ChatTokenizer, TokenizerError

Message = dict[str, str]


def _text(tokenizer: ChatTokenizer, messages: Sequence[Message], add_generation_prompt: bool) -> str:
    return tokenizer.hf.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt,
                                            tokenize=False)


def observation_ids(tokenizer: ChatTokenizer, before: Sequence[Message], answer: str, sampled: Sampled,
                    observation: str) -> list[int]:
    """The ids after a sampled turn up to the next generation prompt (module docstring). `before`: the
    messages the turn was sampled from; `answer`: the turn's text as the conversation keeps it."""
    prompt = _text(tokenizer, before, True)
    full = _text(tokenizer, [*before, {"role": "assistant", "content": answer}, {"role": "user", "content": observation}],
                 True)
    if not full.startswith(prompt + answer):
        raise TokenizerError("the chat template does not render a conversation as its earlier turns followed by "
                             "the new ones (it rewrites past turns): no token-exact continuation")
    rest = full[len(prompt) + len(answer):]
    if sampled.finish_reason == "eos" and sampled.token_ids:
        eos = tokenizer.hf.decode([sampled.token_ids[-1]], skip_special_tokens=False)
        if not rest.startswith(eos):
            raise TokenizerError(f"the chat template does not end an assistant turn with the EOS {eos!r} the "
                                 "sampler stopped at")
        rest = rest[len(eos):]
    return list(tokenizer.hf.encode(rest, add_special_tokens=False))


@dataclasses.dataclass
class EpisodeTokens:
    """ids, mask (1: sampled) and the sampler's log-probs (0.0 where not sampled), all one length."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]

    @classmethod
    def start(cls, tokenizer: ChatTokenizer, messages: Sequence[Message]) -> "EpisodeTokens":
        ids = tokenizer.encode_prompt(list(messages))
        return cls(ids, [0] * len(ids), [0.0] * len(ids))

    def add_sampled(self, sampled: Sampled) -> None:
        self.ids += sampled.token_ids
        self.mask += [1] * len(sampled.token_ids)
        self.logprobs += sampled.logprobs

    def add_observation(self, ids: Sequence[int]) -> None:
        self.ids += ids
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)

    def to_json(self) -> dict[str, Any]:
        return {"ids": self.ids, "mask": self.mask, "logprobs": [round(x, 6) for x in self.logprobs]}
