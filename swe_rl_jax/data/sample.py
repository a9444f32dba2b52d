"""The shipped sample (`data/sample/`): tiny original Python repositories stored as plain files,
turned into real git repositories with reproducible commit ids.

`manifest.json` lists, per repository, the initial commit and the later history commits (each a
diff under `history/`, applied with `git apply`). Every commit has fixed author, committer and
dates, and git runs without system or user configuration, so the commit ids come out the same on
every machine and match the `base_commit` fields of `instances.jsonl`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "data" / "sample"
DEFAULT_AUTHOR = "Sample Maintainer <maintainer@example.org>"
DEFAULT_DATE = "2024-01-01T09:00:00+00:00"


def _split_identity(identity: str) -> tuple[str, str]:
    name, _, email = identity.partition(" <")
    return name, email.rstrip(">")


def isolated_git_env(repo: Path, identity: str = DEFAULT_AUTHOR, date: str = DEFAULT_DATE) -> dict[str, str]:
    """The whole environment of `run_isolated_git`: no system or user configuration, a fixed identity."""
    name, email = _split_identity(identity)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": date,
        "LC_ALL": "C",
    }


def run_isolated_git(repo: Path, *args: str, identity: str = DEFAULT_AUTHOR, date: str = DEFAULT_DATE,
                     index_file: str = "", stdin: str | None = None) -> str:
    """git without any system or user configuration (no signing, hooks, autocrlf, templates),
    with a fixed identity and date: the same inputs give the same commit ids everywhere.
    `index_file`: an index other than the repository's own (GIT_INDEX_FILE); `stdin`: git's input."""
    env = isolated_git_env(repo, identity, date)
    if index_file:
        env["GIT_INDEX_FILE"] = index_file
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, encoding="utf-8", env=env,
                          input=stdin, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    run_isolated_git(path, "init", "-q", "--template=", "-b", "main")
    return path


def commit_all(repo: Path, message: str, identity: str = DEFAULT_AUTHOR, date: str = DEFAULT_DATE) -> str:
    """Commits the whole working tree; returns the commit id."""
    run_isolated_git(repo, "add", "-A")
    run_isolated_git(repo, "commit", "-q", "--allow-empty", "-m", message, identity=identity, date=date)
    return run_isolated_git(repo, "rev-parse", "HEAD").strip()


def write_files(repo: Path, files: Mapping[str, str | bytes | None]) -> None:
    """Writes files under `repo`: str as UTF-8 text, bytes as is; None deletes the file."""
    for path, content in files.items():
        target = repo / path
        if content is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_bytes(content.encode("utf-8"))


def take_patch(repo: Path) -> str:
    """The `diff --git` patch from HEAD to the working tree (new files and renames included);
    the working tree is then reset to HEAD. How sample and test instances get their patches."""
    run_isolated_git(repo, "add", "-A")
    patch = run_isolated_git(repo, "diff", "--cached", "--no-color", "-M", "--src-prefix=a/", "--dst-prefix=b/")
    run_isolated_git(repo, "reset", "-q", "--hard")
    run_isolated_git(repo, "clean", "-qfd")
    return patch


def load_manifest(sample_dir: Path = SAMPLE_DIR) -> dict:
    return json.loads((sample_dir / "manifest.json").read_text(encoding="utf-8"))


def make_sample_repos(dest: str | Path, sample_dir: Path = SAMPLE_DIR) -> dict[str, Path]:
    """Creates every sample repository under `dest/<owner>__<name>` (the `--repos` layout);
    returns repo name → path."""
    dest = Path(dest)
    out = {}
    for spec in load_manifest(sample_dir)["repos"]:
        repo = dest / spec["repo"].replace("/", "__")
        if repo.exists():
            shutil.rmtree(repo)
        # Byte-code caches appear when someone runs a sample's own code; they are not part of it.
        shutil.copytree(sample_dir / "repos" / spec["dir"], repo,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        init_repo(repo)
        commit_all(repo, spec["message"], spec.get("author", DEFAULT_AUTHOR), spec.get("date", DEFAULT_DATE))
        for step in spec.get("history", []):
            run_isolated_git(repo, "apply", "--whitespace=nowarn", str((sample_dir / step["patch"]).resolve()))
            commit_all(repo, step["message"], step["author"], step["date"])
        out[spec["repo"]] = repo
    return out
