"""Command-line options of the execution harness, shared by the commands that run tests
(`evaluate`, `synthesize`): one definition of each flag and of how it becomes `HarnessOptions`."""
from __future__ import annotations

import argparse

from swe_rl_jax.files import input_dir, output_dir
from swe_rl_jax.harness import EnvironmentOptions, HarnessOptions, Limits
from swe_rl_jax.harness.images import DEFAULT_REPO_PATH, SWEBENCH_NAMESPACE, ImageOptions
from swe_rl_jax.harness.sandbox import ISOLATION_MODES


def add_harness_arguments(p: argparse.ArgumentParser, defaults: HarnessOptions = HarnessOptions()) -> None:
    g = p.add_argument_group("test execution (harness)")
    env = defaults.env
    g.add_argument("--workers", type=int, default=defaults.workers, help="test runs at once (%(default)s)")
    g.add_argument("--timeout", type=float, default=defaults.limits.timeout_s,
                   help="CPU seconds per test run, all its processes together (%(default)s; a run is also "
                        "killed after 3x as many seconds of wall clock)")
    g.add_argument("--memory-mb", type=int, default=defaults.limits.memory_mb,
                   help="memory of a test run's processes together, and each one's address space (%(default)s)")
    g.add_argument("--disk-mb", type=int, default=defaults.limits.disk_mb,
                   help="size of a test run's own file system: work tree, HOME, TMPDIR, overlay (%(default)s)")
    g.add_argument("--max-files", type=int, default=defaults.limits.max_files,
                   help="files, directories and links on that file system (%(default)s)")
    g.add_argument("--max-processes", type=int, default=defaults.limits.max_processes,
                   help="processes and threads of a test run together (%(default)s)")
    g.add_argument("--env-cache", default=env.cache_dir, metavar="DIR",
                   help="cache of virtualenvs and base-commit histories (DIR/histories/; default: "
                        "$SWE_RL_JAX_ENV_CACHE or ~/.cache/swe_rl_jax/envs)")
    g.add_argument("--index-url", default=env.index_url, help="pip --index-url (default: pip's configuration)")
    g.add_argument("--isolation", default=defaults.isolation, choices=ISOLATION_MODES,
                   help="sandbox mode (%(default)s: bwrap, else namespaces, where the machine allows)")
    g.add_argument("--work-dir", default=defaults.work_dir, metavar="DIR", help="where worktrees are made")
    g.add_argument("--keep-worktrees", action="store_true", help="leave each run's worktree for inspection")
    g.add_argument("--max-failing-sentinels", type=int, default=defaults.max_failing_sentinels, metavar="K",
                   help="must-fail sentinel tests per pytest run at most (%(default)s; more: a smaller chance that a "
                        "forger goes unnoticed, ~8 ms each; docs/HARNESS.md)")
    g.add_argument("--hash-seed", type=int, default=defaults.hash_seed, metavar="N",
                   help="the tests' PYTHONHASHSEED (%(default)s; tools/validate_seeds.py varies it)")
    g.add_argument("--images", metavar="DIR", default="",
                   help="run each instance in its dataset's container image from DIR (an OCI layout that skopeo "
                        "copied images into, or per-image OCI layouts, OCI archives, docker save archives; "
                        "docs/HARNESS.md, \"Images\"); --repos becomes optional")
    g.add_argument("--image-namespace", default=SWEBENCH_NAMESPACE, metavar="NS",
                   help="namespace of SWE-bench's image names for rows that name no image (%(default)s; "
                        "SWE-rebench's: swerebench)")
    g.add_argument("--image-repo-path", default=DEFAULT_REPO_PATH, metavar="PATH",
                   help="where the images keep the repository (%(default)s)")
    g.add_argument("--image-cache", default="", metavar="DIR",
                   help="where images are unpacked (default: the environment cache's images/)")


def _directory(path: str, flag: str) -> str:
    """`path` absolute and checked as a directory this run may write into ("" stays "": the default)."""
    return str(output_dir(path, flag)) if path else ""


def harness_options(args: argparse.Namespace) -> HarnessOptions:
    """The options, their directories made absolute and checked before any test runs (a file given
    as `--work-dir` or `--env-cache` is an InputError naming the flag, a missing `--images` one naming it)."""
    images = ImageOptions(dir=str(input_dir(args.images, "--images")) if args.images else "",
                          namespace=args.image_namespace, repo_path=args.image_repo_path,
                          cache=_directory(args.image_cache, "--image-cache"))
    limits = Limits(timeout_s=args.timeout, memory_mb=args.memory_mb, disk_mb=args.disk_mb, max_files=args.max_files,
                    max_processes=args.max_processes)
    return HarnessOptions(workers=args.workers, limits=limits,
                          env=EnvironmentOptions(cache_dir=_directory(args.env_cache, "--env-cache"),
                                                 index_url=args.index_url),
                          isolation=args.isolation, work_dir=_directory(args.work_dir, "--work-dir"),
                          keep_worktrees=args.keep_worktrees, max_failing_sentinels=args.max_failing_sentinels,
                          hash_seed=args.hash_seed, images=images)
