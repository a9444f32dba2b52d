"""Container images as read-only root file systems for the sandbox (docs/HARNESS.md, "Images").

An image comes as an OCI image layout directory, an OCI archive or a `docker save` archive, found
under the user's images directory by its name (`find_image`): the name a dataset's row gives
(`image_name`, `docker_image`: `Instance.image`) or SWE-bench's rule from the instance id
(`swebench_image_name`). Registries are reached by the user's own `skopeo copy` on a machine that
can (`fetch_command` writes it); nothing here touches the network.

The cache (`ImageCache`, under the environment cache's `images/`):
- `layout/`: one OCI image layout that every image is copied into first (`skopeo copy`, which turns a
  `docker save` archive into OCI and stores each blob once: images that share a layer share its
  blob), tagged by manifest digest (`sha256_<hex>`);
- `unpacked/<hex>/`: the image unpacked by `umoci unpack` (as root: owners, modes, device nodes and
  hard links as the layers say, whiteouts applied), built once behind a lock as the environments are
  (environments.build_once), `rootfs/` plus `image.json` (the config's Env, WorkingDir, User, the
  layers, the unpack's times). umoci writes every image whole; util-linux `hardlink` then links its
  files to the identical ones of the unpacked image that shares the most leading layers with it
  (`_share_files`), so a second image of a repository costs its own layer (docs/BENCHMARKS.md).
  After unpacking, whatever the owner may read or search, others may too (`_open_to_others`): runs
  are users of their own, never the image's root, and environments under a 0700 `/root` (pyenv,
  uv) must still run; the sandbox binds the tree read-only and `nosuid`, `nodev`, so nothing a run
  does changes it, and no file two images share is changed through one of them;
- `sources/<key>`: which manifest a source file or directory (by path, size, time and inode) was
  copied as, so a source is copied once.

Runs never write the cache: the sandbox binds `rootfs/` read-only (sandbox.ImageRoot).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Iterator, Optional

from swe_rl_jax.data.sources import Instance
from swe_rl_jax.harness.environments import build_once
from swe_rl_jax.harness.sandbox import ImageRoot

READY_MARKER = ".swe_rl_jax_image_ready_v1"  # the unpacked layout of this module's version
SWEBENCH_NAMESPACE = "swebench"
DEFAULT_REPO_PATH = "/testbed"  # where SWE-bench's, SWE-Gym's, SWE-smith's, SWE-rebench's and R2E-Gym's images keep it
DEFAULT_CONDA_ENV = "testbed"
# Docker's PATH for an image whose config sets none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_TOOL_TIMEOUT_S = 3600.0  # skopeo and umoci on images of several GB
_ERROR_TAIL = 1500
_ARCHIVE_KINDS = {"oci-layout": "oci-archive", "manifest.json": "docker-archive"}


class ImageError(RuntimeError):
    """An image that cannot be used (`kind`: missing_image, image_failed)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """Image mode's settings (`--images DIR` and the dataset's conventions, docs/HARNESS.md)."""

    dir: str = ""  # the directory of images; "" = image mode off
    namespace: str = SWEBENCH_NAMESPACE  # of SWE-bench's naming rule, for rows that name no image
    repo_path: str = DEFAULT_REPO_PATH
    conda_env: str = DEFAULT_CONDA_ENV  # the conda environment commands run in, where the image has it
    cache: str = ""  # where images are unpacked; "" = the environment cache's images/

    def __post_init__(self) -> None:
        from swe_rl_jax.config import require

        require(self.repo_path.startswith("/") and ".." not in self.repo_path.split("/")
                and self.repo_path.rstrip("/") != "", "images.repo_path",
                f"must be an absolute path below / in the image, not {self.repo_path!r}")
        object.__setattr__(self, "repo_path", "/" + self.repo_path.strip("/"))
        for name in ("dir", "cache"):
            if getattr(self, name):
                object.__setattr__(self, name, os.path.abspath(getattr(self, name)))

    @property
    def enabled(self) -> bool:
        return bool(self.dir)

    def cache_root(self, default: Path) -> Path:
        """The image cache: `cache`, else `default` (the environment cache's images/)."""
        return Path(self.cache) if self.cache else default


def swebench_image_name(instance_id: str, namespace: str = SWEBENCH_NAMESPACE, arch: str = "x86_64",
                        tag: str = "latest") -> str:
    """SWE-bench's name of an instance's evaluation image (its harness's `instance_image_key`: the
    id lower-cased, `__` written `_1776_`), e.g. `swebench/sweb.eval.x86_64.sympy_1776_sympy-11897:latest`."""
    return f"{namespace}/sweb.eval.{arch}.{instance_id.lower()}:{tag}".replace("__", "_1776_")


def _split_name(name: str) -> tuple[str, str]:
    """(repository, tag) of an image name; the tag defaults to `latest` (a digest stays in the repository)."""
    if "@" in name:
        return name, ""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = name.rsplit(":", 1)
        return repository, tag
    return name, "latest"


def _has_registry(repository: str) -> bool:
    first = repository.split("/", 1)[0]
    return "/" in repository and ("." in first or ":" in first or first == "localhost")


def _reference_names(name: str) -> list[str]:
    """The names a layout's `org.opencontainers.image.ref.name` may give the image: as written, with
    and without Docker Hub's registry, with its tag."""
    repository, tag = _split_name(name)
    full = f"{repository}:{tag}" if tag else repository
    bare = re.sub(r"^(docker\.io|index\.docker\.io|registry-1\.docker\.io)/", "", full)
    return list(dict.fromkeys([name, full, bare, f"docker.io/{bare}"]))


def registry_reference(name: str) -> str:
    """`docker://` reference of an image name (Docker Hub when the name names no registry)."""
    repository, tag = _split_name(name)
    full = f"{repository}:{tag}" if tag else repository
    return f"docker://{full if _has_registry(repository) else 'docker.io/' + full}"


def fetch_command(name: str, images_dir: str | Path) -> str:
    """The `skopeo copy` that puts image `name` into `images_dir` (a shared OCI layout), on a machine
    that reaches the registry."""
    repository, tag = _split_name(name)
    return f"skopeo copy {registry_reference(name)} oci:{images_dir}:{repository}:{tag}" if tag else \
        f"skopeo copy {registry_reference(name)} oci:{images_dir}:{repository}"


@dataclasses.dataclass(frozen=True)
class ImageSource:
    """An image as skopeo reads it: `transport:path[:ref]`."""

    transport: str  # oci, oci-archive, docker-archive
    path: Path
    ref: str = ""

    def reference(self) -> str:
        return f"{self.transport}:{self.path}" + (f":{self.ref}" if self.ref else "")

    def identity(self) -> str:
        """What names this source's content cheaply: its path, ref, and the size, time and inode of
        the file that changes with it (an OCI layout's index.json)."""
        target = self.path / "index.json" if self.transport == "oci" else self.path
        info = os.stat(target)
        return json.dumps([self.transport, str(self.path.resolve()), self.ref, info.st_size, info.st_mtime_ns,
                           info.st_ino, info.st_dev])


def _layout_refs(layout: Path) -> dict[str, str]:
    """ref name → manifest digest of an OCI image layout (an empty dict when it is none)."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError):
        return {}
    return {m.get("annotations", {}).get("org.opencontainers.image.ref.name", ""): m.get("digest", "")
            for m in index.get("manifests", []) if isinstance(m, dict)}


def archive_kind(path: Path) -> str:
    """`oci-archive` or `docker-archive` for a tar archive of either kind, "" otherwise."""
    try:
        with tarfile.open(path) as archive:
            for member in archive:
                kind = _ARCHIVE_KINDS.get(member.name.lstrip("./"))
                if kind:
                    return kind
    except (tarfile.TarError, OSError):
        return ""
    return ""


def _file_stems(name: str) -> list[str]:
    """The names of a per-image file or directory under the images directory: the repository with
    `/` as `__`, then its last component (`sweb.eval.x86_64.sympy_1776_sympy-11897`)."""
    repository = re.sub(r"^(docker\.io|index\.docker\.io)/", "", _split_name(name)[0])
    stems = [repository.replace("/", "__"), repository.rsplit("/", 1)[-1]]
    return [s for s in dict.fromkeys(stems) if s not in ("", ".", "..")]  # never a way out of the directory


def find_image(images_dir: Path, name: str) -> Optional[ImageSource]:
    """Image `name` under `images_dir`: an entry of the directory's own OCI layout (`skopeo copy ...
    oci:DIR:NAME`) whose ref name is the image's name, else a per-image OCI layout directory, OCI
    archive or `docker save` archive named after it (`_file_stems`, with or without `.tar`)."""
    refs = _layout_refs(images_dir)
    for ref in _reference_names(name):
        if ref in refs:
            return ImageSource("oci", images_dir, ref)
    for stem in _file_stems(name):
        for candidate in (images_dir / stem, images_dir / f"{stem}.tar"):
            if candidate.is_dir() and (candidate / "index.json").is_file():
                refs = _layout_refs(candidate)
                ref = next((r for r in _reference_names(name) if r in refs), "")
                if ref or len(refs) == 1:
                    return ImageSource("oci", candidate, ref or next(iter(refs)))
            elif candidate.is_file():
                kind = archive_kind(candidate)
                if kind:
                    return ImageSource(kind, candidate)
    return None


def _run_tool(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ImageError("image_failed", f"{cmd[0]}: {e}") from None
    if proc.returncode != 0:
        raise ImageError("image_failed", f"{' '.join(cmd[:3])} ... exited {proc.returncode}: "
                                         f"{(proc.stderr or proc.stdout).strip()[-_ERROR_TAIL:]}")
    return proc.stdout


@contextlib.contextmanager
def _locked(path: Path, shared: bool = False) -> Iterator[None]:
    """A lock between processes: shared for readers of the layout (umoci unpack), exclusive for its
    writer (skopeo copy rewrites index.json in place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_to_others(root: Path) -> None:
    """Whatever the owner may read (and search or run), others may too; links untouched."""
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files, ""]:
            path = os.path.join(directory, name) if name else directory
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                continue
            mode = info.st_mode & 0o7777
            wanted = mode | (mode & 0o500) >> 6
            if wanted != mode:
                os.chmod(path, wanted)


@dataclasses.dataclass(frozen=True)
class Image:
    """An unpacked image (`ImageCache.ensure`) as a run's root, with the options it is used under."""

    key: str  # the manifest digest, "sha256:<hex>"
    bundle: Path  # umoci's bundle: rootfs/ and image.json
    env: tuple[tuple[str, str], ...]  # the config's Env, in order
    working_dir: str
    user: str
    options: ImageOptions = ImageOptions()

    @property
    def rootfs(self) -> Path:
        return self.bundle / "rootfs"

    @property
    def repo_path(self) -> str:
        return self.options.repo_path

    def host_path(self, path: str) -> Optional[Path]:
        """Where `path` of the image lies on the host, its links followed inside the image (None when
        it does not exist there)."""
        return resolve_in_root(self.rootfs, path)

    def _conda_bin(self) -> str:
        """The bin directory of the options' conda environment, "" when the image has none: an
        `envs/<name>/bin` beside a conda `bin/` on the image's PATH, or under /opt/miniconda3."""
        name = self.options.conda_env
        if not name:
            return ""
        roots = [str(Path(d).parent) for d in self.path_value().split(":") if d.endswith("/bin")]
        for root in [*roots, "/opt/miniconda3", "/opt/conda"]:
            candidate = f"{root}/envs/{name}/bin"
            found = self.host_path(candidate)
            if found is not None and found.is_dir():
                return candidate
        return ""

    def path_value(self) -> str:
        return dict(self.env).get("PATH", DEFAULT_PATH)

    def command_env(self) -> dict[str, str]:
        """The config's Env, with the options' conda environment activated as `conda activate` sets
        PATH, CONDA_PREFIX and CONDA_DEFAULT_ENV (its activate.d scripts are not run)."""
        env = dict(self.env)
        env["PATH"] = self.path_value()
        conda_bin = self._conda_bin()
        if conda_bin:
            env.update(PATH=f"{conda_bin}:{env['PATH']}", CONDA_PREFIX=str(Path(conda_bin).parent),
                       CONDA_DEFAULT_ENV=self.options.conda_env)
        return env

    def site_packages(self) -> Optional[Path]:
        """The host path of the site-packages of the first `python` on the commands' PATH (its
        environment's, not its interpreter's installation), None when there is none."""
        for directory in self.command_env()["PATH"].split(":"):
            if directory and self.host_path(f"{directory}/python") is not None:
                prefix = self.host_path(str(Path(directory).parent))
                found = sorted(prefix.glob("lib/python*/site-packages")) if prefix else []
                return found[0] if found else None
        return None

    def root(self, worktree: Path) -> ImageRoot:
        """The sandbox's view of this image with `worktree` at the repository path."""
        return ImageRoot(self.rootfs, self.repo_path, worktree, self._text("/etc/passwd"), self._text("/etc/group"))

    def _text(self, path: str) -> str:
        found = self.host_path(path)
        if found is None or not found.is_file():
            return ""
        return found.read_text(encoding="utf-8", errors="replace")


def resolve_in_root(rootfs: Path, path: str, max_links: int = 40) -> Optional[Path]:
    """`path` of the file system at `rootfs` as its own processes would resolve it (links relative
    to it, `..` stopping at its root): the host path, None when a component is missing or the links
    loop. The host never follows a link of an image out of it."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = rootfs.joinpath(*done, part)
        try:
            info = os.lstat(candidate)
        except OSError:
            return None
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > max_links:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        if parts and not stat.S_ISDIR(info.st_mode):
            return None
        done.append(part)
    return rootfs.joinpath(*done)


class ImageCache:
    """Unpacked images under `root` (module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.layout = self.root / "layout"

    def _tag(self, digest: str) -> str:
        return digest.replace(":", "_")

    def _copy(self, source: ImageSource) -> str:
        """Copies `source` into the shared layout (once per source content); its manifest digest."""
        memo = self.root / "sources" / hashlib.sha256(source.identity().encode()).hexdigest()
        if memo.is_file():
            digest = memo.read_text().strip()
            if self._tag(digest) in _layout_refs(self.layout):
                return digest
        with _locked(self.root / "layout.lock"):
            temporary = f"import-{os.getpid()}-{secrets.token_hex(4)}"
            _run_tool(["skopeo", "--insecure-policy", "copy", "--quiet", source.reference(),
                       f"oci:{self.layout}:{temporary}"])
            digest = _layout_refs(self.layout).get(temporary, "")
            if not digest:
                raise ImageError("image_failed", f"skopeo copied {source.reference()} but the layout names no "
                                                 f"manifest {temporary}")
            _run_tool(["umoci", "tag", "--image", f"{self.layout}:{temporary}", self._tag(digest)])
            _run_tool(["umoci", "rm", "--image", f"{self.layout}:{temporary}"])
        memo.parent.mkdir(parents=True, exist_ok=True)
        partial = memo.with_name(memo.name + f".{os.getpid()}")
        partial.write_text(digest + "\n")
        partial.replace(memo)
        return digest

    def _manifest(self, digest: str) -> dict:
        return json.loads((self.layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_text())

    def _unpack(self, digest: str, bundle: Path) -> None:
        start = time.perf_counter()
        with _locked(self.root / "layout.lock", shared=True):
            _run_tool(["umoci", "unpack", "--image", f"{self.layout}:{self._tag(digest)}", str(bundle)])
            manifest = self._manifest(digest)
            config = json.loads((self.layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":", 1)[1])
                                .read_text()).get("config") or {}
        unpacked = time.perf_counter() - start
        _open_to_others(bundle / "rootfs")
        bundle.chmod(0o755)
        layers = [layer["digest"] for layer in manifest.get("layers", [])]
        shared_with = self._share_files(bundle, layers)
        env = [line.split("=", 1) for line in config.get("Env") or [] if "=" in line]
        (bundle / "image.json").write_text(json.dumps({
            "digest": digest, "env": env, "working_dir": config.get("WorkingDir") or "",
            "user": config.get("User") or "", "layers": layers, "shared_with": shared_with,
            "unpack_seconds": round(unpacked, 3), "prepare_seconds": round(time.perf_counter() - start, 3)},
            indent=2) + "\n")
        (bundle / READY_MARKER).write_text("")

    def _share_files(self, bundle: Path, layers: list[str]) -> str:
        """Hard-links the new image's files to the identical ones (content, mode, owner, time: util-linux
        `hardlink`) of the unpacked image that shares the most leading layers with it, the one whose
        files came from the same layers; returns that image's digest ("" when none shares a layer).
        Nothing writes an unpacked image after this (runs see it read-only), so a file two images
        share is never changed through one of them."""
        best, best_shared = None, 0
        for other in (self.root / "unpacked").glob(f"*/{READY_MARKER}"):
            try:
                theirs = json.loads((other.parent / "image.json").read_text())["layers"]
            except (OSError, ValueError, KeyError):
                continue
            shared = next((i for i, (a, b) in enumerate(zip(layers, theirs)) if a != b), min(len(layers), len(theirs)))
            if shared > best_shared:
                best, best_shared = other.parent, shared
        if best is None:
            return ""
        _run_tool(["hardlink", "--quiet", str(bundle / "rootfs"), str(best / "rootfs")])
        return json.loads((best / "image.json").read_text())["digest"]

    def ensure(self, source: ImageSource, options: ImageOptions = ImageOptions()) -> Image:
        """The image of `source`, copied into the layout and unpacked first when the cache lacks it
        (ImageError image_failed when a tool fails; nothing half-built is kept)."""
        digest = self._copy(source)
        bundle = self.root / "unpacked" / digest.split(":", 1)[1]
        build_once(bundle, bundle.with_name(bundle.name + ".lock"), READY_MARKER,
                   lambda path: self._unpack(digest, path))
        return load_image(bundle, options)


def load_image(bundle: Path, options: ImageOptions = ImageOptions()) -> Image:
    data = json.loads((bundle / "image.json").read_text())
    return Image(data["digest"], bundle, tuple((k, v) for k, v in data["env"]), data["working_dir"], data["user"],
                 options)


def instance_image_name(instance: Instance, options: ImageOptions) -> str:
    """The image an instance runs in: the one its row names, else SWE-bench's rule from its id."""
    return instance.image or swebench_image_name(instance.instance_id, options.namespace)


def instance_image(instance: Instance, options: ImageOptions, cache_root: Path) -> Image:
    """The unpacked image of `instance` (ImageError: missing_image, with the `skopeo copy` that would
    fetch it, or image_failed)."""
    name = instance_image_name(instance, options)
    source = find_image(Path(options.dir), name)
    if source is None:
        raise ImageError("missing_image", f"image {name} of {instance.instance_id} is not in {options.dir}; "
                                          f"fetch it where the registry is reachable: "
                                          f"{fetch_command(name, options.dir)}")
    return ImageCache(cache_root).ensure(source, options)


IMAGE_TOOLS_NEEDED = "umoci, skopeo and util-linux hardlink (apt-get install umoci skopeo util-linux)"


def check_image_tools() -> None:
    """ConfigError, one line, when a tool image mode runs is missing."""
    import shutil

    from swe_rl_jax.config import require

    missing = [tool for tool in ("umoci", "skopeo", "hardlink") if shutil.which(tool) is None]
    require(not missing, "images", f"image mode needs {IMAGE_TOOLS_NEEDED}; missing here: {', '.join(missing)}")
