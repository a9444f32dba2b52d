"""Where instances come from: SWE-bench-format files, and read-only access to git repositories.

Instance files are JSON arrays, JSONL, or Parquet (the format of dataset hubs), read by one
loader, `load_instances`. Exports that name a field differently are read through `FIELD_ALIASES`
(e.g. `golden_patch` for `patch`) or an explicit `{field: column}` mapping (`--field
patch=golden_patch`), which wins over the aliases.

Pre-patch sources are read straight from the object database (`git ls-tree -r -z` for the file
list, one `git cat-file --batch` call for the contents): nothing is checked out, the user's working
tree, index and HEAD are never touched, and no scratch worktree has to be cleaned up.

Repository lookup for `--repos DIR`: an instance with `repo = "owner/name"` is read from the first
of `DIR/owner__name` (the SWE-bench image layout), `DIR/owner/name` (a tree of clones), `DIR/name`
that exists, each also tried with a `.git` suffix (bare clones); a clone, a bare clone or a
worktree all work.
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
OPTIONAL_FIELDS = ("test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "created_at", "version",
                   "environment_setup_commit", "requirements", "test_cmd", "related_files")
# Other names that real exports use for a field; the canonical name wins when both are present.
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "patch": ("golden_patch", "gold_patch"),
    "FAIL_TO_PASS": ("fail_to_pass",),
    "PASS_TO_PASS": ("pass_to_pass",),
}
REPOS_LAYOUT = "<owner>__<name> or <owner>/<name> (a clone, bare clone or worktree; <name>.git works too)"
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
    # Test execution (harness/): which environment spec applies, and per-instance overrides of it.
    version: str = ""
    environment_setup_commit: str = ""
    requirements: tuple[str, ...] = ()  # pip requirement strings
    test_cmd: str = ""  # the command that runs the tests (test files are appended)
    # Context files chosen upstream (`curate`: a policy or the import heuristic); the SWE-RL task
    # shows these instead of ranking its own (data/tasks.py).
    related_files: tuple[str, ...] = ()


def _string_list(value: Any, where: str, field: str) -> tuple[str, ...]:
    """FAIL_TO_PASS / PASS_TO_PASS (SWE-bench stores them as JSON-encoded strings), related_files."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: field {field!r} is a string but not a JSON list: {e}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: field {field!r} must be a list of strings")
    return tuple(value)


def check_field_map(fields: Mapping[str, str]) -> None:
    """`{canonical field: column of the export}`: the keys must be instance fields."""
    known = REQUIRED_FIELDS + OPTIONAL_FIELDS
    for field, column in fields.items():
        if field not in known:
            raise InputError(f"--field {field}={column}: {field!r} is not an instance field; "
                             f"known: {', '.join(known)}")


def canonical_fields(data: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, Any]:
    """`data` with each instance field filled from its explicit column (`fields`), else from its
    first alias present, unless it is there under its own name."""
    out = dict(data)
    for field in REQUIRED_FIELDS + OPTIONAL_FIELDS:
        if field in fields:
            if fields[field] in data:
                out[field] = data[fields[field]]
            continue
        if field not in out:
            for alias in FIELD_ALIASES.get(field, ()):
                if alias in data:
                    out[field] = data[alias]
                    break
    return out


def _requirements(value: Any, where: str) -> tuple[str, ...]:
    """`requirements`: a list of pip requirement strings, or one string of them, a line each."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = [line.strip() for line in value.splitlines()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: field 'requirements' must be a list of pip requirement strings")
    return tuple(v for v in value if v and not v.startswith("#"))


def instance_from_dict(data: Any, where: str) -> Instance:
    """Validates one SWE-bench object (canonical field names); `where` ("file:line") prefixes every error."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    for field in REQUIRED_FIELDS:
        if field not in data:
            aliases = FIELD_ALIASES.get(field, ())
            hint = f" (nor {' or '.join(repr(a) for a in aliases)})" if aliases else ""
            raise InputError(f"{where}: missing field {field!r}{hint}; map another column with "
                             f"--field {field}=COLUMN")
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
        fail_to_pass=_string_list(data.get("FAIL_TO_PASS"), where, "FAIL_TO_PASS"),
        pass_to_pass=_string_list(data.get("PASS_TO_PASS"), where, "PASS_TO_PASS"),
        created_at=str(data.get("created_at") or ""),
        version=str(data.get("version") or ""),
        environment_setup_commit=str(data.get("environment_setup_commit") or ""),
        requirements=_requirements(data.get("requirements"), where),
        test_cmd=str(data.get("test_cmd") or ""),
        related_files=_string_list(data.get("related_files"), where, "related_files"),
    )


def _rows(path: Path) -> Iterable[tuple[str, Any]]:
    """(where, row) of a Parquet file, a JSON array or a JSONL file (decided by suffix and content)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises ArrowInvalid / OSError subclasses on damaged files
            raise InputError(f"{path}: not a readable Parquet file: {e}") from None
        return ((f"{path}[{i}]", row) for i, row in enumerate(rows))
    with path.open("rb") as f:
        is_array = f.read(1024).lstrip().startswith(b"[")
    if not is_array:
        return ((f"{path}:{lineno}", item) for lineno, item in iter_jsonl(path, InputError))
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: malformed JSON array: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text: {e}") from None
    return ((f"{path}[{i}]", item) for i, item in enumerate(items))


def load_instances(path: str | Path, require_patch: bool = True,
                   fields: Mapping[str, str] | None = None) -> list[Instance]:
    """Reads SWE-bench instances from a JSON array, a JSONL file or a Parquet file, in file order.

    `fields` maps instance fields to the export's column names (see the module docstring).
    `require_patch=False` is for inference (`resolve`): a missing or null `patch` reads as "".
    """
    path = Path(path)
    fields = dict(fields or {})
    check_field_map(fields)
    if not path.is_file():
        raise InputError(f"instances file not found: {path}")
    out = []
    for where, item in _rows(path):
        if isinstance(item, dict):
            item = canonical_fields(item, fields)
            if not require_patch:
                item["patch"] = item.get("patch") or ""
        out.append(instance_from_dict(item, where))
    return out


class RepoLocator:
    """Maps an instance's `repo` to a local clone: explicit paths first, then `repos_dir`."""

    def __init__(self, repos_dir: str | Path | None = None, explicit: Mapping[str, Path] | None = None):
        self.repos_dir = Path(repos_dir) if repos_dir is not None else None
        self.explicit = dict(explicit or {})

    def candidates(self, repo: str) -> list[Path]:
        """Where `repo` ("owner/name") may live under `repos_dir`, in lookup order."""
        if self.repos_dir is None:
            return []
        owner, _, name = repo.rpartition("/")
        names = [f"{owner}__{name}", f"{owner}/{name}", name] if owner else [name]
        return [self.repos_dir / (n + suffix) for n in names for suffix in ("", ".git")]

    def find(self, repo: str) -> Path | None:
        if repo in self.explicit:
            return self.explicit[repo]
        return next((c for c in self.candidates(repo) if c.is_dir()), None)

    def require_some(self, repos: Iterable[str]) -> None:
        """InputError naming the expected layout when none of `repos` is found: a wrong layout,
        not a few missing clones (those are counted per instance and reported)."""
        names = sorted(set(repos))
        if not names or any(self.find(r) is not None for r in names):
            return
        example = self.candidates(names[0])
        raise InputError(f"none of the {len(names)} repositories the instances name is under {self.repos_dir}: "
                         f"expected {REPOS_LAYOUT}, e.g. {example[0]} or {example[2]}")


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
