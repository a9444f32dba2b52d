"""Benchmark: instances per second for building all five tasks on a mid-size repository.

Generates a synthetic repository (default 300 Python files of 136 lines each, in 10
packages, plus tests) and instances whose patches edit 1-3 files each (a changed line in a method,
a new function, a module-level constant), then times `build_dataset` (chars/4 token estimate
unless --tokenizer is given). Repository and patch generation are not timed.

    python tools/bench_data.py [--files 300] [--instances 50] [--repeat 3] [--tokenizer qwen]
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swe_rl_jax.data.builder import build_dataset  # noqa: E402
from swe_rl_jax.data.options import BuildOptions  # noqa: E402
from swe_rl_jax.data.records import SPLITS, SUBTASKS  # noqa: E402
from swe_rl_jax.data.sample import commit_all, init_repo, take_patch, write_files  # noqa: E402
from swe_rl_jax.data.sources import Instance, RepoLocator  # noqa: E402


def module_source(pkg: int, mod: int) -> str:
    lines = [f'"""Module {mod} of package {pkg}."""', "import math", "from collections import OrderedDict", "",
             f"LIMIT_{mod} = {mod * 7}", ""]
    for c in range(3):
        lines += ["", f"class Widget{c}:", f'    """Widget number {c}."""', "", "    size = 3", ""]
        for m in range(4):
            lines += ["    @property" if m == 0 else "    @staticmethod" if m == 3 else "",
                      f"    def method_{m}(self, x, y={m}):" if m != 3 else f"    def method_{m}(x, y={m}):",
                      f"        total = x * {m + 1} + y",
                      "        for i in range(3):",
                      "            total += math.sqrt(i)",
                      "        return total", ""]
    for f in range(4):
        lines += ["", f"def helper_{f}(values):", "    out = OrderedDict()", "    for v in values:",
                  f"        out[v] = v + {f}", "    return out", ""]
    return "\n".join(lines) + "\n"


def make_repo(root: Path, n_files: int) -> tuple[Path, dict[str, str], str]:
    repo = init_repo(root / "bench__synthetic")
    files = {}
    for i in range(n_files):
        pkg, mod = divmod(i, 30)
        files[f"synth/pkg{pkg}/module_{mod}.py"] = module_source(pkg, mod)
    for pkg in range((n_files + 29) // 30):
        files[f"synth/pkg{pkg}/__init__.py"] = f'"""Package {pkg}."""\n'
        files[f"tests/test_pkg{pkg}.py"] = "def test_nothing():\n    assert True\n"
    write_files(repo, files)
    return repo, files, commit_all(repo, "synthetic base")


def make_instances(repo: Path, files: dict[str, str], base: str, n: int, seed: int = 0) -> list[Instance]:
    rng = random.Random(seed)
    modules = sorted(p for p in files if "module_" in p)
    out = []
    for k in range(n):
        edits = {}
        for path in rng.sample(modules, rng.randint(1, 3)):
            text = files[path]
            kind = rng.randrange(3)
            if kind == 0:  # a changed line inside a method
                c, m = rng.randrange(3), rng.randrange(4)
                marker = f"    def method_{m}(self, x, y={m}):" if m != 3 else f"    def method_{m}(x, y={m}):"
                start = text.index(f"class Widget{c}:")
                at = text.index(marker, start)
                text = text[:at] + text[at:].replace(f"total = x * {m + 1} + y", f"total = x * {m + 2} - y", 1)
            elif kind == 1:  # a new top-level function
                text += f"\n\ndef added_{k}(x):\n    return helper_0([x])\n"
            else:  # a module-level constant
                text = text.replace("LIMIT_", "MAX_LIMIT_", 1)
            edits[path] = text
        write_files(repo, edits)
        out.append(Instance(f"bench__synthetic-{k}", "bench/synthetic", base,
                            f"Synthetic issue {k}: results are off by one.", take_patch(repo)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokenizer", default="", help="'' (chars/4), 'qwen' or a tokenizer directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_data_") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        repo, files, base = make_repo(root, args.files)
        instances = make_instances(repo, files, base, args.instances)
        setup = time.perf_counter() - t0
        options = BuildOptions(val_fraction=0.0, tokenizer=args.tokenizer)
        times = []
        for r in range(args.repeat):
            t0 = time.perf_counter()
            summary = build_dataset(instances, RepoLocator(root), options, root / f"out{r}")
            times.append(time.perf_counter() - t0)
    tasks = sum(summary["tasks_written"][s][t] for s in SPLITS for t in SUBTASKS)
    best = min(times)
    print(f"repository: {args.files} files ({len(files)} with tests and __init__), {args.instances} instances, "
          f"setup {setup:.1f}s (not timed)")
    print(f"{'tokenizer':<10} {'tasks':>6} {'best s':>8} {'median s':>9} {'inst/s':>8} {'tasks/s':>8}")
    median = sorted(times)[len(times) // 2]
    print(f"{args.tokenizer or 'chars/4':<10} {tasks:>6} {best:>8.2f} {median:>9.2f} "
          f"{args.instances / best:>8.1f} {tasks / best:>8.1f}")
    if summary["instances_skipped"] or any(summary["tasks_skipped"].values()):
        print("skipped:", summary["instances_skipped"], summary["tasks_skipped"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
