"""Container images of the shipped sample, built from this host's own files, laid out as SWE-bench's
evaluation images are: image mode's tests and measurements (docs/HARNESS.md, "Images") need images,
and this machine reaches no registry and runs no Docker.

    python tools/make_images.py --out DIR      # prints DIR/images, the images directory (--images)

Per instance of data/sample/instances.jsonl, an image `swebench/sweb.eval.x86_64.<id>:latest`
(SWE-bench's name, `_1776_` for `__`), two layers:
- a base layer, shared: a small system of this host's programs (`SYSTEM_PROGRAMS`: sh, bash, the
  coreutils, grep, sed, find, git, ...) with the shared libraries they and Python load (`ldd`), a
  linker cache made for them (`ldconfig -r`); this host's Python (pyenv's, at its own path under a
  0700 /root, its standard library without its tests); `/opt/miniconda3/bin/activate` (a stand-in
  for conda's: it defines a `conda activate NAME` that puts `envs/NAME/bin` first on PATH) and
  `/opt/miniconda3/envs/testbed`, a virtualenv of that Python holding the packages of the sample's
  environment (data/sample/specs.json: pytest 8.4.2 and its dependencies, copied from the harness's
  environment cache); empty /proc, /dev, /sys and a 1777 /tmp;
- a layer per instance: `/testbed`, the repository with its history cut at the base commit as
  SWE-bench's set-up cuts it (clone, `chmod -R 777`, `git reset --hard <base>`, remote and later
  tags removed, reflog expired, `git gc --prune=now`), then its commit `SWE-bench` on top
  (`git commit --allow-empty -am SWE-bench`).
The config: Env `PATH=/opt/miniconda3/bin:<Docker's>` (conda's base, as SWE-bench's images: the
environment `testbed` is activated by the harness), `LANG=C.UTF-8`; WorkingDir `/testbed/`.

Besides (`leaky`): the same image for the first instance whose `/testbed/.git` keeps the history
after the base commit and a branch `fix` holding the gold patch: an image that would hand an agent
the answer (`git log --all`) if the work tree's `.git` were the image's.

Written with umoci (init, new, config; each layer a GNU tar archive added by `raw add-layer`: no
unpacking) into one OCI image layout `DIR/images` (the shared base layer stored once), the first instance's image also
as a `docker save` archive and as an OCI archive (`skopeo copy`) in `DIR/archives`. The whole is
built once per content (this file, the sample, this Python, the environment's key) under
~/.cache/swe_rl_jax/test-images/<key>/, behind a lock; every test session and measurement reuses it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos, run_isolated_git  # noqa: E402
from swe_rl_jax.data.sources import load_instances  # noqa: E402
from swe_rl_jax.files import user_cache_home  # noqa: E402
from swe_rl_jax.harness.environments import (EnvironmentOptions, build_once, ensure_environment,  # noqa: E402
                                             resolve_interpreter)
from swe_rl_jax.harness.images import swebench_image_name  # noqa: E402
from swe_rl_jax.harness.specs import load_specs  # noqa: E402

SYSTEM_PROGRAMS = ("sh", "dash", "bash", "ls", "cat", "cp", "mv", "rm", "mkdir", "rmdir", "ln", "chmod", "head",
                   "tail", "wc", "sort", "uniq", "tr", "cut", "tee", "touch", "env", "echo", "printf", "dirname",
                   "basename", "pwd", "id", "whoami", "true", "false", "sleep", "date", "test", "readlink",
                   "realpath", "stat", "grep", "sed", "awk", "find", "xargs", "diff", "cmp", "git", "tar", "gzip",
                   "which", "uname", "mktemp", "seq", "nproc", "du", "ps", "kill", "pkill", "timeout", "od",
                   "md5sum", "sha256sum", "ldd", "file", "mkfifo", "mknod", "nohup", "setsid", "getent", "curl",
                   "ipcmk", "ipcs", "ipcrm", "ip", "unshare")
PATH = "/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What SWE-bench's images' Python environments do not need of the standard library either.
_STDLIB_LEFT_OUT = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
                    "site-packages", "config-*")
ACTIVATE = """# A stand-in for conda's activate: `source /opt/miniconda3/bin/activate`, then `conda activate NAME`.
conda() {
    if [ "$1" = activate ] && [ -d "/opt/miniconda3/envs/$2/bin" ]; then
        export PATH="/opt/miniconda3/envs/$2/bin:$PATH" CONDA_PREFIX="/opt/miniconda3/envs/$2" CONDA_DEFAULT_ENV="$2"
    else
        echo "conda (stand-in): only 'conda activate NAME' is here" >&2; return 1
    fi
}
"""
SWEBENCH_IDENTITY = ("SWE-bench", "setup@swebench.config")


def _run(*cmd: str, cwd: Path | None = None, env: dict | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def _add(stage: Path, path: str) -> None:
    """Host `path` into `stage` at the same path: its directories' links followed (the host's merged
    /usr: /bin, /lib, /lib64 are links made once, `_base_links`), a link itself kept with its target added too."""
    host = Path(path)
    parent = Path(os.path.realpath(host.parent))
    target = stage / parent.relative_to("/") / host.name
    if os.path.lexists(target):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if host.is_symlink():
        link = os.readlink(host)
        os.symlink(link, target)
        _add(stage, os.path.normpath(os.path.join(parent, link)))
    elif host.is_file():
        shutil.copy2(host, target)


def _libraries(binary: str) -> list[str]:
    proc = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
    return re.findall(r"(/\S+) \(0x", proc.stdout)


def _base_links(stage: Path) -> None:
    for name in ("bin", "sbin", "lib", "lib64"):
        host = Path("/") / name
        if host.is_symlink():
            os.symlink(os.readlink(host), stage / name)
        else:
            (stage / name).mkdir(exist_ok=True)


def _python_tree(stage: Path, python: str) -> Path:
    """This host's Python installation (the prefix of `python`) into `stage` at its own path; its bin/python3.X."""
    prefix = Path(os.path.realpath(python)).parents[1]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dest = stage / prefix.relative_to("/")
    (dest / "bin").mkdir(parents=True)
    shutil.copy2(prefix / "bin" / version, dest / "bin" / version)
    os.symlink(version, dest / "bin" / "python3")
    for lib in (prefix / "lib").glob("libpython*"):
        _add(stage, str(lib))
    shutil.copytree(prefix / "lib" / version, dest / "lib" / version, symlinks=True,
                    ignore=lambda d, names: [n for n in names if Path(d) == prefix / "lib" / version
                                             and any(Path(n).match(p) for p in _STDLIB_LEFT_OUT)])
    return dest / "bin" / version


def stage_system(stage: Path, programs: tuple[str, ...] = SYSTEM_PROGRAMS, loaded: tuple[str, ...] = ()) -> None:
    """A system of this host's `programs` in `stage`: the merged-/usr links, the programs, the
    libraries they and the host files `loaded` load (`ldd`), a linker cache for them (`ldconfig -r`)."""
    stage.mkdir(parents=True, exist_ok=True)
    _base_links(stage)
    binaries = [b for b in (shutil.which(p) for p in programs) if b]
    for binary in binaries:
        _add(stage, binary)
    for binary in [*binaries, *loaded]:
        for lib in _libraries(binary):
            _add(stage, lib)
    (stage / "etc" / "ld.so.conf.d").mkdir(parents=True, exist_ok=True)
    (stage / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (stage / "etc" / "ld.so.conf.d" / "multiarch.conf").write_text("/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
    _run("ldconfig", "-r", str(stage))


def _stage_base(stage: Path, site_packages: Path) -> None:
    python = _python_tree(stage, sys.executable)
    host_python = "/" + str(python.relative_to(stage))
    stage_system(stage, loaded=(host_python, *map(str, Path(host_python).parents[1].glob("lib/python*/lib-dynload/*.so"))))
    git_core = Path(_run("git", "--exec-path").strip())
    shutil.copytree(git_core, stage / git_core.relative_to("/"), symlinks=True, dirs_exist_ok=True)
    for locale in Path("/usr/lib/locale").glob("C.*"):  # C.UTF-8, which the harness's runs set
        shutil.copytree(locale, stage / locale.relative_to("/"), symlinks=True)
    (stage / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\nnonroot:x:1000:1000::/home/nonroot:/bin/sh\n")
    (stage / "etc" / "group").write_text("root:x:0:\nnonroot:x:1000:\n")
    (stage / "etc" / "hostname").write_text("image\n")
    (stage / "etc" / "hosts").write_text("127.0.0.1\tlocalhost\n")
    conda = stage / "opt" / "miniconda3"
    (conda / "bin").mkdir(parents=True)
    (conda / "bin" / "activate").write_text(ACTIVATE)
    env = conda / "envs" / "testbed"
    (env / "bin").mkdir(parents=True)
    version = python.name
    os.symlink("/" + str(python.relative_to(stage)), env / "bin" / version)
    for name in ("python", "python3"):
        os.symlink(version, env / "bin" / name)
    (env / "pyvenv.cfg").write_text(f"home = /{python.parent.relative_to(stage)}\ninclude-system-site-packages = false\n"
                                    f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
    shutil.copytree(site_packages, env / "lib" / version / "site-packages", symlinks=True,
                    ignore=shutil.ignore_patterns("_swe_rl_jax*"))
    for name in ("proc", "dev", "sys", "home/nonroot"):
        (stage / name).mkdir(parents=True, exist_ok=True)
    (stage / "tmp").mkdir()
    (stage / "tmp").chmod(0o1777)
    (stage / "root").chmod(0o700)


def _stage_testbed(dest: Path, repo: Path, base_commit: str, fix_patch: str = "") -> None:
    """The repository as SWE-bench's set-up leaves it at /testbed (module docstring); with
    `fix_patch`, its later history kept and a branch `fix` holding that patch instead."""
    _run("git", "clone", "-q", "--no-local", str(repo), str(dest))
    for directory, dirs, files in os.walk(dest):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, 0o777)
    def git(*args: str, stdin: str | None = None) -> str:
        return run_isolated_git(dest, *args, identity=f"{SWEBENCH_IDENTITY[0]} <{SWEBENCH_IDENTITY[1]}>", stdin=stdin)

    git("reset", "-q", "--hard", base_commit)
    if fix_patch:
        git("checkout", "-q", "-b", "fix")
        git("apply", "-", stdin=fix_patch)
        git("commit", "-q", "-am", "the fix")
        git("checkout", "-q", "-")
    else:
        git("remote", "remove", "origin")
        git("reflog", "expire", "--expire=now", "--all")
        git("gc", "-q", "--prune=now")
    git("commit", "-q", "--allow-empty", "-am", "SWE-bench")


def _umoci(*args: str) -> None:
    _run("umoci", *args)


def add_layer(layout: Path, tag: str, new_tag: str, directory: Path, *names: str, comment: str = "") -> None:
    """`names` of `directory` (all of it: ".") as a new layer of image `tag` (as `new_tag`): a GNU tar
    archive of them, owners and modes kept, added by `umoci raw add-layer` (umoci 0.4's `insert`
    writes a layer without its last file's padding and the end-of-archive blocks, which tar readers
    other than Go's refuse)."""
    with tempfile.NamedTemporaryFile(suffix=".tar") as layer:
        _run("tar", "--create", "--file", layer.name, "--numeric-owner", "--directory", str(directory), *names)
        _umoci("raw", "add-layer", "--image", f"{layout}:{tag}", *(["--tag", new_tag] if new_tag != tag else []),
               "--history.comment", comment or new_tag, layer.name)


def _build(out: Path, env_site_packages: Path) -> None:
    out.mkdir(parents=True)
    instances = load_instances(SAMPLE_DIR / "instances.jsonl")
    layout = out / "images"
    timings = {}
    with tempfile.TemporaryDirectory(prefix="make-images-") as scratch:
        scratch = Path(scratch)
        start = time.perf_counter()
        stage = scratch / "base"
        stage.mkdir()
        _stage_base(stage, env_site_packages)
        _umoci("init", "--layout", str(layout))
        _umoci("new", "--image", f"{layout}:base")
        add_layer(layout, "base", "base", stage, ".", comment="the system, Python, conda stand-in")
        _umoci("config", "--image", f"{layout}:base", f"--config.env=PATH={PATH}", "--config.env=LANG=C.UTF-8",
               "--config.workingdir=/testbed/")
        timings["base_seconds"] = round(time.perf_counter() - start, 2)
        repos = make_sample_repos(scratch / "repos")
        start = time.perf_counter()
        names = []
        for inst in instances:
            testbed = scratch / "testbeds" / inst.instance_id
            _stage_testbed(testbed / "testbed", repos[inst.repo], inst.base_commit)
            name = swebench_image_name(inst.instance_id)
            add_layer(layout, "base", name, testbed, "testbed")
            names.append(name)
        leaky = scratch / "testbeds" / "leaky"
        _stage_testbed(leaky / "testbed", repos[instances[0].repo], instances[0].base_commit,
                       fix_patch=instances[0].patch)
        add_layer(layout, "base", "leaky:latest", leaky, "testbed")
        timings["per_instance_seconds"] = round((time.perf_counter() - start) / len(instances), 2)
        _umoci("gc", "--layout", str(layout))
        archives = out / "archives"
        archives.mkdir()
        stem = names[0].split("/", 1)[1].split(":")[0]
        _run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:{names[0]}",
             f"docker-archive:{archives / (stem + '.tar')}:{names[0]}")
        _run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:{names[0]}",
             f"oci-archive:{archives / (stem + '.oci.tar')}")
    (out / "built.json").write_text(json.dumps({"images": names, "leaky": "leaky:latest", **timings}, indent=2) + "\n")


def _sample_environment() -> Path:
    """The site-packages of the sample's environment (data/sample/specs.json; one spec serves all four
    repositories), built in the harness's environment cache when missing."""
    spec = next(iter(load_specs(SAMPLE_DIR / "specs.json").values()))
    return ensure_environment(spec.environment, EnvironmentOptions()).site_packages()


def _content_key(site_packages: Path) -> str:
    parts = [Path(__file__).read_bytes(), (SAMPLE_DIR / "instances.jsonl").read_bytes(),
             (SAMPLE_DIR / "manifest.json").read_bytes(), resolve_interpreter("").encode(), sys.version.encode(),
             str(site_packages).encode()]
    for path in sorted((SAMPLE_DIR / "repos").rglob("*")) + sorted((SAMPLE_DIR / "history").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            parts.append(str(path.relative_to(SAMPLE_DIR)).encode() + path.read_bytes())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def sample_images(cache: Path | None = None) -> Path:
    """The built images' directory (module docstring), built first when the cache lacks it."""
    site_packages = _sample_environment()
    out = (cache or user_cache_home() / "test-images") / _content_key(site_packages)
    build_once(out, out.with_name(out.name + ".lock"), "built.json", lambda path: _build(path, site_packages))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="cache directory (default ~/.cache/swe_rl_jax/test-images)")
    args = p.parse_args(argv)
    out = sample_images(Path(args.out) if args.out else None)
    print(out / "images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
