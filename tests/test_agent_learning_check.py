"""The learning check's task (tools/checks/agent_learning_check.py) holds what the check relies on: the answer
is in exactly one notes file of the instance's tree, in no earlier commit and not in the task text,
and pytest with git's own `apply` says the hidden test passes with the gold patch and fails without."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "checks"))

from agent_learning_check import make_tasks  # noqa: E402


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _hidden_test_passes(repo: Path, row: dict, patch: str, tmp: Path) -> bool:
    tree = tmp / "tree"
    subprocess.run(["rm", "-rf", str(tree)], check=True)
    tree.mkdir()
    subprocess.run(f"git -C {repo} archive {row['base_commit']} | tar -x -C {tree}", shell=True, check=True)
    for p in (row["test_patch"], patch):
        if p:
            subprocess.run(["git", "apply", "-"], cwd=tree, input=p, text=True, check=True)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *json.loads(row["FAIL_TO_PASS"]),
                          *json.loads(row["PASS_TO_PASS"])], cwd=tree, capture_output=True, text=True)
    return run.returncode == 0


def test_the_answer_is_only_in_its_notes_file_and_the_gold_patch_passes_the_hidden_test(tmp_path):
    instances, specs = make_tasks(tmp_path / "tasks", repos=2, per_repo=3, seed=0)
    rows = [json.loads(line) for line in instances.open()]
    assert len({r["word"] for r in rows}) == 6 and set(json.loads(specs.read_text())) == {"lc/notes0", "lc/notes1"}
    for row in rows:
        repo = tmp_path / "tasks" / "repos" / row["repo"].replace("/", "__")
        base = row["base_commit"]
        files = _git(repo, "ls-tree", "-r", "--name-only", base).split()
        assert [f for f in files if row["word"] in _git(repo, "show", f"{base}:{f}")] == [row["secret_file"]]
        assert row["word"] not in _git(repo, "log", "-p", f"{base}^")  # no earlier commit holds it
        assert row["word"] not in row["problem_statement"]
    row = rows[4]
    repo = tmp_path / "tasks" / "repos" / row["repo"].replace("/", "__")
    assert _hidden_test_passes(repo, row, row["patch"], tmp_path)
    assert not _hidden_test_passes(repo, row, "", tmp_path)
