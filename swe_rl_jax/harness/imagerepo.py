"""The repository an image keeps at its repository path (SWE-bench's `/testbed`), and a run's work tree
made from it (docs/HARNESS.md, "Images").

Git never runs on the image's repository as the harness's user: its configuration and hooks came
with the image, and git obeys them (git(1), SECURITY). It is cloned with `git clone --no-local`
(upload-pack, which restricts what of a repository's configuration it obeys) in the sandbox, as a
user of its own (sandbox.run_on_untrusted_data), once per image and repository path, into the image
cache: `repos/<key>/head.git` (depth 2: the image's HEAD and its parent, to tell the two cases below
apart) and, when no clone of the repository is given, `repos/<key>/full.git` (its history, of which
the history store keeps the base commit and its ancestors, checkout.py). Whatever the image's
history holds after the base commit (SWE-bench removed it from its images in 2025; others may not
have) stays in the cache, out of every run's view.

The work tree (`lay_out`), always with this project's `.git` (checkout.py: nothing after the base
commit, whatever the image's `.git` holds):
- the image's repository is at the base commit, or one commit on it (SWE-bench's images commit their
  set-up's edits, `pre_install` and `install`, as `SWE-bench` on top of the base commit): the image's
  files as they are, tracked, edited, untracked and ignored (build outputs, compiled extensions,
  installed metadata), the index the base commit's, so `git status` shows the set-up's edits as the
  official harness's `git diff <base>` does;
- otherwise (an image per repository, SWE-smith's; an image of another commit): the base commit's
  files, and the image's files at paths the base commit does not track (build outputs).
`.git` entries of the image, at any depth, are never copied; links are copied as links (their text),
never followed; other special files are left out.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Optional

from swe_rl_jax.data.sample import run_isolated_git
from swe_rl_jax.harness.checkout import checkout, tree_entries
from swe_rl_jax.harness.environments import build_once
from swe_rl_jax.harness.images import Image, ImageError
from swe_rl_jax.harness.sandbox import Limits, remove_tree, run_on_untrusted_data

_MARKER = "swe_rl_jax_clone"
_CLONE_LIMITS = Limits(timeout_s=1800.0, memory_mb=8192, file_size_mb=4096)
# The clone's git: no system configuration, and a global one of its own that lets it read a repository
# another user owns (the image's root), which git 2.36+ refuses otherwise.
_CLONE_ENV = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LANG": "C.UTF-8"}


def _key(image: Image) -> str:
    return f"{image.key.split(':', 1)[1]}-{hashlib.sha256(image.repo_path.encode()).hexdigest()[:8]}"


def repository_dir(image: Image) -> Optional[Path]:
    """The host path of the image's repository (its `.git` a real directory), None when it has none."""
    found = image.host_path(image.repo_path)
    if found is None or not found.is_dir():
        return None
    git_dir = found / ".git"
    if not git_dir.is_dir() or git_dir.is_symlink():
        return None
    return found


def _clone(image: Image, source: Path, dest: Path, depth: int) -> None:
    with tempfile.TemporaryDirectory(prefix="image-clone-", dir=dest.parent) as scratch:
        os.chmod(scratch, 0o755)
        out = Path(scratch) / "sandbox" / "out"
        (Path(scratch) / "gitconfig").write_text("[safe]\n\tdirectory = *\n")
        result, out = run_on_untrusted_data(
            ["git", "clone", "--quiet", "--bare", "--no-local", *(["--depth", str(depth)] if depth else []),
             f"file://{source}", "repo.git"],
            readable=[source, Path(scratch) / "gitconfig"], scratch=Path(scratch),
            env={**_CLONE_ENV, "GIT_CONFIG_GLOBAL": str(Path(scratch) / "gitconfig")}, limits=_CLONE_LIMITS)
        if result.returncode != 0:
            raise ImageError("image_failed", f"cloning the repository at {image.repo_path} of image {image.key}: "
                                             f"{result.output.strip()[-1000:]}")
        shutil.move(str(out / "repo.git"), dest)
    for directory, dirs, files in os.walk(dest):  # readable by runs, changed by nobody; links left as they are
        for names, mode in ((dirs, 0o755), (files, 0o444)):
            for name in names:
                if not os.path.islink(os.path.join(directory, name)):
                    os.chmod(os.path.join(directory, name), mode)
    dest.chmod(0o755)
    (dest / _MARKER).write_text(image.key + "\n")


def image_clone(image: Image, full: bool) -> Path:
    """A bare clone of the image's repository in the cache (module docstring): `full`, its history;
    else HEAD and its parent. ImageError(image_failed) when the image has no repository there."""
    source = repository_dir(image)
    if source is None:
        raise ImageError("image_failed", f"image {image.key} has no git repository at {image.repo_path} "
                                         "(give a clone of the repository instead)")
    dest = image.bundle.parents[1] / "repos" / _key(image) / ("full.git" if full else "head.git")
    dest.parent.mkdir(parents=True, exist_ok=True)
    build_once(dest, dest.with_name(dest.name + ".lock"), _MARKER, lambda path: _clone(image, source, path,
                                                                                        0 if full else 2))
    return dest


def image_commits(image: Image) -> tuple[str, ...]:
    """The image repository's HEAD and its first parent (where the image has one): the commits whose
    files the image holds as they are (module docstring). () when it has no repository."""
    if repository_dir(image) is None:
        return ()
    clone = image_clone(image, full=False)
    head = run_isolated_git(clone, "rev-parse", "HEAD").strip()
    try:
        return head, run_isolated_git(clone, "rev-parse", "-q", "--verify", "HEAD^").strip()
    except RuntimeError:  # a root commit, or a shallow clone's boundary
        return (head,)


def _copy_entry(source: Path, target: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISREG(info.st_mode):
        with open(source, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        target.chmod(0o755 if info.st_mode & 0o111 else 0o644)


def copy_files(source: Path, dest: Path, keep: Optional[set[str]] = None) -> None:
    """The files of `source` into `dest` (module docstring): every one, replacing what is there, or
    (`keep`: the paths the base commit tracks) only those at paths `keep` neither names nor lies
    under and whose directories are no tracked file."""
    tracked_dirs = {str(parent) for p in keep for parent in Path(p).parents} if keep is not None else set()
    for directory, dirs, files in os.walk(source):
        rel_dir = os.path.relpath(directory, source)
        for name in sorted(dirs):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            target = dest / rel
            if name == ".git" or (keep is not None and rel in keep):  # a tracked file's place: not the image's
                dirs.remove(name)
                continue
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                target.unlink()
            target.mkdir(exist_ok=True)
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if name == ".git" or (keep is not None and (rel in keep or rel in tracked_dirs)):
                continue
            target = dest / rel
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target)
            _copy_entry(Path(directory) / name, target, os.lstat(Path(directory) / name))


def _remove_missing(source: Path, dest: Path) -> None:
    """Removes from `dest` what `source` lacks (the image deleted a tracked file in its set-up)."""
    for directory, dirs, files in os.walk(dest):
        rel_dir = os.path.relpath(directory, dest)
        if rel_dir == ".git" or rel_dir.startswith(".git/"):
            dirs[:] = []
            continue
        for name in [*dirs, *files]:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel == ".git":
                continue
            if not os.path.lexists(source / rel):
                path = dest / rel
                remove_tree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
                if name in dirs:
                    dirs.remove(name)


def lay_out(image: Image, repo_dir: Path, commit: str, dest: Path, store_root: Path) -> Path:
    """`dest` (which must not exist) as a run's work tree of `commit` in `image` (module docstring);
    returns the history store its repository borrows from."""
    store = checkout(repo_dir, commit, dest, store_root)
    source = image.host_path(image.repo_path)
    if source is None or not source.is_dir():
        return store
    full = run_isolated_git(dest, "rev-parse", "HEAD").strip()
    if full in image_commits(image):
        copy_files(source, dest)
        _remove_missing(source, dest)
    else:
        copy_files(source, dest, keep=set(tree_entries(dest, full)))
    return store
