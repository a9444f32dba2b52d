"""Chat tokenizers from local files: special ids and the prompt/response split."""
import pytest

from swe_rl_jax.tokenizer import TokenizerError, load_tokenizer, qwen_tokenizer_dir


@pytest.fixture(scope="module")
def qwen():
    return load_tokenizer(qwen_tokenizer_dir())


def test_qwen_special_ids(qwen):
    vocab = qwen.hf.get_vocab()
    assert qwen.eos_ids[0] == vocab["<|im_end|>"]
    assert qwen.pad_id == vocab["<|endoftext|>"]
    assert qwen.hf.decode(qwen.assistant_start_ids) == "<|im_start|>assistant\n"


def test_example_mask_covers_exactly_the_response(qwen):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Which file?"}]
    ids, mask = qwen.encode_example(messages, "```\nsrc/a.py\n```")
    rendered = qwen.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    n_prompt = mask.index(1)
    assert qwen.hf.decode(ids[:n_prompt]) == rendered
    assert qwen.hf.decode(ids[n_prompt:]) == "```\nsrc/a.py\n```<|im_end|>"
    assert all(mask[n_prompt:]) and not any(mask[:n_prompt]) and len(mask) == len(ids)
    assert ids[n_prompt - len(qwen.assistant_start_ids):n_prompt] == list(qwen.assistant_start_ids)


def test_missing_or_empty_directory(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(TokenizerError, match="no tokenizer files"):
        load_tokenizer(tmp_path)


def test_a_gguf_tokenizer_is_converted_once_and_each_load_is_its_own_copy(monkeypatch, tmp_path):
    from transformers import AutoTokenizer

    import swe_rl_jax.tokenizer as tokenizer_module
    from swe_rl_jax.tokenizer import smollm2_gguf_path

    path = smollm2_gguf_path()
    reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)  # transformers' own load
    conversions = []
    real = AutoTokenizer.from_pretrained
    monkeypatch.setattr(tokenizer_module, "_GGUF_TOKENIZERS", {})  # as in a fresh process
    monkeypatch.setenv("SWE_RL_JAX_CACHE", str(tmp_path / "cache"))  # nothing saved yet
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *a, **k: conversions.append(k) or real(*a, **k))
    first, second = load_tokenizer(path), load_tokenizer(path)
    assert len(conversions) == 1 and "gguf_file" in conversions[0] and first.hf is not second.hf
    messages = [{"role": "user", "content": "Which file defines `parse_config`? src/config.py or src/cli.py"}]
    for tok in (first, second):
        assert tok.hf.get_vocab() == reference.get_vocab()
        assert tok.encode_prompt(messages) == list(reference.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True)["input_ids"])
    first.hf.add_tokens(["<probe-token>"])  # one caller's change reaches neither the other nor a later load
    assert len(second.hf) == len(load_tokenizer(path).hf) == len(reference) == len(first.hf) - 1
    # A later process loads the conversion this one saved (no GGUF parse) and gets the same tokenizer.
    monkeypatch.setattr(tokenizer_module, "_GGUF_TOKENIZERS", {})
    conversions.clear()
    later = load_tokenizer(path)
    assert len(conversions) == 1 and "gguf_file" not in conversions[0]  # read from the saved directory
    texts = ["def f(x):\n\treturn x  # ünïcode ✓ 中文", "  spaces\n\n\nand 😀\r\nCRLF", "<|im_start|>user\nhi<|im_end|>"]
    assert later.hf.get_vocab() == reference.get_vocab() and later.hf.chat_template == reference.chat_template
    assert [later.hf.encode(t) for t in texts] == [reference.encode(t) for t in texts]
    assert later.encode_prompt(messages) == first.encode_prompt(messages)
    assert (later.eos_ids, later.pad_id, later.assistant_start_ids) == (first.eos_ids, first.pad_id, first.assistant_start_ids)
