"""Benchmark: instances per second for building all five tasks.

Synthetic (default): generates a repository (default 300 Python files of 136 lines each, in 10
packages, plus tests) and instances whose patches edit 1-3 files each (a changed line in a method,
a new function, a module-level constant), then times `build_dataset` (chars/4 token estimate
unless --tokenizer is given). Repository and patch generation are not timed.

    python tools/bench/bench_data.py [--files 300] [--instances 50] [--repeat 3] [--tokenizer qwen]

Real (`--real FILE --repos DIR`): instances mined from real repositories (a JSONL file,
clones under DIR), built side by side in one run, each build a fresh process (`build-data`'s
`build_from_sources`): the single-process build, `--workers 2` and Beam's DirectRunner with 2
processes, with the default options and with `--tree-outline --tree-retrieval 3`; records per
second, the ratio to the single process, peak RSS (the build process's VmHWM; ru_maxrss of its
largest worker, which Linux starts from the build process's peak at the fork). Then
peak RSS of the single-process build on 4x the input (`4 * --limit` instances). With `--baseline
CODE_DIR` (another checkout, e.g. one before the streaming build) the outline build of that code and of this one
on the same `--baseline-limit` consecutive instances of the largest repository. Other subsets take
rows evenly spaced through the file, so that each holds every repository.

    python tools/bench/bench_data.py --real mined.jsonl --repos DIR [--limit 500] [--outline-limit 100] \
        [--baseline CODE_DIR] [--baseline-limit 12]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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


# One build in a fresh process, with the code on PYTHONPATH (this checkout or --baseline's); uses
# only `build_from_sources(sources, options, mining, out, progress)`, which both have.
_CHILD = """
import json, resource, sys, time
from swe_rl_jax.data import build
from swe_rl_jax.data.options import BuildOptions, MiningOptions
spec = json.loads(sys.argv[1])
sources = build.BuildSources(instances=(spec["instances"],), repos=spec["repos"])
options = BuildOptions(**spec["options"])
engine = {"engine": build.Engine(**spec["engine"])} if spec["engine"] else {}
t0 = time.perf_counter()
summary = build.build_from_sources(sources, options, MiningOptions(), spec["out"], False, **engine)
seconds = time.perf_counter() - t0
records = sum(n for split in summary["tasks_written"].values() for n in split.values())
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child would report the
# benchmark process's own peak.
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "records": records, "instances": summary["instances_read"],
                  "rss_mb": int(hwm.split()[1]) / 1024,
                  "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""
OUTLINE = {"tree_outline": True, "tree_retrieval": 3}
ENGINES = {"1 process": {"workers": 1}, "--workers 2": {"workers": 2},
           "beam direct 2": {"workers": 2, "beam": True}}


def subset(rows: list[str], n: int) -> list[str]:
    """`n` rows evenly spaced through `rows` (every repository of a file grouped by repository)."""
    return [rows[i * len(rows) // n] for i in range(min(n, len(rows)))]


def run_build(code: Path, instances: Path, repos: Path, options: dict, engine: dict, out: Path) -> dict:
    spec = {"instances": str(instances), "repos": str(repos), "options": options, "engine": engine, "out": str(out)}
    env = {**os.environ, "PYTHONPATH": str(code)}
    # Run outside any checkout: `python -c` puts the working directory first on sys.path.
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], env=env, capture_output=True, text=True,
                          cwd=out.parent)
    if proc.returncode:
        raise SystemExit(f"build failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def real(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parents[2]
    rows = [line for line in Path(args.real).read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory(prefix="bench_data_") as tmp:
        tmp = Path(tmp)

        def input_of(n: int) -> Path:
            path = tmp / f"instances_{n}.jsonl"
            if not path.exists():
                path.write_text("\n".join(subset(rows, n)) + "\n")
            return path

        print(f"input: {args.real}, {len(rows)} rows; clones in {args.repos}")
        print(f"{'options':<20} {'engine':<14} {'inst':>5} {'records':>7} {'s':>8} {'rec/s':>7} {'x 1 proc':>8} "
              f"{'RSS MB':>7} {'worker MB':>9}")

        def row(label: str, engine: str, r: dict, base: float | None) -> None:
            rate = r["records"] / r["seconds"]
            ratio = f"{rate / base:.2f}" if base else "-"
            print(f"{label:<20} {engine:<14} {r['instances']:>5} {r['records']:>7} {r['seconds']:>8.1f} {rate:>7.2f} "
                  f"{ratio:>8} {r['rss_mb']:>7.0f} {r['child_rss_mb']:>9.0f}", flush=True)
            return rate

        outputs: dict[str, list[Path]] = {}
        results = {}
        for label, options in (() if args.baseline_only else (("default", {}), ("outline+retrieval", OUTLINE))):
            n = args.limit if label == "default" else args.outline_limit
            base = None
            for engine, spec in ENGINES.items():
                out = tmp / f"out_{label}_{engine.replace(' ', '_')}"
                results[label, engine] = r = run_build(root, input_of(n), Path(args.repos), options, spec, out)
                rate = row(label, engine, r, base)
                base = base or rate
                outputs.setdefault(label, []).append(out)
        for label, outs in outputs.items():
            same = all(_records(o) == _records(outs[0]) for o in outs[1:])
            print(f"{label}: records of the three engines equal: {same}")
        if not args.baseline_only:
            print("\npeak RSS against input size (default options, 1 process):")
            quarter = results["default", "1 process"]
            full = run_build(root, input_of(4 * args.limit), Path(args.repos), {}, {"workers": 1}, tmp / "f")
            print(f"  {quarter['instances']} instances: {quarter['rss_mb']:.0f} MB; {full['instances']} instances: "
                  f"{full['rss_mb']:.0f} MB; ratio {full['rss_mb'] / quarter['rss_mb']:.2f}")
        if args.baseline:
            # A run of consecutive commits of the largest repository, as a build meets them.
            repo = collections.Counter(json.loads(r)["repo"] for r in rows).most_common(1)[0][0]
            block = [r for r in rows if json.loads(r)["repo"] == repo][:args.baseline_limit]
            (tmp / "block.jsonl").write_text("\n".join(block) + "\n")
            print(f"\n--tree-outline, 1 process, {len(block)} consecutive instances of {repo}: "
                  f"{args.baseline} against this checkout")
            outline = {"tree_outline": True}
            old = run_build(Path(args.baseline), tmp / "block.jsonl", Path(args.repos), outline, {}, tmp / "old")
            new = run_build(root, tmp / "block.jsonl", Path(args.repos), outline, {}, tmp / "new")
            same = _records(tmp / "old") == _records(tmp / "new")
            print(f"  baseline {old['records'] / old['seconds']:.2f} rec/s ({old['seconds']:.1f} s), this "
                  f"{new['records'] / new['seconds']:.2f} rec/s ({new['seconds']:.1f} s): "
                  f"{(new['records'] / new['seconds']) / (old['records'] / old['seconds']):.1f}x; records equal: {same}")
    return 0


def _records(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*.jsonl"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokenizer", default="", help="'' (chars/4), 'qwen' or a tokenizer directory")
    parser.add_argument("--real", metavar="FILE", help="instances mined from real repositories (JSONL)")
    parser.add_argument("--repos", metavar="DIR", help="with --real: the clones")
    parser.add_argument("--limit", type=int, default=500, help="with --real: instances built (and 4x for RSS)")
    parser.add_argument("--outline-limit", type=int, default=100,
                        help="with --real: instances built with --tree-outline --tree-retrieval 3")
    parser.add_argument("--baseline", metavar="CODE_DIR", help="with --real: another checkout to compare")
    parser.add_argument("--baseline-limit", type=int, default=12)
    parser.add_argument("--baseline-only", action="store_true", help="with --baseline: only that comparison")
    args = parser.parse_args()
    if args.real:
        if not args.repos:
            parser.error("--real needs --repos DIR")
        return real(args)
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
