"""Applying edits (both semantics), diffs (normalized and git), changed lines, and the SoRFT
edit reward. Git patches are checked with the real `git apply`."""
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swe_rl_jax.rewards import (
    FormatError,
    SearchReplaceBlock,
    apply_search_replace,
    changed_old_lines,
    edit_reward,
    get_reward,
    git_diff,
    normalized_patch,
    parse_search_replace,
)

OLD = "".join(f"line{i}\n" for i in range(1, 21))


def test_normalized_patch_by_hand():
    new = OLD.replace("line10\n", "LINE10\n")
    assert normalized_patch(OLD, new) == "\n".join([
        "@@ -7,7 +7,7 @@", " line7", " line8", " line9", "-line10", "+LINE10",
        " line11", " line12", " line13"])
    assert normalized_patch(OLD, OLD) == ""
    assert normalized_patch("a\n", "a") == ""  # line terminators are invisible here


def test_changed_old_lines_conventions():
    assert changed_old_lines(OLD, OLD.replace("line3\n", "x\n")) == {3}
    assert changed_old_lines(OLD, OLD.replace("line3\nline4\n", "")) == {3, 4}
    # Pure insertion after line 5 maps to 5; at the top of a file (or a new file) to 1.
    assert changed_old_lines(OLD, OLD.replace("line5\n", "line5\nnew\n")) == {5}
    assert changed_old_lines(OLD, "new\n" + OLD) == {1}
    assert changed_old_lines("", "created\n") == {1}
    # Replacing 1 line by 3 marks the replaced line only.
    assert changed_old_lines(OLD, OLD.replace("line7\n", "a\nb\nc\n")) == {7}
    # A missing final newline is a change of the last line (git's view).
    assert changed_old_lines("a\nb\n", "a\nb") == {2}


def test_apply_swe_rl_vs_agentless():
    files = {"f.py": "x = 1\ny = 2\nx = 1\n", "g.py": "a\n"}
    blocks = [SearchReplaceBlock("f.py", "x = 1", "x = 9"),
              SearchReplaceBlock("g.py", "missing", "b"),
              SearchReplaceBlock("g.py", "a", "a"),
              SearchReplaceBlock("f.py", "= 2", "= 3"),  # mid-line: not a match
              SearchReplaceBlock("h.py", "", "new")]
    strict = apply_search_replace(files, blocks, "swe_rl")
    assert isinstance(strict, FormatError) and strict.kind == "search_not_found" and strict.details["block"] == 1
    loose = apply_search_replace(files, blocks, "agentless")
    assert loose.new_contents == {"f.py": "x = 9\ny = 2\nx = 1\n", "h.py": "new"}  # first occurrence
    assert loose.applied == 2
    assert [(s["block"], s["kind"]) for s in loose.skipped] == [
        (1, "search_not_found"), (2, "identical_search_replace"), (3, "search_not_found")]
    everywhere = apply_search_replace(files, blocks[:1], "swe_rl")
    assert everywhere.new_contents == {"f.py": "x = 9\ny = 2\nx = 9\n"}


def test_blocks_apply_sequentially_per_file():
    blocks = [SearchReplaceBlock("f.py", "a", "b"), SearchReplaceBlock("f.py", "b", "c")]
    assert apply_search_replace({"f.py": "a\n"}, blocks).new_contents == {"f.py": "c\n"}


# ------------------------------------------------------------------ git apply

requires_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def git_apply(tmp: Path, old: dict, patch: str) -> dict:
    """Writes `old` into a fresh repository, checks and applies `patch`, returns the files."""
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    for path, content in old.items():
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).write_bytes(content.encode())
    (tmp / "p.diff").write_bytes(patch.encode())
    check = subprocess.run(["git", "apply", "--check", "p.diff"], cwd=tmp, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr + "\n" + patch
    subprocess.run(["git", "apply", "p.diff"], cwd=tmp, check=True)
    (tmp / "p.diff").unlink()
    return {f.relative_to(tmp).as_posix(): f.read_bytes().decode()
            for f in tmp.rglob("*") if f.is_file() and ".git" not in f.relative_to(tmp).parts}


@requires_git
def test_git_diff_of_applied_edits(tmp_path):
    old = {"pkg/a.py": OLD, "b.py": "no newline\nat end", "crlf.py": "a\r\nb\r\nc\r\n"}
    response = "\n".join([
        "### pkg/a.py\n<<<<<<< SEARCH\nline2\n=======\nLINE2\n>>>>>>> REPLACE",
        "### pkg/a.py\n<<<<<<< SEARCH\nline18\nline19\n=======\n>>>>>>> REPLACE",
        "### b.py\n<<<<<<< SEARCH\nat end\n=======\nat end, changed\n>>>>>>> REPLACE",
        "### crlf.py\n<<<<<<< SEARCH\nb\r\n=======\nB\r\n>>>>>>> REPLACE",
        "### new/mod.py\n<<<<<<< SEARCH\n=======\ndef f():\n    pass\n\n>>>>>>> REPLACE",
    ])
    edits = parse_search_replace(response)
    new = apply_search_replace(old, edits.blocks, "agentless").new_contents
    assert new["b.py"] == "no newline\nat end, changed"
    patch = git_diff(old, new)
    assert "new file mode 100644\n--- /dev/null\n+++ b/new/mod.py\n" in patch
    assert "\\ No newline at end of file" in patch
    assert git_apply(tmp_path, old, patch) == {**old, **new}


@requires_git
def test_git_diff_newline_only_changes(tmp_path):
    old = {"x.py": "a\nb"}
    for new in ["a\nb\n", "a\nc", "", "z\na\nb"]:
        patch = git_diff(old, {"x.py": new})
        assert git_apply(tmp_path / "r", old, patch) == {"x.py": new}
    assert git_diff(old, {"x.py": "a\nb"}) == ""


_GIT_LINES = st.sampled_from(["a", "b", "c", "", "  d", "e\r"])


@requires_git
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_GIT_LINES, max_size=12), st.lists(_GIT_LINES, max_size=12),
       st.booleans(), st.booleans())
def test_git_diff_roundtrips_through_git_apply(tmp_path, a, b, a_nl, b_nl):
    old_text = "\n".join(a) + ("\n" if a_nl and a else "")
    new_text = "\n".join(b) + ("\n" if b_nl and b else "")
    patch = git_diff({"f.txt": old_text}, {"f.txt": new_text})
    if old_text == new_text:
        assert patch == ""
        return
    assert git_apply(tmp_path / "r", {"f.txt": old_text}, patch) == {"f.txt": new_text}


# ------------------------------------------------------------------ SoRFT edit reward

CTX = {"a.py": OLD}
ORACLE = {"a.py": OLD.replace("line3\n", "LINE3\n").replace("line4\n", "LINE4\n")}  # gold {3, 4}


def edit_block(search: str, replace: str, path: str = "a.py") -> str:
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"


def test_edit_reward_lines_by_hand():
    assert edit_reward(CTX, ORACLE, edit_block("line3\nline4", "LINE3\nLINE4"))[0] == 1.0
    # Changes lines {3, 5}: tp = 1, |O| = 2, |A| = 2 -> F3 = 10*1/(9*2 + 2) = 1/2.
    response = "thinking...\n" + edit_block("line3", "x") + "\n" + edit_block("line5", "y")
    score, info = edit_reward(CTX, ORACLE, response)
    assert score == 0.5 and (info["tp"], info["n_pred"], info["n_gold"]) == (1, 2, 2)
    # Changes line {3} only: P = 1, R = 1/2 -> F3 = 10/(18 + 1) = 10/19; F1 = 2/3.
    assert Fraction(edit_reward(CTX, ORACLE, edit_block("line3", "x"))[0]).limit_denominator(100) == Fraction(10, 19)
    assert edit_reward(CTX, ORACLE, edit_block("line3", "x"), beta=1.0)[0] == pytest.approx(2 / 3)


def test_edit_reward_zero_cases():
    cases = {
        "": "no_blocks",
        "I would change line 3.": "no_blocks",
        edit_block("line3", "x") + edit_block("nope", "y"): "search_not_found",
        edit_block("ine3", "x"): "search_not_found",  # mid-line
        edit_block("line3", "line3"): "identical_search_replace",
        # Two blocks that undo each other change no line.
        edit_block("line3", "tmp") + edit_block("tmp", "line3"): "empty_edit",
    }
    for response, kind in cases.items():
        score, info = edit_reward(CTX, ORACLE, response)
        assert (score, info["kind"]) == (0.0, kind), response


def test_edit_reward_ignores_reasoning_before_think_close():
    response = "<think>" + edit_block("nope", "x") + "</think>" + edit_block("line3\nline4", "LINE3\nLINE4")
    assert edit_reward(CTX, ORACLE, response)[0] == 1.0


def test_edit_reward_similarity_mode_and_registry():
    response = edit_block("line3", "LINE3")
    score, info = edit_reward(CTX, ORACLE, response, mode="similarity")
    assert 0.0 < score < 1.0 and info["files"][0]["path"] == "a.py"
    meta = {"code_context": CTX, "oracle_new_content": ORACLE}
    assert get_reward("sorft_edit_similarity")(meta, response) == (score, info)
    assert get_reward("sorft_edit")(meta, response) == edit_reward(CTX, ORACLE, response)
    with pytest.raises(ValueError):
        edit_reward(CTX, ORACLE, response, mode="exact")  # type: ignore[arg-type]
