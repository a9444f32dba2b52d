"""Image mode (docs/HARNESS.md, "Images"): the datasets' own container images as the sandbox's root,
without Docker. Images: the sample's, SWE-bench's layout (tools/make_images.py; fixtures
`sample_images`, `image_options` in tests/conftest.py), and small ones built here with umoci.

- Unpacking: an OCI layout's entry, an OCI archive and a `docker save` archive of one image give
  the file system Python's own tarfile reads from the layers (whiteouts applied by hand); a second
  image of the same repository shares the first one's files (hard links: the same inodes, `du`).
- The SWE-bench-style images: gold resolves 12 of 12 with the same per-test statuses as the pip-spec
  mode, the empty patch 0 of 12, a no-op patch fails every FAIL_TO_PASS test; the scripted agent
  resolves the 12 from inside the images (`resolve --scaffold agent --images`, judged there).
- What a run sees: the image's Env and its conda environment activated, the repository at /testbed,
  the image's own history beyond the base commit out of reach (an image whose `.git` holds the fix).
- Attacks an image brings or meets: a setuid binary, a device node, links that would lead the
  host out of the image, writes into the image (the cache's checksums before and after), mount
  points the image lacks; bad input (a missing image: one line with its `skopeo copy`).
- The datasets' conventions: SWE-bench's image names, rows' image columns, nested columns.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from swe_rl_jax.cli import main as cli_main
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, instance_from_dict, load_instances
from swe_rl_jax.harness import EnvironmentOptions, HarnessOptions, Limits, evaluate_predictions, load_specs
from swe_rl_jax.harness.images import (ImageCache, ImageOptions, find_image, fetch_command, instance_image,
                                       swebench_image_name)
from swe_rl_jax.harness.runner import run_script
from swe_rl_jax.harness.sandbox import UID_BASE, isolation_mode
from swe_rl_jax.harness.specs import RepoSpec
from swe_rl_jax.harness.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from make_images import add_layer, stage_system  # noqa: E402

INSTANCES = load_instances(SAMPLE_DIR / "instances.jsonl")
SPECS = load_specs(SAMPLE_DIR / "specs.json")
_NO_IMAGES = ("image mode needs bwrap isolation, umoci, skopeo and util-linux hardlink (root; apt-get install "
              "bubblewrap umoci skopeo)")
_IMAGES_WORK = isolation_mode("auto") == "bwrap" and all(shutil.which(t) for t in ("umoci", "skopeo", "hardlink"))
needs_bwrap = pytest.mark.skipif(not _IMAGES_WORK, reason=_NO_IMAGES)


def needs_images() -> None:
    """Skips the calling test (or fixture's) image mode where it cannot run."""
    if not _IMAGES_WORK:
        pytest.skip(_NO_IMAGES)


# ------------------------------------------------------------------------------------ helpers
def _tree(root: Path) -> dict[str, tuple]:
    """path → (kind, owner, group, owner's and group's mode bits, content digest or link text), links unfollowed."""
    out = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            info = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                out[rel] = ("link", info.st_uid, info.st_gid, 0, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                out[rel] = ("dir", info.st_uid, info.st_gid, info.st_mode & 0o7770, "")
            elif stat.S_ISREG(info.st_mode):
                out[rel] = ("file", info.st_uid, info.st_gid, info.st_mode & 0o7770,
                            hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                out[rel] = ("special", info.st_uid, info.st_gid, info.st_mode & 0o7770, str(info.st_rdev))
    return out


def _member(name: str) -> str:
    """A layer member's path relative to the root ("" for the root itself)."""
    name = os.path.normpath(name).lstrip("/")
    return "" if name == "." else name


def _layers_as_tarfile_reads_them(layout: Path, digest: str) -> dict[str, tuple]:
    """The file system of image `digest` of an OCI layout read with Python's tarfile, each layer over
    the last, its whiteouts applied as the OCI image spec says (`.wh.NAME` removes NAME, `.wh..wh..opq`
    empties its directory of what lower layers put there): the reference for umoci's unpacking."""
    blob = lambda d: layout / "blobs" / "sha256" / d.split(":", 1)[1]  # noqa: E731
    manifest = json.loads(blob(digest).read_text())
    tree: dict[str, tuple] = {}
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"])) as archive:
            members = archive.getmembers()
            for member in members:  # whiteouts first: they concern lower layers only
                name = _member(member.name)
                base, leaf = os.path.split(name)
                if leaf == ".wh..wh..opq":
                    tree = {k: v for k, v in tree.items() if not k.startswith(base + "/")}
                elif leaf.startswith(".wh."):
                    gone = os.path.join(base, leaf[4:])
                    tree = {k: v for k, v in tree.items() if k != gone and not k.startswith(gone + "/")}
            for member in members:
                name = _member(member.name)
                if not name or os.path.basename(name).startswith(".wh."):
                    continue
                mode = member.mode & 0o7770
                if member.issym():
                    tree[name] = ("link", member.uid, member.gid, 0, member.linkname)
                elif member.isdir():
                    tree[name] = ("dir", member.uid, member.gid, mode, "")
                elif member.islnk():
                    tree[name] = tree[_member(member.linkname)]
                elif member.isfile():
                    data = archive.extractfile(member).read()
                    tree[name] = ("file", member.uid, member.gid, mode, hashlib.sha256(data).hexdigest())
                else:
                    tree[name] = ("special", member.uid, member.gid, mode,
                                  str(os.makedev(member.devmajor, member.devminor)))
    return tree


def _umoci(*args: str) -> None:
    subprocess.run(["umoci", *args], check=True, capture_output=True)


def _small_image(layout: Path, tag: str, *stages: Path) -> None:
    """Each of `stages` a layer of a new image `tag` of `layout` (umoci init, new; make_images.add_layer)."""
    if not (layout / "index.json").exists():
        _umoci("init", "--layout", str(layout))
    _umoci("new", "--image", f"{layout}:{tag}")
    for stage in stages:
        add_layer(layout, tag, tag, stage, ".")


def _image(instance_id: str) -> str:
    return swebench_image_name(instance_id)


# ------------------------------------------------------------------------------------ conventions
def test_swebench_image_names_and_the_fetch_command():
    # SWE-bench's harness: f"{namespace}/sweb.eval.{arch}.{instance_id.lower()}:{tag}", "__" -> "_1776_".
    assert swebench_image_name("sympy__sympy-11897") == "swebench/sweb.eval.x86_64.sympy_1776_sympy-11897:latest"
    assert swebench_image_name("Django__django-11099", "swerebench") == \
        "swerebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert fetch_command("swebench/sweb.eval.x86_64.sympy_1776_sympy-11897:latest", "/data/images") == (
        "skopeo copy docker://docker.io/swebench/sweb.eval.x86_64.sympy_1776_sympy-11897:latest "
        "oci:/data/images:swebench/sweb.eval.x86_64.sympy_1776_sympy-11897:latest")
    assert fetch_command("ghcr.io/org/img:v1", "/d") == "skopeo copy docker://ghcr.io/org/img:v1 oci:/d:ghcr.io/org/img:v1"


def test_rows_name_their_images_and_nested_columns_map(tmp_path):
    base = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", "problem_statement": "p", "patch": ""}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({**base, "image_name": "swebench/swesmith.x86_64.o_1776_r.abc12345"}) + "\n"
                    + json.dumps({**base, "docker_image": "swerebench/sweb.eval.x86_64.o_1776_r-1"}) + "\n")
    assert [i.image for i in load_instances(rows)] == ["swebench/swesmith.x86_64.o_1776_r.abc12345",
                                                       "swerebench/sweb.eval.x86_64.o_1776_r-1"]
    config = {"test_cmd": ["pip install -e .", "pytest -rA --tb=no"], "log_parser": "parse_log_pytest"}
    rows.write_text(json.dumps({**base, "install_config": config}) + "\n"
                    + json.dumps({**base, "instance_id": "o__r-2", "install_config": json.dumps(config)}) + "\n")
    fields = {"test_cmd": "install_config.test_cmd", "log_format": "install_config.log_parser"}
    for inst in load_instances(rows, require_patch=False, fields=fields):
        assert (inst.test_cmd, inst.log_format) == ("pytest -rA --tb=no", "pytest"), inst
    with pytest.raises(ValueError, match="names no log format the harness reads: 'parse_log_go'"):
        instance_from_dict({**base, "log_format": "parse_log_go"}, "row")


@needs_bwrap
def test_images_are_found_by_name_in_every_layout(sample_images, tmp_path):
    """In the directory's own OCI layout by ref name (with or without Docker Hub's registry), else a
    per-image OCI archive, `docker save` archive or layout named after it; a missing one is None."""
    images, archives = sample_images / "images", sample_images / "archives"
    name = _image("quillsoft__configlet-12")
    assert find_image(images, name).reference() == f"oci:{images}:{name}"
    assert find_image(images, "docker.io/" + name).ref == name
    assert find_image(archives, name).transport == "docker-archive"
    by_file = tmp_path / "by-file"
    by_file.mkdir()
    shutil.copyfile(archives / "sweb.eval.x86_64.quillsoft_1776_configlet-12.oci.tar",
                    by_file / "swebench__sweb.eval.x86_64.quillsoft_1776_configlet-12.tar")
    assert find_image(by_file, name).transport == "oci-archive"
    subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{images}:{name}",
                    f"oci:{by_file / 'sweb.eval.x86_64.quillsoft_1776_configlet-12'}:{name}"], check=True)
    (by_file / "swebench__sweb.eval.x86_64.quillsoft_1776_configlet-12.tar").unlink()
    assert find_image(by_file, name).transport == "oci"
    assert find_image(images, _image("nobody__nothing-1")) is None


def test_the_images_files_are_laid_out_over_the_base_commits(tmp_path):
    """imagerepo.copy_files: at the base commit, every file of the image's tree (its edits too);
    elsewhere only where the base commit tracks nothing (build outputs), never over a tracked path;
    no `.git` of the image at any depth; links copied as links, never followed."""
    from swe_rl_jax.harness.imagerepo import copy_files

    source = tmp_path / "image"
    for path, text in {"a/x": "image's edit\n", "b/y": "untracked\n", "build/lib.so": "built\n",
                       ".git/config": "[core]\n\tfsmonitor = evil\n", "sub/.git/HEAD": "x\n", "sub/kept": "k\n",
                       "tracked/z": "under a tracked file\n"}.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(text)
    (source / "link").symlink_to("/etc/shadow")
    base = {"a/x": "base\n", "tracked": "a tracked file\n"}
    for whole in (False, True):
        dest = tmp_path / f"dest-{whole}"
        for path, text in base.items():
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_text(text)
        copy_files(source, dest, keep=None if whole else set(base))
        files = {str(p.relative_to(dest)): (os.readlink(p) if p.is_symlink() else p.read_text())
                 for p in dest.rglob("*") if p.is_symlink() or p.is_file()}
        expected = {"b/y": "untracked\n", "build/lib.so": "built\n", "sub/kept": "k\n", "link": "/etc/shadow",
                    **({"a/x": "image's edit\n", "tracked/z": "under a tracked file\n"} if whole else base)}
        assert files == expected, whole  # whole: the image's directory `tracked` replaced the tracked file


# ------------------------------------------------------------------------------------ unpacking
@needs_bwrap
def test_every_source_format_unpacks_to_the_file_system_its_layers_hold(sample_images, image_options):
    """The image in the layout, as an OCI archive and as a `docker save` archive (skopeo turns it into
    OCI: another manifest, the same files): each unpacked tree is what tarfile reads from its layers
    (owners, owner's and group's modes, contents, links; others' bits are the cache's, `_open_to_others`)."""
    name = _image("quillsoft__configlet-12")
    cache = ImageCache(Path(image_options.cache))
    archives = sample_images / "archives"
    sources = [find_image(sample_images / "images", name), find_image(archives, name),
               dataclasses.replace(find_image(archives, name), transport="oci-archive",
                                   path=archives / "sweb.eval.x86_64.quillsoft_1776_configlet-12.oci.tar")]
    images = {s.transport: cache.ensure(s, image_options) for s in sources}
    # The OCI archive is the layout's image byte for byte (one manifest, one unpacked tree); the docker
    # archive is another manifest of the same files.
    assert images["oci"].key == images["oci-archive"].key != images["docker-archive"].key
    tree = _tree(images["oci"].rootfs)
    assert tree == _layers_as_tarfile_reads_them(cache.layout, images["oci"].key)
    assert {"testbed/.git", "opt/miniconda3/envs/testbed/pyvenv.cfg", "usr/lib/git-core/git"} <= set(tree)
    assert _tree(images["docker-archive"].rootfs) == tree


@needs_bwrap
def test_whiteouts_hard_links_and_devices_unpack_as_the_layers_say(tmp_path):
    """A second layer that removes a file (`.wh.NAME`) and a directory, and makes a directory opaque
    (`.wh..wh..opq`: what lower layers put there is gone, its own entries stay); hard links, a
    device node, a link: the unpacked tree is the reference's (tarfile, whiteouts by hand)."""
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    for directory in ("keep", "gone", "opaque", "data"):
        (lower / directory).mkdir(parents=True)
    for name in ("keep/a", "gone/b", "opaque/c", "data/removed", "data/kept"):
        (lower / name).write_text(name)
    os.link(lower / "data/kept", lower / "data/kept-link")
    os.symlink("../keep/a", lower / "data/link")
    os.mknod(lower / "data/null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    (upper / "opaque").mkdir(parents=True)
    (upper / "data").mkdir()
    for name in ("opaque/.wh..wh..opq", ".wh.gone", "data/.wh.removed"):
        (upper / name).write_text("")
    (upper / "opaque" / "new").write_text("new")
    layout = tmp_path / "layout"
    _small_image(layout, "layers:1", lower, upper)
    from swe_rl_jax.harness.images import ImageSource

    cache = ImageCache(tmp_path / "cache")
    image = cache.ensure(ImageSource("oci", layout, "layers:1"))
    tree = _tree(image.rootfs)
    assert tree == _layers_as_tarfile_reads_them(cache.layout, image.key)
    assert {"keep/a", "opaque/new", "data/kept", "data/kept-link", "data/link", "data/null"} <= set(tree)
    assert not {"gone", "gone/b", "opaque/c", "data/removed"} & set(tree)
    assert os.stat(image.rootfs / "data/kept").st_ino == os.stat(image.rootfs / "data/kept-link").st_ino
    assert tree["data/null"][0] == "special"


@needs_bwrap
def test_a_second_image_of_a_repository_shares_the_files_of_the_first(image_options):
    """Two instances of one repository (one base layer, a layer of /testbed each): the second's files
    that came from the same layer are hard links to the first's (the same inodes), so both together
    take little more disk than one (`du`, which counts an inode once); the layout holds the base
    layer's blob once."""
    first, second = (instance_image(i, image_options, Path(image_options.cache)) for i in INSTANCES[:2])
    for path in ("usr/lib/git-core/git", "opt/miniconda3/envs/testbed/pyvenv.cfg"):
        assert os.stat(first.rootfs / path).st_ino == os.stat(second.rootfs / path).st_ino, path
    index = [image.rootfs / "testbed/.git/index" for image in (first, second)]  # differs: another commit's tree
    assert index[0].read_bytes() != index[1].read_bytes() and index[0].stat().st_ino != index[1].stat().st_ino

    def du(*paths: Path) -> int:
        return int(subprocess.run(["du", "-s", "-B1", "-c", *map(str, paths)], capture_output=True, text=True,
                                  check=True).stdout.splitlines()[-1].split()[0])

    one, both = du(first.rootfs), du(first.rootfs, second.rootfs)
    assert both - one < 0.05 * one, (one, both)
    layers = [json.loads((image.bundle / "image.json").read_text())["layers"] for image in (first, second)]
    assert layers[0][0] == layers[1][0] and layers[0][1] != layers[1][1]  # one base blob in the layout, for both
    assert (Path(image_options.cache) / "layout" / "blobs" / "sha256" / layers[0][0].split(":")[1]).is_file()


# ------------------------------------------------------------------------------------ the sample
@pytest.fixture(scope="module")
def work(open_dir):
    path = open_dir / "image-work"
    path.mkdir(exist_ok=True)
    return path


def _harness(image_options, tmp_path_factory, work, images: bool = True) -> HarnessOptions:
    return HarnessOptions(workers=2, limits=Limits(timeout_s=60),
                          env=EnvironmentOptions(cache_dir=str(tmp_path_factory.mktemp("image-envs"))),
                          work_dir=str(work), images=image_options if images else ImageOptions())


@needs_bwrap
def test_gold_resolves_all_empty_none_with_the_pip_spec_modes_statuses(image_options, repos, tmp_path_factory,
                                                                       work):
    """The 12 instances in their SWE-bench-style images, no clone given (the images' own repositories):
    gold 12 of 12, each test's status the pip-spec mode's (the same instances, clones and the sample's
    specs); the empty patch resolves none; a patch that changes nothing the tests read fails every
    FAIL_TO_PASS test and passes every PASS_TO_PASS one."""
    gold = [{"instance_id": i.instance_id, "model_patch": i.patch} for i in INSTANCES]
    noop = [{"instance_id": i.instance_id, "model_patch": "diff --git a/noop.txt b/noop.txt\nnew file mode 100644\n"
             "--- /dev/null\n+++ b/noop.txt\n@@ -0,0 +1 @@\n+noop\n"} for i in INSTANCES]
    in_images = _harness(image_options, tmp_path_factory, work)
    image_gold = evaluate_predictions(gold, INSTANCES, RepoLocator(), SPECS, in_images)
    pip_gold = evaluate_predictions(gold, INSTANCES, RepoLocator(repos), SPECS,
                                    _harness(image_options, tmp_path_factory, work, images=False))
    assert image_gold["summary"]["resolved"] == pip_gold["summary"]["resolved"] == 12, image_gold["summary"]
    for ours, theirs in zip(image_gold["records"], pip_gold["records"]):
        assert ours["test_statuses"] == theirs["test_statuses"], ours["instance_id"]
        assert ours["environment"].startswith("sha256:") and ours["environment"] != theirs["environment"]
    empty = evaluate_predictions([{"instance_id": i.instance_id, "model_patch": ""} for i in INSTANCES], INSTANCES,
                                 RepoLocator(), SPECS, in_images)
    assert empty["summary"]["resolved"] == 0 and empty["summary"]["errors"] == {"empty_patch": 12}
    report = evaluate_predictions(noop, INSTANCES, RepoLocator(), SPECS, in_images)
    assert report["summary"]["resolved"] == 0
    for inst, record in zip(INSTANCES, report["records"]):
        assert record["error"] is None, record
        assert record["tests_status"]["FAIL_TO_PASS"]["failure"] == list(inst.fail_to_pass), record
        assert record["tests_status"]["PASS_TO_PASS"]["failure"] == [], record


@needs_bwrap
def test_the_scripted_agent_resolves_the_sample_from_inside_the_images(image_options, repos, tmp_path, work):
    """`resolve --scaffold agent --images DIR` (no clones): each episode's shell is in its instance's
    image, writes the gold fix with commands, runs the image's pytest and submits; `evaluate
    --images` resolves all 12."""
    from scripted_agent import recorded_rows

    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps(r) + "\n" for r in recorded_rows(INSTANCES, RepoLocator(repos))))
    out = tmp_path / "preds.jsonl"
    assert cli_main(["resolve", "--scaffold", "agent", "--instances", str(SAMPLE_DIR / "instances.jsonl"),
                     "--images", image_options.dir, "--out", str(out), f"answers={answers}",
                     f"agent.images.cache={image_options.cache}", f"agent.specs={SAMPLE_DIR / 'specs.json'}",
                     f"agent.env_cache={tmp_path / 'envs'}", f"agent.work_dir={work}", "agent.episodes_in_flight=6",
                     "progress=false"]) == 0
    trajectories = [json.loads(line) for line in out.with_name("preds.trajectories.jsonl").read_text().splitlines()]
    assert [t["exit_status"] for t in trajectories] == ["submitted"] * 12
    for traj in trajectories:  # the image's pytest, in its conda environment, ran the repository's tests
        assert "passed" in traj["messages"][-3]["content"], traj["instance_id"]
    report = tmp_path / "report"
    assert cli_main(["evaluate", "--predictions", str(out), "--instances", str(SAMPLE_DIR / "instances.jsonl"),
                     "--images", image_options.dir, "--image-cache", image_options.cache,
                     "--specs", str(SAMPLE_DIR / "specs.json"), "--out",
                     str(report), "--env-cache", str(tmp_path / "envs"), "--work-dir", str(work)]) == 0
    summary = json.loads((report / "report.json").read_text())["summary"]
    assert summary["resolved"] == 12 and summary["isolation"] == "bwrap", summary


# ------------------------------------------------------------------------------------ what a run sees
@needs_bwrap
def test_a_run_in_an_image_sees_its_env_its_environment_and_its_repository(image_options, tmp_path, work):
    """A standalone script in configlet-12's image: its root is the image's (its own /etc, no host
    home), the config's Env with the `testbed` conda environment first on PATH (the config's PATH is
    conda's base, as in SWE-bench's images), the work tree at /testbed, the run's own user."""
    inst = INSTANCES[0]
    image = instance_image(inst, image_options, Path(image_options.cache))
    config = json.loads((image.bundle / "config.json").read_text())  # umoci's runtime config of the image
    script = ("import os, sys, subprocess\n"
              "print('prefix', sys.prefix)\nprint('cwd', os.getcwd())\nprint('uid', os.getuid())\n"
              "print('path', os.environ['PATH'])\nprint('lang', os.environ['LANG'])\n"
              "print('hostname', open('/etc/hostname').read().strip())\n"
              "print('root', sorted(os.listdir('/')))\n"
              "print('head', subprocess.run(['git', 'log', '--format=%s', '-1'], capture_output=True, text=True).stdout)\n")
    from swe_rl_jax.harness.imagerepo import image_clone

    run = run_script(image_clone(image, full=True), inst.base_commit, "", script, image, RepoSpec(),
                     limits=Limits(timeout_s=30), isolation="bwrap", work_dir=work)
    assert run.completed, run.output
    lines = dict(line.split(" ", 1) for line in run.output.splitlines() if " " in line)
    assert lines["prefix"] == "/opt/miniconda3/envs/testbed" and lines["cwd"] == "/testbed"
    assert int(lines["uid"]) >= UID_BASE
    image_path = next(e.split("=", 1)[1] for e in config["process"]["env"] if e.startswith("PATH="))
    assert lines["path"] == f"/opt/miniconda3/envs/testbed/bin:{image_path}"
    assert "LANG=C.UTF-8" in config["process"]["env"] and lines["lang"] == "C.UTF-8"
    assert eval(lines["root"]) == sorted(os.listdir(image.rootfs))  # the image's top level, no more
    assert lines["head"].strip() != "SWE-bench"  # the work tree's history is the history store's, at the base


@needs_bwrap
def test_an_images_own_history_after_the_base_is_out_of_reach(image_options, repos, tmp_path, work):
    """The leaky image's /testbed/.git holds a branch `fix` with the gold patch and the history after
    the base commit; in a workspace of that image (no clone given: its own repository serves) git
    and a search of the whole file system find none of it, and an agent's `git checkout fix` fails,
    so its diff resolves nothing; the gold patch still resolves there."""
    inst = dataclasses.replace(INSTANCES[0], image="leaky:latest")
    image = instance_image(inst, image_options, Path(image_options.cache))
    own = run_isolated_git(image.rootfs / "testbed", "log", "--all", "--format=%s")
    assert "the fix" in own  # the image does carry the answer
    fixed = next(line[1:].strip() for line in inst.patch.splitlines()
                 if line.startswith("+") and not line.startswith("+++") and len(line.strip()) > 20)
    from swe_rl_jax.harness.imagerepo import image_clone

    probe = ("echo log; git log --all --format=%s; echo branches; git branch -a; git tag; echo objects; "
             "git cat-file --batch-all-objects --batch-check | wc -l; git show fix:configlet/types.py 2>&1 | head -1; "
             "git checkout fix -- configlet 2>&1; echo search; "
             f"grep -rlF -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -- '{fixed}' / 2>/dev/null; "
             "echo done")
    with Workspace.open(image_clone(image, full=True), inst.base_commit, image, RepoSpec(), isolation="bwrap",
                        work_dir=work, history_root=tmp_path / "histories") as ws:
        result = ws.run(probe, Limits(timeout_s=60))
        diff = ws.diff()
    out = result.output
    log, branches, objects = (out.split(a, 1)[1].split(b, 1)[0].split() for a, b in
                              (("log\n", "branches"), ("branches\n", "objects"), ("objects\n", "search")))
    base_log = run_isolated_git(repos / "quillsoft__configlet", "log", "--format=%s", inst.base_commit).split()
    assert log == base_log and branches == ["*", "(HEAD", "detached", "at", inst.base_commit[:7] + ")"], out
    assert "invalid object name 'fix'" in out or "invalid reference: fix" in out, out
    assert out.split("search\n", 1)[1] == "done\n", out  # the fix's text is nowhere in the run's view
    assert diff == ""
    options = HarnessOptions(workers=1, limits=Limits(timeout_s=60), work_dir=str(work), images=image_options,
                             env=EnvironmentOptions(cache_dir=str(tmp_path / "envs")))
    noop = "diff --git a/noop.txt b/noop.txt\nnew file mode 100644\n--- /dev/null\n+++ b/noop.txt\n@@ -0,0 +1 @@\n+x\n"
    report = evaluate_predictions([{"instance_id": inst.instance_id, "model_patch": noop}], [inst], RepoLocator(),
                                  SPECS, options)
    assert report["summary"]["resolved"] == 0 and report["records"][0]["error"] is None, report["records"][0]
    report = evaluate_predictions([{"instance_id": inst.instance_id, "model_patch": inst.patch}], [inst],
                                  RepoLocator(), SPECS, options)
    assert report["summary"]["resolved"] == 1, report["records"][0]


# ------------------------------------------------------------------------------------ attacks
@pytest.fixture(scope="module")
def hostile_image(tmp_path_factory):
    """A small image that brings what a sandbox must not honour: a setuid-root `id`, a device node
    (/dev/mem's numbers), /etc/passwd a link out of the image (to /etc/shadow, the image's own, which
    holds a marker; the host's must never be read), a link to the host's home, a world-writable
    directory; and it lacks /proc, /dev, /tmp, /testbed and /etc/hosts, mount points a run needs."""
    root = tmp_path_factory.mktemp("hostile-image")
    stage = root / "stage"
    stage_system(stage, programs=("sh", "bash", "cat", "id", "ls", "touch", "mkdir", "echo", "rm", "head", "ln",
                                  "stat", "chmod"))
    (stage / "etc" / "shadow").write_text("root:IMAGE-SHADOW-MARKER:19000:0:99999:7:::\n")
    (stage / "etc" / "passwd").symlink_to("../../../../../etc/shadow")
    (stage / "usr" / "local" / "bin").mkdir(parents=True)
    shutil.copy2(shutil.which("id"), stage / "usr" / "local" / "bin" / "suid-id")
    os.chmod(stage / "usr" / "local" / "bin" / "suid-id", 0o4755)
    (stage / "opt" / "open").mkdir(parents=True)
    os.chmod(stage / "opt" / "open", 0o777)
    os.mknod(stage / "opt" / "mem", 0o666 | stat.S_IFCHR, os.makedev(1, 1))
    (stage / "opt" / "home-link").symlink_to("/root")
    layout = root / "layout"
    _small_image(layout, "hostile:1", stage)
    cache = ImageCache(root / "cache")
    from swe_rl_jax.harness.images import ImageSource

    return cache.ensure(ImageSource("oci", layout, "hostile:1"))


@needs_bwrap
def test_what_an_image_brings_is_not_honoured_and_nothing_writes_it(hostile_image, repos, work, tmp_path):
    image = hostile_image
    before = _tree(image.rootfs)
    assert before["usr/local/bin/suid-id"][3] & 0o4000 and before["opt/mem"][0] == "special"
    host_shadow = [line.split(":")[1] for line in Path("/etc/shadow").read_text().splitlines()
                   if line.split(":")[1] not in ("", "*", "!", "!*")]
    host = {p: _tree(p) if p.is_dir() else p.read_bytes() for p in (Path("/etc/passwd"), repos)}
    inst = INSTANCES[0]
    script = ("echo uid $(id -u) $(/usr/local/bin/suid-id -u) $(/usr/local/bin/suid-id -ru)\n"
              "head -c 1 /opt/mem >/dev/null 2>&1 && echo MEM-READ || echo mem-refused\n"
              "cat /etc/passwd\n"
              "ls /opt/home-link/ 2>&1 | head -3\n"
              "for t in /opt/open/x /usr/local/bin/suid-id /etc/shadow /newfile /testbed/../etc/x; do\n"
              "  (echo pwned > $t) 2>/dev/null && echo WROTE $t || echo refused $t; done\n"
              "mkdir /opt/open/d 2>/dev/null && echo WROTE-DIR || echo refused-dir\n"
              "rm -f /etc/shadow 2>/dev/null; chmod 777 /usr/local/bin/suid-id 2>/dev/null\n"
              "ls -d /proc/1 /dev/null /tmp; echo tmp > /tmp/x && cat /tmp/x; pwd; echo end\n")
    with Workspace.open(repos / "quillsoft__configlet", inst.base_commit, image, RepoSpec(), isolation="bwrap",
                        work_dir=work, history_root=tmp_path / "histories") as ws:
        out = ws.run(script, Limits(timeout_s=30)).output
    uid = int(out.split("uid ", 1)[1].split()[0])
    assert uid >= UID_BASE and f"uid {uid} {uid} {uid}" in out, out  # setuid honoured by no one
    assert "mem-refused" in out and "MEM-READ" not in out
    assert "IMAGE-SHADOW-MARKER" in out and f"sandbox:x:{uid}:{uid}" in out  # the link read inside the image
    assert not any(secret in out for secret in host_shadow)
    assert "WROTE" not in out and out.count("refused") == 7, out
    assert "/proc/1" in out and "\ntmp\n/testbed\nend" in out, out
    assert _tree(image.rootfs) == before
    assert {p: _tree(p) if p.is_dir() else p.read_bytes() for p in host} == host


# ------------------------------------------------------------------------------------ bad input
@needs_bwrap
def test_a_missing_image_is_one_line_with_the_command_that_fetches_it(image_options, tmp_path, capsys):
    inst = {**json.loads((SAMPLE_DIR / "instances.jsonl").read_text().splitlines()[0]),
            "instance_id": "nobody__nothing-1"}
    instances = tmp_path / "instances.jsonl"
    instances.write_text(json.dumps(inst) + "\n")
    code = cli_main(["evaluate", "--gold", "--instances", str(instances), "--images", image_options.dir,
                     "--image-cache", image_options.cache, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    name = "swebench/sweb.eval.x86_64.nobody_1776_nothing-1:latest"
    assert code == 1 and err.startswith("error: every instance failed in the harness's set-up") and \
        "missing_image 1" in err, err
    record = json.loads((tmp_path / "out" / "report.json").read_text())["records"][0]
    assert record["error"] == "missing_image"
    assert record["message"].endswith(f"skopeo copy docker://docker.io/{name} oci:{image_options.dir}:{name}")


@pytest.mark.parametrize("case", ["images_is_a_file", "namespaces"])
def test_bad_image_options_exit_2_with_one_line(tmp_path, capsys, case):
    args = ["evaluate", "--sample", "--gold", "--out", str(tmp_path / "out")]
    if case == "images_is_a_file":
        (tmp_path / "file").write_text("")
        args += ["--images", str(tmp_path / "file")]
        expected = f"error: --images: {tmp_path / 'file'} is a file, not a directory"
    else:
        args += ["--images", str(tmp_path), "--isolation", "namespaces"]
        expected = "runs in images need bwrap isolation"
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


@needs_bwrap
def test_agent_rl_skips_an_instance_without_its_image_and_says_how_to_fetch_it(image_options, tmp_path, capsys):
    from swe_rl_jax.rl.agent_run import AgentRLConfig, usable_instances

    rows = [json.loads(line) for line in (SAMPLE_DIR / "instances.jsonl").read_text().splitlines()]
    path = tmp_path / "instances.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows[:2], {**rows[0], "instance_id": "nobody__nothing-1"}]))
    config = AgentRLConfig(instances=(str(path),))
    config = dataclasses.replace(config, agent=dataclasses.replace(config.agent, images=image_options))
    kept, skipped = usable_instances(config, RepoLocator())
    assert [i.instance_id for i in kept] == [r["instance_id"] for r in rows[:2]] and skipped == {"no_image": 1}
    name = "swebench/sweb.eval.x86_64.nobody_1776_nothing-1:latest"
    assert f"fetch it: skopeo copy docker://docker.io/{name} oci:{image_options.dir}:{name}" in capsys.readouterr().out


@needs_bwrap
def test_image_commands_names_each_missing_image_once(image_options, tmp_path, capsys):
    """tools/image_commands.py: a `skopeo copy` line per image the directory lacks, each once, none for
    the images it holds."""
    import image_commands

    rows = [json.loads(line) for line in (SAMPLE_DIR / "instances.jsonl").read_text().splitlines()]
    path = tmp_path / "instances.jsonl"
    missing = {**rows[0], "instance_id": "nobody__nothing-1"}
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, missing, {**missing, "patch": ""}]))
    assert image_commands.main(["--instances", str(path), "--images", image_options.dir]) == 0
    name = "swebench/sweb.eval.x86_64.nobody_1776_nothing-1:latest"
    assert capsys.readouterr().out == f"skopeo copy docker://docker.io/{name} oci:{image_options.dir}:{name}\n"
