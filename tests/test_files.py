"""swe_rl_jax/files.py: outputs are written whole or not at all, with the mode any new file gets."""
import os
import stat

import pytest

from swe_rl_jax.data.sources import InputError
from swe_rl_jax.files import output_dir, output_file, replacing_dir, replacing_file, write_text_atomic


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_failed_write_leaves_the_earlier_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "preds.jsonl"
    target.write_text("earlier\n")
    with pytest.raises(RuntimeError), replacing_file(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "earlier\n" and os.listdir(tmp_path) == ["preds.jsonl"]
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["preds.jsonl"]


def test_results_get_the_mode_of_any_new_file_not_a_private_one(tmp_path):
    old = os.umask(0o022)
    try:
        (tmp_path / "plain").write_text("x")
        (tmp_path / "plain_dir").mkdir()
        write_text_atomic(tmp_path / "file", "x")
        with replacing_dir(tmp_path / "dir") as d:
            (d / "a").write_text("x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "file") == _mode(tmp_path / "plain") == 0o644
    assert _mode(tmp_path / "dir") == _mode(tmp_path / "plain_dir") == 0o755


def test_a_directory_is_replaced_whole_never_mixed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old_only.jsonl").write_text("old")
    with replacing_dir(out) as d:
        (d / "new.jsonl").write_text("new")
    assert os.listdir(out) == ["new.jsonl"] and os.listdir(tmp_path) == ["out"]


def test_outputs_of_the_wrong_kind_or_on_an_input_are_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a directory"):
        output_file(tmp_path / "d", "--out")
    with pytest.raises(InputError, match="is a file"):
        output_dir(tmp_path / "f", "--out")
    with pytest.raises(InputError, match="also an input"):
        output_file(tmp_path / "d" / ".." / "f", "--out", inputs=[tmp_path / "f"])
    with pytest.raises(InputError, match="is a file, so"):
        output_file(tmp_path / "f" / "x.json", "--out")
