"""Where instances come from: SWE-bench-format files, and read-only access to git repositories.

Pre-patch sources are read straight from the object database (`git ls-tree -r -z` for the file
list, one `git cat-file --batch` call for the contents): nothing is checked out, the user's working
tree, index and HEAD are never touched, and no scratch worktree has to be cleaned up.

Repository lookup for `--repos DIR`: an instance with `repo = "owner/name"` is read from
`DIR/owner__name` (the SWE-bench image layout) if that directory exists, else from `DIR/name`.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

from swe_rl_jax.data.records import iter_jsonl

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch")
# Regular files only: symlinks (120000) hold a target path and gitlinks (160000) a commit.
_REGULAR_MODES = (b"100644", b"100755")
# Variables that would point git at another repository than the one we name with -C.
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES")
_TREE_CACHE_SIZE = 8


class InputError(ValueError):
    """The instances file or a CLI input is unusable; the message names the file, line and field."""


class GitError(RuntimeError):
    """A git command failed; the message holds git's own explanation."""


@dataclasses.dataclass(frozen=True)
class Instance:
    """One (issue, repository at base commit, patch) triple, SWE-bench field names."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str = ""
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    created_at: str = ""
    source: str = "swe-bench"  # or "git-history" for mined commits


def _test_list(value: Any, where: str, field: str) -> tuple[str, ...]:
    """FAIL_TO_PASS / PASS_TO_PASS: SWE-bench stores them as JSON-encoded strings."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: field {field!r} is a string but not a JSON list: {e}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: field {field!r} must be a list of test names")
    return tuple(value)


def instance_from_dict(data: Any, where: str) -> Instance:
    """Validates one SWE-bench object; `where` ("file:line") prefixes every error."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    for field in REQUIRED_FIELDS:
        if field not in data:
            raise InputError(f"{where}: missing field {field!r}")
        if not isinstance(data[field], str):
            raise InputError(f"{where}: field {field!r} must be a string, got {type(data[field]).__name__}")
    for field in ("instance_id", "repo"):
        if not data[field].strip():
            raise InputError(f"{where}: field {field!r} is empty")
    return Instance(
        instance_id=data["instance_id"],
        repo=data["repo"],
        base_commit=data["base_commit"].strip(),
        problem_statement=data["problem_statement"],
        patch=data["patch"],
        test_patch=data.get("test_patch") or "",
        fail_to_pass=_test_list(data.get("FAIL_TO_PASS"), where, "FAIL_TO_PASS"),
        pass_to_pass=_test_list(data.get("PASS_TO_PASS"), where, "PASS_TO_PASS"),
        created_at=str(data.get("created_at") or ""),
    )


def load_instances(path: str | Path, require_patch: bool = True) -> list[Instance]:
    """Reads a JSON array or a JSONL file of SWE-bench instances, in file order.

    `require_patch=False` is for inference (`resolve`): a missing or null `patch` reads as "".
    """
    path = Path(path)

    def parse(item: Any, where: str) -> Instance:
        if not require_patch and isinstance(item, dict):
            item = {**item, "patch": item.get("patch") or ""}
        return instance_from_dict(item, where)

    if not path.is_file():
        raise InputError(f"instances file not found: {path}")
    with path.open("rb") as f:
        is_array = f.read(1024).lstrip().startswith(b"[")
    if not is_array:
        return [parse(item, f"{path}:{lineno}") for lineno, item in iter_jsonl(path, InputError)]
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: malformed JSON array: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text: {e}") from None
    return [parse(item, f"{path}[{i}]") for i, item in enumerate(items)]


class RepoLocator:
    """Maps an instance's `repo` to a local clone: explicit paths first, then `repos_dir`."""

    def __init__(self, repos_dir: str | Path | None = None, explicit: Mapping[str, Path] | None = None):
        self.repos_dir = Path(repos_dir) if repos_dir is not None else None
        self.explicit = dict(explicit or {})

    def find(self, repo: str) -> Path | None:
        if repo in self.explicit:
            return self.explicit[repo]
        if self.repos_dir is None:
            return None
        owner_name = repo.replace("/", "__")
        for candidate in (self.repos_dir / owner_name, self.repos_dir / repo.rsplit("/", 1)[-1]):
            if candidate.is_dir():
                return candidate
        return None


def run_git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """stdout of `git -C repo args...`; raises GitError with git's stderr on failure.

    Repository discovery stops at `repo`: a plain directory inside some other checkout (say, a
    missing clone under a `--repos` directory that lives in the user's project) is not a repository.
    """
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECTS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_CEILING_DIRECTORIES"] = str(Path(repo).resolve().parent)
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, env=env, check=False)
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"
        raise GitError(f"git {' '.join(args[:3])} in {repo}: {message}")
    return proc.stdout


class GitRepo:
    """Read-only access to the objects of one local repository."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        run_git(self.path, "rev-parse", "--git-dir")  # fails fast on a directory that is not a repo
        self._trees: collections.OrderedDict[str, tuple[dict[str, str], frozenset[str]]] = collections.OrderedDict()

    def resolve(self, rev: str) -> str | None:
        """The full commit id of `rev`, or None when the repository has no such commit."""
        if not rev or rev.startswith("-"):
            return None
        try:
            out = run_git(self.path, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        except GitError:
            return None
        return out.decode().strip() or None

    def tree(self, commit: str) -> dict[str, str]:
        """path → blob id of every regular file at `commit` (paths that are not UTF-8 are left out)."""
        return self._listing(commit)[0]

    def links(self, commit: str) -> frozenset[str]:
        """The paths at `commit` that are symlinks or submodules (an edit must not write through them)."""
        return self._listing(commit)[1]

    def _listing(self, commit: str) -> tuple[dict[str, str], frozenset[str]]:
        if commit in self._trees:
            self._trees.move_to_end(commit)
            return self._trees[commit]
        out = run_git(self.path, "ls-tree", "-r", "-z", "--full-tree", commit)
        files: dict[str, str] = {}
        links: set[str] = set()
        for entry in out.split(b"\0"):
            if not entry:
                continue
            meta, _, raw_path = entry.partition(b"\t")
            mode, kind, blob = meta.split(b" ")
            try:
                path = raw_path.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if kind == b"blob" and mode in _REGULAR_MODES:
                files[path] = blob.decode()
            else:
                links.add(path)
        self._trees[commit] = files, frozenset(links)
        if len(self._trees) > _TREE_CACHE_SIZE:
            self._trees.popitem(last=False)
        return self._trees[commit]

    def read_blobs(self, blob_ids: Iterable[str]) -> dict[str, bytes]:
        """Contents of the given blobs, fetched with a single `git cat-file --batch`."""
        ids = sorted(set(blob_ids))
        if not ids:
            return {}
        out = run_git(self.path, "cat-file", "--batch", input="".join(i + "\n" for i in ids).encode())
        blobs: dict[str, bytes] = {}
        pos = 0
        for _ in ids:
            end = out.index(b"\n", pos)
            header = out[pos:end].split(b" ")
            pos = end + 1
            if len(header) != 3:
                raise GitError(f"cat-file in {self.path}: object {header[0].decode()} is missing")
            size = int(header[2])
            blobs[header[0].decode()] = out[pos:pos + size]
            pos += size + 1
        return blobs


class Snapshot:
    """The files of one repository at one commit, read lazily and cached by path."""

    def __init__(self, repo: GitRepo, commit: str):
        self.repo = repo
        self.commit = commit
        self.files = repo.tree(commit)
        self.links = repo.links(commit)
        self._bytes: dict[str, bytes] = {}

    def read_bytes(self, paths: Iterable[str]) -> dict[str, bytes]:
        """Contents of the given paths that exist at the commit."""
        wanted = [p for p in paths if p in self.files and p not in self._bytes]
        blobs = self.repo.read_blobs(self.files[p] for p in wanted)
        for p in wanted:
            self._bytes[p] = blobs[self.files[p]]
        return {p: self._bytes[p] for p in paths if p in self._bytes}

    def read_text(self, paths: Iterable[str]) -> dict[str, str | None]:
        """UTF-8 contents of the given existing paths; None for a file that is not UTF-8."""
        out: dict[str, str | None] = {}
        for path, data in self.read_bytes(list(paths)).items():
            try:
                out[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                out[path] = None
        return out
