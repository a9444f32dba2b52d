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
