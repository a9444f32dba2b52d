"""seqio tasks, mixtures and feature converters over `swe_subtasks`, with the real Qwen tokenizer.

References are computed independently of the code under test: prompts with the HF tokenizer's
own `apply_chat_template(..., tokenize=False)` then `hf(text)`, responses with `hf.encode`, the
end-of-turn token by its text `<|im_end|>`.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")
seqio = pytest.importorskip("seqio")
st = pytest.importorskip("swe_rl_jax.data.seqio_tasks")
tb = pytest.importorskip("swe_rl_jax.data.tfds_builder")

from swe_rl_jax.tokenizer import TokenizerError, qwen_tokenizer_dir  # noqa: E402

tfds.disable_progress_bar()
EOT = "<|im_end|>"
SFT_SUBTASKS = ("file_localization", "edit_generation", "swe_rl")
RL_SUBTASKS = ("file_localization", "swe_rl")


def make_record(i: int, subtask: str, split: str, response: str | None = None) -> dict:
    repo = f"{split}-org/repo{i % 2}"
    body = "word " * (7 * i)  # prompts of different lengths
    rec = {
        "task_id": f"{repo.replace('/', '__')}-{i}/{subtask}",
        "subtask": subtask,
        "instance_id": f"{repo.replace('/', '__')}-{i}",
        "repo": repo,
        "messages": [
            {"role": "system", "content": f"You solve {subtask}."},
            {"role": "user", "content": f"Issue {i}: it crashes! {body}\n`a != b` ünï \u2028 end"},
        ],
        "ground_truth": {"files": [f"pkg/m{i}.py"]},
        "candidates": ["pkg/m0.py", f"pkg/m{i}.py"],
        "context": {"i": i},
        "meta": {"split": split},
    }
    if response is not None:
        rec["response"] = response
    return rec


def response_text(i: int) -> str:
    # "!" is token id 0 in Qwen's vocabulary: seqio's own converters treat 0 as padding
    return f"<think>step {i}!</think>\n```\npkg/m{i}.py\n```" + " more" * (3 * i) + "!"


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("seqio")
    rl, sft = root / "rl", root / "sft"
    data: dict[tuple[str, str, str], list[dict]] = {}
    sizes = {"file_localization": 6, "edit_generation": 3, "swe_rl": 2}
    for split, scale in (("train", 1), ("validation", 0)):
        for s in RL_SUBTASKS:
            recs = [make_record(i, s, split) for i in range(sizes[s] * scale + 1)]
            write_jsonl(rl / split / f"{s}.jsonl", recs)
            data[("rl", split, s)] = recs
        for s in SFT_SUBTASKS:
            recs = [make_record(i, s, split, response_text(i)) for i in range(sizes[s] * scale + 1)]
            write_jsonl(sft / split / f"{s}.jsonl", recs)
            data[("sft", split, s)] = recs
    reg = st.register_tasks(rl, qwen_tokenizer_dir(), sft_dir=sft, data_dir=root / "tfds")
    tok = st.get_tokenizer(str(qwen_tokenizer_dir()))
    return {"reg": reg, "data": data, "tok": tok, "rl": rl, "sft": sft, "tfds": root / "tfds"}


def ref_prompt_ids(tok, messages) -> list[int]:
    text = tok.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tok.hf(text, add_special_tokens=False)["input_ids"])


def ref_response_ids(tok, response: str) -> list[int]:
    return list(tok.hf.encode(response, add_special_tokens=False)) + [tok.hf.convert_tokens_to_ids(EOT)]


def examples(name, lengths=None, split="train"):
    task = seqio.get_mixture_or_task(name)
    return list(task.get_dataset(lengths, split=split, shuffle=False).as_numpy_iterator())


def test_registered_names(setup):
    reg = setup["reg"]
    assert reg.rl_tasks == {s: f"swe_rl_jax.{s}" for s in RL_SUBTASKS}
    assert reg.sft_tasks == {s: f"swe_rl_jax.sft.{s}" for s in SFT_SUBTASKS}
    for name in list(reg.rl_tasks.values()) + list(reg.sft_tasks.values()):
        assert name in seqio.TaskRegistry.names()
    # swe_rl is not a SoRFT subtask: the SFT mixture leaves it out; default rates = train sizes
    assert reg.mixtures["swe_rl_jax.sorft_sft"] == {
        "swe_rl_jax.sft.file_localization": 7.0, "swe_rl_jax.sft.edit_generation": 4.0}
    assert reg.mixtures["swe_rl_jax.rl"] == {"swe_rl_jax.file_localization": 7.0, "swe_rl_jax.swe_rl": 3.0}
    mix = seqio.get_mixture_or_task("swe_rl_jax.sorft_sft")
    assert {t.name: mix.get_rate(t) for t in mix.tasks} == reg.mixtures["swe_rl_jax.sorft_sft"]


def test_sft_tokens_decode_to_chat_format(setup):
    tok, hf = setup["tok"], setup["tok"].hf
    assert tok.eos_ids[0] == hf.convert_tokens_to_ids(EOT)
    for subtask in SFT_SUBTASKS:
        for split in ("train", "validation"):
            recs = {r["task_id"]: r for r in setup["data"][("sft", split, subtask)]}
            got = examples(f"swe_rl_jax.sft.{subtask}", split=split)
            assert sorted(e["task_id"].decode() for e in got) == sorted(recs)
            for e in got:
                rec = recs[e["task_id"].decode()]
                assert e["subtask"].decode() == subtask
                prompt_text = hf.apply_chat_template(rec["messages"], tokenize=False, add_generation_prompt=True)
                assert hf.decode(e["inputs"].tolist(), skip_special_tokens=False) == prompt_text
                assert hf.decode(e["targets"].tolist(), skip_special_tokens=False) == rec["response"] + EOT
                assert e["inputs"].tolist() == ref_prompt_ids(tok, rec["messages"])
                assert e["targets"].tolist() == ref_response_ids(tok, rec["response"])
    assert 0 in e["targets"].tolist()  # the "!" token really is id 0


def test_rl_task_gives_prompt_ids_and_record_fields(setup):
    tok = setup["tok"]
    for subtask in RL_SUBTASKS:
        recs = {r["task_id"]: r for r in setup["data"][("rl", "train", subtask)]}
        got = examples(f"swe_rl_jax.{subtask}")
        assert len(got) == len(recs) and "targets" not in got[0]
        for e in got:
            rec = recs[e["task_id"].decode()]
            assert e["inputs"].tolist() == ref_prompt_ids(tok, rec["messages"])
            for key in ("instance_id", "repo", "subtask"):
                assert e[key].decode() == rec[key]
            for key in ("ground_truth", "candidates", "context", "meta"):
                assert json.loads(e[key]) == rec[key]


def check_segment(tok, rec, tokens, inputs, weights, positions, bos) -> None:
    p, r = ref_prompt_ids(tok, rec["messages"]), ref_response_ids(tok, rec["response"])
    assert tokens.tolist() == p + r
    assert weights.tolist() == [0] * len(p) + [1] * len(r)  # exactly the response tokens
    assert positions.tolist() == list(range(len(p) + len(r)))
    assert inputs.tolist() == [bos] + (p + r)[:-1]


def test_unpacked_loss_mask_covers_exactly_the_response(setup):
    tok = setup["tok"]
    recs = {r["task_id"]: r for r in setup["data"][("sft", "train", "edit_generation")]}
    lengths = {"inputs": 160, "targets": 64}
    conv = st.ChatFeatureConverter(pack=False, pad_id=tok.pad_id)
    task_ids = [e["task_id"].decode() for e in examples("swe_rl_jax.sft.edit_generation", lengths)]
    rows = list(seqio.get_dataset("swe_rl_jax.sft.edit_generation", lengths, conv).as_numpy_iterator())
    assert len(rows) == len(task_ids) == len(recs)
    for tid, row in zip(task_ids, rows):
        n = int(row["decoder_segment_ids"].sum())
        assert set(row["decoder_segment_ids"].tolist()) == {0, 1} and row["decoder_segment_ids"][:n].all()
        check_segment(tok, recs[tid], row["decoder_target_tokens"][:n], row["decoder_input_tokens"][:n],
                      row["decoder_loss_weights"][:n], row["decoder_positions"][:n], bos=tok.pad_id)
        assert (row["decoder_target_tokens"][n:] == tok.pad_id).all()
        assert not row["decoder_loss_weights"][n:].any() and not row["decoder_positions"][n:].any()
        assert len(row["decoder_target_tokens"]) == 224


def test_plain_seqio_converter_would_mask_wrongly(setup):
    """Why ChatFeatureConverter exists: seqio reads token id 0 (Qwen's "!") as padding."""
    tok = setup["tok"]
    lengths = {"inputs": 160, "targets": 64}
    rows = list(seqio.get_dataset("swe_rl_jax.sft.edit_generation", lengths,
                                  seqio.DecoderFeatureConverter(pack=False)).as_numpy_iterator())
    recs = setup["data"][("sft", "train", "edit_generation")]
    true_counts = sorted(len(ref_response_ids(tok, r["response"])) for r in recs)
    assert sorted(int(r["decoder_loss_weights"].sum()) for r in rows) != true_counts


def test_packed_segments(setup):
    tok = setup["tok"]
    lengths = {"inputs": 200, "targets": 56}  # rows of 256 tokens: several examples per row
    pending = Counter()
    recs_by_tokens = {}
    for subtask in ("file_localization", "edit_generation"):
        for rec in setup["data"][("sft", "train", subtask)]:
            key = tuple(ref_prompt_ids(tok, rec["messages"]) + ref_response_ids(tok, rec["response"]))
            pending[key] += 1
            recs_by_tokens[key] = rec
    conv = st.ChatFeatureConverter(pack=True, pad_id=tok.pad_id)
    multi = 0
    for subtask in ("file_localization", "edit_generation"):
        for row in seqio.get_dataset(f"swe_rl_jax.sft.{subtask}", lengths, conv).as_numpy_iterator():
            seg = row["decoder_segment_ids"]
            assert all(len(v) == 256 for v in row.values())
            ids = [s for s in dict.fromkeys(seg.tolist()) if s]
            assert ids == list(range(1, len(ids) + 1))  # distinct, in order
            multi += len(ids) > 1
            for s in ids:
                where = np.flatnonzero(seg == s)
                assert (np.diff(where) == 1).all()  # contiguous
                key = tuple(row["decoder_target_tokens"][where].tolist())
                assert pending[key] > 0, "packed segment matches no example"
                pending[key] -= 1
                check_segment(tok, recs_by_tokens[key], row["decoder_target_tokens"][where],
                              row["decoder_input_tokens"][where], row["decoder_loss_weights"][where],
                              row["decoder_positions"][where], bos=tok.pad_id)
            pad = seg == 0
            assert not row["decoder_loss_weights"][pad].any() and not row["decoder_positions"][pad].any()
            assert (row["decoder_target_tokens"][pad] == tok.pad_id).all()
            assert int(row["decoder_loss_weights"].sum()) == sum(
                len(ref_response_ids(tok, recs_by_tokens[tuple(row["decoder_target_tokens"][seg == s].tolist())]["response"]))
                for s in ids)
    assert multi > 0, "nothing was packed"
    assert sum(pending.values()) == 0  # every example exactly once


def test_overlong_examples_are_dropped(setup):
    tok = setup["tok"]
    recs = setup["data"][("sft", "train", "file_localization")]
    li, lt = 60, 20
    expected = sorted(r["task_id"] for r in recs
                      if len(ref_prompt_ids(tok, r["messages"])) <= li and len(ref_response_ids(tok, r["response"])) <= lt)
    got = sorted(e["task_id"].decode() for e in examples("swe_rl_jax.sft.file_localization", {"inputs": li, "targets": lt}))
    assert got == expected and 0 < len(got) < len(recs)


def test_rl_mixture_prompt_batches(setup):
    tok = setup["tok"]
    recs = {r["task_id"]: r for s in RL_SUBTASKS for r in setup["data"][("rl", "train", s)]}
    conv = st.PromptFeatureConverter(pad_id=tok.pad_id)
    ds = seqio.get_dataset("swe_rl_jax.rl", {"inputs": 128}, conv, num_epochs=None, shuffle=True, seed=3, batch_size=4)
    seen = set()
    for batch in ds.take(5).as_numpy_iterator():
        assert batch["prompt_tokens"].shape == (4, 128)
        for row, n, tid, gt in zip(batch["prompt_tokens"], batch["prompt_lengths"], batch["task_id"], batch["ground_truth"]):
            rec = recs[tid.decode()]
            assert row[:n].tolist() == ref_prompt_ids(tok, rec["messages"])
            assert (row[n:] == tok.pad_id).all()
            assert json.loads(gt) == rec["ground_truth"]
            seen.add(rec["subtask"])
    assert seen == set(RL_SUBTASKS)
    left = st.PromptFeatureConverter(pad_id=tok.pad_id, left_pad=True)
    row = next(seqio.get_dataset("swe_rl_jax.swe_rl", {"inputs": 128}, left).as_numpy_iterator())
    n = int(row["prompt_lengths"])
    assert row["prompt_tokens"][128 - n:].tolist() == ref_prompt_ids(tok, recs[row["task_id"].decode()]["messages"])


def test_reregistration_is_idempotent_and_rates_configurable(setup):
    kwargs = dict(sft_dir=setup["sft"], data_dir=setup["tfds"])
    try:
        reg = st.register_tasks(None, qwen_tokenizer_dir(), sft_rates={"file_localization": 1, "edit_generation": 3}, **kwargs)
        assert reg.mixtures == {"swe_rl_jax.sorft_sft": {"swe_rl_jax.sft.file_localization": 1.0,
                                                         "swe_rl_jax.sft.edit_generation": 3.0}}
        assert "swe_rl_jax.rl" in seqio.MixtureRegistry.names()  # RL names untouched
        mix = seqio.get_mixture_or_task("swe_rl_jax.sorft_sft")
        assert {t.name: mix.get_rate(t) for t in mix.tasks} == reg.mixtures["swe_rl_jax.sorft_sft"]
        ds = mix.get_dataset({"inputs": 256, "targets": 64}, shuffle=True, seed=0, num_epochs=None)
        counts = Counter(e["subtask"].decode() for e in ds.take(400).as_numpy_iterator())
        assert 0.6 < counts["edit_generation"] / 400 / 0.75 < 1.4  # ~3:1
        reg = st.register_tasks(None, qwen_tokenizer_dir(), sft_subtasks=["edit_generation"], **kwargs)
        assert reg.sft_tasks == {"edit_generation": "swe_rl_jax.sft.edit_generation"}
        assert "swe_rl_jax.sft.file_localization" not in seqio.TaskRegistry.names()
    finally:
        st.register_tasks(None, qwen_tokenizer_dir(), **kwargs)
    assert "swe_rl_jax.sft.file_localization" in seqio.TaskRegistry.names()


def test_vocabulary_wraps_the_hf_tokenizer(setup):
    tok, vocab = setup["tok"], setup["reg"].vocabulary
    text = "def f(x):\n    return x != 0!  # ünï"
    ids = vocab.encode(text)
    assert ids == tok.hf.encode(text, add_special_tokens=False)
    assert vocab.decode(ids) == text
    assert vocab.eos_id == tok.hf.convert_tokens_to_ids(EOT) and vocab.pad_id == tok.pad_id
    assert vocab.encode_tf(text).numpy().tolist() == ids
    assert vocab.encode_tf(np.array([text, "x y"])).to_list() == [ids, vocab.encode("x y")]  # ragged batch
    batch = np.array([ids + [vocab.eos_id, 5, 6], ids + [vocab.eos_id, 7, 8]], np.int32)
    assert [s.decode() for s in vocab.decode_tf(batch).numpy()] == [text + EOT] * 2
    assert vocab == st.ChatVocabulary(qwen_tokenizer_dir()) and vocab != st.ChatVocabulary("/elsewhere")


def test_registration_errors(setup, tmp_path):
    qwen = qwen_tokenizer_dir()
    with pytest.raises(tb.RecordError, match="records directory not found"):
        st.register_tasks(tmp_path / "missing", qwen)
    with pytest.raises(tb.RecordError, match="unknown subtask 'bug_guessing'"):
        st.register_tasks(setup["rl"], qwen, data_dir=setup["tfds"], subtasks=["bug_guessing"])
    with pytest.raises(tb.RecordError, match="no rl records for line_localization"):
        st.register_tasks(setup["rl"], qwen, data_dir=setup["tfds"], subtasks=["line_localization"])
    with pytest.raises(tb.RecordError, match="rates: unknown subtask"):
        st.register_tasks(setup["rl"], qwen, data_dir=setup["tfds"], rl_rates={"bug_guessing": 1.0})
    with pytest.raises(TokenizerError):
        st.register_tasks(setup["rl"], tmp_path / "no_tokenizer")
    with pytest.raises(ValueError, match="records_dir"):
        st.register_tasks(None, qwen)
    bad = tmp_path / "bad"
    write_jsonl(bad / "train" / "swe_rl.jsonl", [make_record(0, "swe_rl", "train")])
    with (bad / "train" / "swe_rl.jsonl").open("a") as f:
        f.write("{not json}\n")
    with pytest.raises(tb.RecordError, match=rf"{bad / 'train' / 'swe_rl.jsonl'}:2: malformed JSON"):
        st.register_tasks(bad, qwen)
    # failed calls leave the previous registration in place
    assert "swe_rl_jax.rl" in seqio.MixtureRegistry.names()
    assert "swe_rl_jax.swe_rl" in seqio.TaskRegistry.names()


def test_input_pipeline_prints_no_tensorflow_cuda_noise():
    """On a machine without a GPU driver, TensorFlow's CUDA probe wrote "Could not find cuda
    drivers" and "failed call to cuInit" to stderr, whatever TF_CPP_MIN_LOG_LEVEL said."""
    import os
    import subprocess
    import sys

    code = ("import jax; jax.devices()\n"
            "from swe_rl_jax.data import seqio_tasks as st\n"
            "print(list(st.tf.data.Dataset.range(3).as_numpy_iterator()), st.tf.config.get_visible_devices('GPU'))")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[np.int64(0),", "np.int64(1),", "np.int64(2)]", "[]"]
    assert [line for line in proc.stderr.splitlines() if "cuda" in line.lower() or "cuinit" in line.lower()] == []


def test_sft_batches_shuffle_over_the_configured_buffer(setup, tmp_path):
    """`shuffle_buffer_size` reaches the SFT stream: a buffer of one keeps the order of seqio's
    unshuffled dataset, a buffer holding every example does not. Last in this file: it re-registers
    the SFT tasks."""
    from swe_rl_jax.model_source import ModelSource
    from swe_rl_jax.sft.run import SFTConfig, SeqioBatches

    tok = setup["tok"]
    recs = setup["data"][("sft", "train", "file_localization")]
    wanted = [ref_prompt_ids(tok, r["messages"]) + ref_response_ids(tok, r["response"]) for r in recs]

    def order(buffer: int) -> list[int]:
        config = SFTConfig(sft_dir=str(setup["sft"]), out_dir=str(tmp_path / str(buffer)),
                           model=ModelSource(checkpoint=str(qwen_tokenizer_dir())), inputs_length=160,
                           targets_length=64, pack=False, batch_size=len(recs), shuffle_buffer_size=buffer)
        batch = next(SeqioBatches(config, ["file_localization"], tok.pad_id).from_position(0))
        return [next(i for i, w in enumerate(wanted) if row[:len(w)].tolist() == w) for row in batch["tokens"]]

    index = {r["task_id"]: i for i, r in enumerate(recs)}
    unshuffled = [index[e["task_id"].decode()] for e in examples("swe_rl_jax.sft.file_localization")]  # TFDS's order
    assert order(1) == unshuffled
    assert order(len(recs)) != unshuffled  # (the stream repeats before it shuffles: rows may repeat)
