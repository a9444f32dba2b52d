"""Image mode's costs on the sample (docs/BENCHMARKS.md, "Images"): unpacking, disk, start-up.

The sample's SWE-bench-style images (tools/make_images.py), a fresh image cache:
- unpack: per source format (the OCI layout's entry, a `docker save` archive), the copy into the
  cache's layout (skopeo), `umoci unpack`, and what the harness adds (permissions, hard links to the
  image sharing its layers), from each image's image.json; the disk of its unpacked tree (`du`);
- a second instance of the same repository: its unpack, and the disk both images take together
  (`du` counts a hard-linked inode once) against the first alone, and the second's tree counted on
  its own (what it would take unshared);
- start-up: a run's set-up (a work tree and its sandbox: `Workspace.open`) and one command in it
  (`true`), image mode against the pip-spec mode on the same instance, `--repeats` times each,
  interleaved (the median); and a whole gold test run (`run_tests`) of the instance in each mode.

    python tools/bench_images.py [--repeats 10] [--out FILE.json]
    python tools/bench_images.py --testbeds REPORT.json --instances FILE --repos DIR [--env-cache DIR]

With `--testbeds` (the report of an `evaluate --gold` run of real instances, pip-spec mode): what an
image per instance would hold of its own, per instance: the repository's files at the base commit
(the sizes `git ls-tree -l` gives) and its history up to it (the history store the run made, `du`),
SWE-bench's `/testbed`; and the environment the run used (`du` of the cached virtualenv), per
(repository, version), which SWE-bench's images share between the instances of a version: the
figures docs/BENCHMARKS.md's disk per thousand instances is estimated from.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from make_images import sample_images  # noqa: E402
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos  # noqa: E402
from swe_rl_jax.data.sources import load_instances  # noqa: E402
from swe_rl_jax.harness import EnvironmentOptions, Limits, load_specs, run_tests  # noqa: E402
from swe_rl_jax.harness.defaults import resolve_spec  # noqa: E402
from swe_rl_jax.harness.environments import ensure_environment  # noqa: E402
from swe_rl_jax.harness.images import ImageCache, ImageOptions, find_image, swebench_image_name  # noqa: E402
from swe_rl_jax.harness.specs import spec_for  # noqa: E402
from swe_rl_jax.harness.workspace import Workspace  # noqa: E402


def du(*paths: Path) -> int:
    out = subprocess.run(["du", "-s", "-B1", "-c", *map(str, paths)], capture_output=True, text=True, check=True)
    return int(out.stdout.splitlines()[-1].split()[0])


def _ensure(cache: ImageCache, source, options: ImageOptions) -> dict:
    start = time.perf_counter()
    image = cache.ensure(source, options)
    total = time.perf_counter() - start
    info = json.loads((image.bundle / "image.json").read_text())
    return {"image": image, "seconds": round(total, 2), "umoci_unpack_seconds": info["unpack_seconds"],
            "harness_seconds": round(info["prepare_seconds"] - info["unpack_seconds"], 2),
            "copy_seconds": round(total - info["prepare_seconds"], 2), "rootfs_bytes": du(image.rootfs),
            "shared_with": info["shared_with"][:19]}


def _median_open(repo, commit, env, spec, work: Path, repeats: int, history: Path) -> tuple[float, float]:
    """Median seconds of `Workspace.open` and of one `true` in it."""
    opens, commands = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        with Workspace.open(repo, commit, env, spec, isolation="bwrap", work_dir=work, history_root=history) as ws:
            opens.append(time.perf_counter() - start)
            start = time.perf_counter()
            assert ws.run("true", Limits(timeout_s=10)).returncode == 0
            commands.append(time.perf_counter() - start)
    return statistics.median(opens), statistics.median(commands)


def testbeds(report: Path, instances_file: Path, repos: Path, env_cache: EnvironmentOptions) -> dict:
    """Per instance of a gold run's report: its /testbed's bytes (files at the base commit, history up
    to it) and its environment's; the means, and the environments per (repository, version)."""
    from swe_rl_jax.data.sources import RepoLocator
    from swe_rl_jax.harness.checkout import history_store

    records = {r["instance_id"]: r for r in json.loads(report.read_text())["records"]}
    locator = RepoLocator(repos)
    rows, envs = {}, {}
    for inst in load_instances(instances_file):
        repo = locator.find(inst.repo)
        listing = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-l", inst.base_commit],
                                 capture_output=True, text=True, check=True).stdout
        files = sum(int(line.split()[3]) for line in listing.splitlines() if line.split()[3] != "-")
        store = history_store(repo, inst.base_commit, env_cache.history_root())
        key = records[inst.instance_id]["environment"]
        envs.setdefault((inst.repo, inst.version), du(env_cache.root() / key))
        rows[inst.instance_id] = {"files_bytes": files, "history_bytes": du(store)}
    mean = lambda xs: round(statistics.mean(xs))  # noqa: E731
    return {"instances": rows, "environments": {f"{r}@{v}": b for (r, v), b in envs.items()},
            "mean_testbed_bytes": mean([r["files_bytes"] + r["history_bytes"] for r in rows.values()]),
            "mean_environment_bytes": mean(list(envs.values()))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", help="write the results as JSON here too")
    p.add_argument("--testbeds", metavar="REPORT", help="measure real instances' /testbed instead (docstring)")
    p.add_argument("--instances")
    p.add_argument("--repos")
    p.add_argument("--env-cache", default="")
    args = p.parse_args(argv)
    if args.testbeds:
        results = testbeds(Path(args.testbeds), Path(args.instances), Path(args.repos),
                           EnvironmentOptions(cache_dir=args.env_cache))
        print(json.dumps(results, indent=2))
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        return 0
    built = sample_images()
    instances = load_instances(SAMPLE_DIR / "instances.jsonl")
    specs = load_specs(SAMPLE_DIR / "specs.json")
    first, second = instances[0], instances[1]
    assert first.repo == second.repo
    results: dict = {"built": json.loads((built / "built.json").read_text())}
    with tempfile.TemporaryDirectory(prefix="bench-images-") as scratch:
        scratch = Path(scratch)
        options = ImageOptions(dir=str(built / "images"), cache=str(scratch / "cache"))
        cache = ImageCache(scratch / "cache")
        a = _ensure(cache, find_image(built / "images", swebench_image_name(first.instance_id)), options)
        b = _ensure(cache, find_image(built / "images", swebench_image_name(second.instance_id)), options)
        docker = _ensure(cache, find_image(built / "archives", swebench_image_name(first.instance_id)), options)
        # After both: hardlink links identical files within each tree too, so the first alone is measured again.
        one, both = du(a["image"].rootfs), du(a["image"].rootfs, b["image"].rootfs)
        results["unpack"] = {"first": {k: v for k, v in a.items() if k != "image"},
                             "second_same_repository": {**{k: v for k, v in b.items() if k != "image"},
                                                        "first_after_bytes": one, "both_bytes": both,
                                                        "added_bytes": both - one},
                             "docker_archive_of_first": {k: v for k, v in docker.items() if k != "image"},
                             "layout_bytes": du(cache.layout)}
        repos = make_sample_repos(scratch / "repos")
        repo = repos[first.repo]
        work = scratch / "work"
        work.mkdir()
        work.chmod(0o755)
        spec = resolve_spec(spec_for(first, specs), repo, first.base_commit)
        env = ensure_environment(spec.environment, EnvironmentOptions())
        image, image_spec = a["image"], spec.for_image()
        history = scratch / "histories"
        rows: dict[str, list] = {"pip-spec": [], "image": []}
        for _ in range(args.repeats):  # interleaved: a drift of the machine's load hits both alike
            rows["pip-spec"].append(_median_open(repo, first.base_commit, env, spec, work, 1, history))
            rows["image"].append(_median_open(repo, first.base_commit, image, image_spec, work, 1, history))
        results["startup"] = {mode: {"workspace_open_s": round(statistics.median(r[0] for r in rows[mode]), 3),
                                     "command_true_s": round(statistics.median(r[1] for r in rows[mode]), 3)}
                              for mode in rows}
        runs: dict[str, list] = {"pip-spec": [], "image": []}
        for _ in range(max(3, args.repeats // 2)):
            for mode, (e, s) in (("pip-spec", (env, spec)), ("image", (image, image_spec))):
                start = time.perf_counter()
                run = run_tests(repo, first.base_commit, first.patch, [*first.fail_to_pass, *first.pass_to_pass], e,
                                s, test_patch=first.test_patch, fail_to_pass=first.fail_to_pass,
                                limits=Limits(timeout_s=60), isolation="bwrap", work_dir=work, history_root=history)
                assert not run.error, run.message
                runs[mode].append(time.perf_counter() - start)
        results["gold_run_s"] = {mode: round(statistics.median(v), 3) for mode, v in runs.items()}
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
