"""Where instances come from: SWE-bench-format files, and read-only access to git repositories.

Instance files are JSON arrays, JSONL, or Parquet (the format of dataset hubs), read as a stream
by one loader, `iter_instances` (JSONL a line at a time, Parquet a batch of rows at a time, a JSON
array an element at a time), or whole by `load_instances`. Exports that name a field differently are read through `FIELD_ALIASES`
(e.g. `golden_patch` for `patch`) or an explicit `{field: column}` mapping (`--field
patch=golden_patch`), which wins over the aliases.

Pre-patch sources are read straight from the object database (`git ls-tree -r -z` for the file
list, one long-running `git cat-file --batch` per repository for the contents): nothing is checked out, the user's working
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
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch")
OPTIONAL_FIELDS = ("test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "created_at", "version",
                   "environment_setup_commit", "requirements", "test_cmd", "log_format", "image", "related_files",
                   "unstable_tests")
# Other names that real exports use for a field; the canonical name wins when both are present.
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "patch": ("golden_patch", "gold_patch"),
    "FAIL_TO_PASS": ("fail_to_pass",),
    "PASS_TO_PASS": ("pass_to_pass",),
    "image": ("image_name", "docker_image"),  # SWE-smith's; SWE-rebench's and R2E-Gym's
}
# The log parsers of SWE-bench's harness (and its forks: SWE-rebench's rows name one in
# `install_config.log_parser`) that read a log as one of the harness's formats does (logformats.py).
LOG_PARSER_FORMATS = {"parse_log_pytest": "pytest", "parse_log_pytest_options": "pytest",
                      "parse_log_pytest_v2": "pytest", "parse_log_astropy": "pytest", "parse_log_django": "django",
                      "parse_log_sympy": "sympy", "parse_log_matplotlib": "pytest", "parse_log_seaborn": "pytest",
                      "parse_log_sphinx": "pytest", "parse_log_xarray": "pytest", "parse_log_requests": "pytest",
                      "parse_log_pylint": "pytest", "parse_log_scikit": "pytest"}
REPOS_LAYOUT = "<owner>__<name>, <owner>/<name> or <name> (a clone, bare clone or worktree; a .git suffix works too)"
# Regular files only: symlinks (120000) hold a target path and gitlinks (160000) a commit.
_REGULAR_MODES = (b"100644", b"100755")
# Variables that would point git at another repository than the one we name with -C.
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES")
_TREE_CACHE_SIZE = 4  # file listings kept per repository
_SNAPSHOT_CACHE_SIZE = 2  # snapshots (with their file contents) kept per repository
# What is derived from one file version (its outline note, its BM25 terms) is kept for this many
# (path, blob) pairs per repository: consecutive commits share nearly every file.
_FILE_MEMO_SIZE = 20_000


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
    log_format: str = ""  # how its output reads (specs.LOG_FORMATS, or a SWE-bench parser's name); "" = the spec's
    image: str = ""  # the container image of its environment (harness/images.py); "" = SWE-bench's naming rule
    # Tests validation found unstable (harness/stability.py), moved out of FAIL_TO_PASS and PASS_TO_PASS.
    unstable_tests: tuple[str, ...] = ()
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


_MISSING = object()


def column(data: Mapping[str, Any], name: str) -> Any:
    """The value of column `name` of a row, or of a nested one when no column has the name:
    `install_config.test_cmd` (a dict column, or one stored as a JSON string); _MISSING when absent."""
    if name in data:
        return data[name]
    value: Any = data
    for part in name.split("."):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return _MISSING
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def canonical_fields(data: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, Any]:
    """`data` with each instance field filled from its explicit column (`fields`; a dotted name
    reaches into a nested column), else from its first alias present, unless it is there under
    its own name."""
    out = dict(data)
    for field in REQUIRED_FIELDS + OPTIONAL_FIELDS:
        if field in fields:
            value = column(data, fields[field])
            if value is not _MISSING:
                out[field] = value
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


def _command(value: Any, where: str) -> str:
    """`test_cmd`: a string, or a list of commands (SWE-rebench's later rows) whose last one runs the
    tests and is the one whose output its harness parses."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value[-1]
    if value is None or isinstance(value, str):
        return value or ""
    raise InputError(f"{where}: field 'test_cmd' must be a string or a list of strings")


def _log_format(value: Any, where: str) -> str:
    from swe_rl_jax.harness.logformats import PARSERS

    name = str(value or "")
    name = LOG_PARSER_FORMATS.get(name, name)
    if name and name not in PARSERS:
        raise InputError(f"{where}: field 'log_format' names no log format the harness reads: {value!r}; known: "
                         f"{', '.join([*PARSERS, *LOG_PARSER_FORMATS])}")
    return name


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
        test_cmd=_command(data.get("test_cmd"), where),
        log_format=_log_format(data.get("log_format"), where),
        image=str(data.get("image") or ""),
        unstable_tests=_string_list(data.get("unstable_tests"), where, "unstable_tests"),
        related_files=_string_list(data.get("related_files"), where, "related_files"),
    )


_PARQUET_BATCH_ROWS = 256  # rows decoded at a time from a Parquet file
_JSON_CHUNK_CHARS = 1 << 20  # characters read at a time from a JSON array


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, value) per non-blank line; a malformed line yields its InputError as the value and
    reading goes on with the next line."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                yield where, InputError(f"{where}: not UTF-8 text: {e}")
            except json.JSONDecodeError as e:
                yield where, InputError(f"{where}: malformed JSON: {e.msg} (column {e.colno})")


def _json_array_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, value) per element of a JSON array, decoded one element at a time so that only the
    current element is held (json.loads would hold the whole file and every object)."""
    decoder = json.JSONDecoder()
    with path.open(encoding="utf-8") as f:
        buf, pos, eof, index = "", 0, False, 0

        def more() -> bool:
            nonlocal buf, pos, eof
            chunk = f.read(_JSON_CHUNK_CHARS)
            buf, pos, eof = buf[pos:] + chunk, 0, not chunk
            return bool(chunk)

        def skip_space() -> str:  # the next non-blank character, "" at the end of the file
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buf) or not more():
                    return buf[pos] if pos < len(buf) else ""

        try:
            if skip_space() != "[":
                raise InputError(f"{path}: expected a JSON array")
            pos += 1
            while True:
                c = skip_space()
                if c == "]":
                    return
                if index:
                    if c != ",":
                        raise InputError(f"{path}[{index}]: malformed JSON array: expected ',' or ']'")
                    pos += 1
                    skip_space()
                while True:
                    try:
                        value, end = decoder.raw_decode(buf, pos)
                    except json.JSONDecodeError as e:
                        if not more():  # an element cut at the chunk's end decodes once more is read
                            raise InputError(f"{path}[{index}]: malformed JSON array: {e.msg}") from None
                        continue
                    if end == len(buf) and not eof and not isinstance(value, (dict, list, str)):
                        more()  # a number at the chunk's end may go on in the next chunk
                        continue
                    break
                yield f"{path}[{index}]", value
                index, pos = index + 1, end
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not UTF-8 text: {e}") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) of a Parquet file, decoded a batch of rows at a time."""
    import pyarrow.parquet as pq

    index = 0
    try:  # pyarrow raises ArrowInvalid / OSError subclasses on damaged files
        batches = pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH_ROWS)
        for batch in batches:
            rows = batch.to_pylist()
            for row in rows:
                yield f"{path}[{index}]", row
                index += 1
    except Exception as e:
        raise InputError(f"{path}: not a readable Parquet file: {e}") from None


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) of a Parquet file, a JSON array or a JSONL file (decided by suffix and content),
    read as a stream; a malformed JSONL line comes as its InputError."""
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    with path.open("rb") as f:
        is_array = f.read(1024).lstrip().startswith(b"[")
    return _json_array_rows(path) if is_array else _jsonl_rows(path)


def iter_instances(path: str | Path, require_patch: bool = True,
                   fields: Mapping[str, str] | None = None) -> Iterator[Instance | InputError]:
    """The instances of a JSON array, a JSONL file or a Parquet file, in file order, read as a
    stream. A row that is not a valid instance comes as the InputError naming its file and line,
    and reading goes on; an unreadable file raises InputError (see `load_instances`)."""
    path = Path(path)
    fields = dict(fields or {})
    check_field_map(fields)
    if not path.is_file():
        raise InputError(f"instances file not found: {path}")
    for where, item in _rows(path):
        if isinstance(item, InputError):
            yield item
            continue
        if isinstance(item, dict):
            item = canonical_fields(item, fields)
            if not require_patch:
                item["patch"] = item.get("patch") or ""
        try:
            yield instance_from_dict(item, where)
        except InputError as e:
            yield e


def load_instances(path: str | Path, require_patch: bool = True,
                   fields: Mapping[str, str] | None = None) -> list[Instance]:
    """Reads SWE-bench instances from a JSON array, a JSONL file or a Parquet file, in file order;
    the first bad row raises its InputError.

    `fields` maps instance fields to the export's column names (see the module docstring).
    `require_patch=False` is for inference (`resolve`): a missing or null `patch` reads as "".
    """
    out = []
    for item in iter_instances(path, require_patch, fields):
        if isinstance(item, InputError):
            raise item
        out.append(item)
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


def _git_env(repo: Path) -> dict[str, str]:
    """The environment of every git call: discovery stops at `repo` (a plain directory inside some
    other checkout, say a missing clone under a `--repos` directory that lives in the user's
    project, is not a repository), no variable redirects git elsewhere, no prompt."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECTS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_CEILING_DIRECTORIES"] = str(Path(repo).resolve().parent)
    return env


def run_git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """stdout of `git -C repo args...`; raises GitError with git's stderr on failure."""
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, env=_git_env(repo),
                          check=False)
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"
        raise GitError(f"git {' '.join(args[:3])} in {repo}: {message}")
    return proc.stdout


class _BlobReader:
    """One long-running `git cat-file --batch` serving every blob read of a repository: a build
    reads thousands of files per commit (the tree outline, retrieval), and a process per read
    cost more than the reading."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.proc: subprocess.Popen | None = None

    def read(self, ids: list[str]) -> dict[str, bytes]:
        if not ids:
            return {}
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(["git", "-C", str(self.repo), "cat-file", "--batch"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_git_env(self.repo))
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # Writing every id first could fill both pipes and deadlock; a request at a time cannot.
        blobs: dict[str, bytes] = {}
        for blob in ids:
            try:
                self.proc.stdin.write(blob.encode() + b"\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                raise GitError(f"cat-file in {self.repo}: git exited") from None
            header = self.proc.stdout.readline().split()
            if len(header) != 3:
                if not header:
                    raise GitError(f"cat-file in {self.repo}: git exited")
                raise GitError(f"cat-file in {self.repo}: object {header[0].decode()} is missing")
            size = int(header[2])
            blobs[header[0].decode()] = self.proc.stdout.read(size)
            self.proc.stdout.read(1)  # the newline after the contents
        return blobs

    def close(self) -> None:
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
            self.proc.wait()
            self.proc = None


class GitRepo:
    """Read-only access to the objects of one local repository."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        run_git(self.path, "rev-parse", "--git-dir")  # fails fast on a directory that is not a repo
        self._trees: collections.OrderedDict[str, tuple[dict[str, str], frozenset[str]]] = collections.OrderedDict()
        self._snapshots: collections.OrderedDict[str, Snapshot] = collections.OrderedDict()
        self._file_memo: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
        self._blobs = _BlobReader(self.path)
        weakref.finalize(self, self._blobs.close)  # the git process ends with its repository

    def close(self) -> None:
        """Ends the `git cat-file` process and drops the cached trees (a later read starts again)."""
        self._blobs.close()
        self._trees.clear()
        self._snapshots.clear()
        self._file_memo.clear()

    def per_file(self, kind: str, snapshot: Snapshot, paths: list[str],
                 compute: Callable[[str, str | None], Any]) -> dict[str, Any]:
        """path → `compute(path, text)` for `paths` of `snapshot`, each computed once per file
        version (path and blob) while among the last `_FILE_MEMO_SIZE` used; the files not yet
        seen are read in one batch."""
        keys = {p: (kind, p, snapshot.files[p]) for p in paths}
        texts = snapshot.read_text([p for p in paths if keys[p] not in self._file_memo], keep=False)
        out = {}
        for path in paths:
            key = keys[path]
            if key in self._file_memo:
                self._file_memo.move_to_end(key)
                out[path] = self._file_memo[key]
            else:
                out[path] = self._file_memo[key] = compute(path, texts.get(path))
                if len(self._file_memo) > _FILE_MEMO_SIZE:
                    self._file_memo.popitem(last=False)
        return out

    def snapshot(self, commit: str) -> Snapshot:
        """The snapshot of `commit` (a full commit id), shared by every instance at that commit
        while it is among the last `_SNAPSHOT_CACHE_SIZE` used: what is computed once per commit
        (the outline, the retrieval index) lives on it."""
        if commit in self._snapshots:
            self._snapshots.move_to_end(commit)
        else:
            self._snapshots[commit] = Snapshot(self, commit)
            if len(self._snapshots) > _SNAPSHOT_CACHE_SIZE:
                self._snapshots.popitem(last=False)
        return self._snapshots[commit]

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
        """Contents of the given blobs, read through the repository's one `git cat-file --batch`."""
        return self._blobs.read(sorted(set(blob_ids)))


class Snapshot:
    """The files of one repository at one commit, read lazily and cached by path."""

    def __init__(self, repo: GitRepo, commit: str):
        self.repo = repo
        self.commit = commit
        self.files = repo.tree(commit)
        self.links = repo.links(commit)
        self._bytes: dict[str, bytes] = {}
        self._memo: dict[Any, Any] = {}

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """`compute()` once per snapshot and `key`: what every instance at this commit shares."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def read_bytes(self, paths: Iterable[str], keep: bool = True) -> dict[str, bytes]:
        """Contents of the given paths that exist at the commit; `keep=False` reads without adding
        them to the cache (a pass over every file of the tree)."""
        paths = list(paths)
        wanted = [p for p in paths if p in self.files and p not in self._bytes]
        blobs = self.repo.read_blobs(self.files[p] for p in wanted)
        if keep:
            for p in wanted:
                self._bytes[p] = blobs[self.files[p]]
            return {p: self._bytes[p] for p in paths if p in self._bytes}
        return {p: self._bytes[p] if p in self._bytes else blobs[self.files[p]] for p in paths if p in self.files}

    def read_text(self, paths: Iterable[str], keep: bool = True) -> dict[str, str | None]:
        """UTF-8 contents of the given existing paths; None for a file that is not UTF-8."""
        out: dict[str, str | None] = {}
        for path, data in self.read_bytes(list(paths), keep).items():
            try:
                out[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                out[path] = None
        return out
