"""Repository cross-validation of the main job: each sample repository is the unseen (held-out)
one once, every fold with the same config, and the folds' tables side by side with their mean.

A fold is one `main` run with `held_out_repo=<repository>` in `<out>/<owner>__<name>/` (its own
process, so no fold inherits another's memory); `cross_validation_table` reads the folds'
`results.json` back. The tool is `tools/research/cross_validate.py`; docs/RESULTS.md has the measured table.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from swe_rl_jax.data.build import BuildOptions, build_sample
from swe_rl_jax.data.records import read_split_records
from swe_rl_jax.data.sample import load_manifest
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.eval.baselines import BASELINES, baseline_outcomes
from swe_rl_jax.eval.stats import wilson_interval

MODELS = ("base", "sft", "sft_rl")


def sample_repos() -> list[str]:
    """The shipped sample's repositories, in manifest order."""
    return [spec["repo"] for spec in load_manifest()["repos"]]


def fold_dir(out: str | Path, repo: str) -> Path:
    return Path(out) / repo.replace("/", "__")


def run_fold(out: str | Path, repo: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """One fold: `main` with `repo` held out, its output in `fold_dir(out, repo)`, its log in
    `main.log` there. Returns (and writes as `fold.json`) the command, exit status and seconds."""
    directory = fold_dir(out, repo)
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "swe_rl_jax.cli", "main", f"out_dir={directory}", f"held_out_repo={repo}",
               *overrides]
    start = time.perf_counter()
    with open(directory / "main.log", "w") as log:
        rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    fold = {"repo": repo, "command": command[1:], "returncode": rc, "seconds": round(time.perf_counter() - start, 1)}
    (directory / "fold.json").write_text(json.dumps(fold, indent=2) + "\n")
    return fold


def _fold_row(results: dict[str, Any], style: str) -> dict[str, Any]:
    part = results["by_issue_style"][style]
    table, comparisons, strongest = part["table"], part["comparisons"], part["strongest_baseline"]
    row = {name: table[name]["file_hit"] for name in (*MODELS, *BASELINES) if name in table}
    row["n"] = table["sft_rl"]["file_n"]
    row["strongest"] = strongest
    diff = comparisons.get(f"sft_rl - {strongest}", {})
    row["sft_rl_minus_strongest"] = diff.get("file_hit", math.nan)
    row["ci"] = diff.get("ci", [math.nan, math.nan])
    return row


def cross_validation_table(out: str | Path, repos: Sequence[str]) -> dict[str, Any]:
    """Per issue style, each fold's held-out file hit of the models and baselines, the strongest
    baseline and SFT+RL's paired difference to it, and the mean over the folds that finished."""
    folds = {}
    for repo in repos:
        path = fold_dir(out, repo) / "results.json"
        if path.is_file():
            folds[repo] = json.loads(path.read_text())
    if not folds:
        raise FileNotFoundError(f"no fold of {list(repos)} has a results.json under {out}")
    styles = list(next(iter(folds.values()))["by_issue_style"])
    tables = {}
    for style in styles:
        rows = {repo: _fold_row(results, style) for repo, results in folds.items()}
        columns = [c for c in (*MODELS, *BASELINES) if all(c in r for r in rows.values())]
        mean = {c: sum(r[c] for r in rows.values()) / len(rows) for c in columns + ["sft_rl_minus_strongest"]}
        mean["beats_strongest"] = sum(r["ci"][0] > 0 for r in rows.values())
        tables[style] = {"folds": rows, "columns": columns, "mean": mean}
    seconds = {repo: json.loads((fold_dir(out, repo) / "fold.json").read_text())["seconds"]
               for repo in folds if (fold_dir(out, repo) / "fold.json").is_file()}
    return {"folds": list(folds), "missing": [r for r in repos if r not in folds], "tables": tables,
            "seconds": seconds, "config": next(iter(folds.values()))["config"]}


def baseline_fold(out: str | Path, repo: str, styles: Sequence[str], max_examples: int = 64) -> dict[str, Any]:
    """The trivial baselines alone on one fold (no model, seconds instead of a main run): the
    sample built with `repo` held out, per issue style the held-out file hit of every baseline on
    the first `max_examples` held-out file-localization records, and the strongest one's 95 %
    Wilson interval."""
    directory = fold_dir(out, repo)
    rows = {}
    for style in styles:
        records = directory / f"records_{style}"
        build_sample(records, BuildOptions(held_out_repos=(repo,)), synthesized=True, repos_dir=directory / "repos",
                     issue_style=style)
        held_out = read_split_records(records, "validation", ("file_localization",), max_examples)
        train = read_split_records(records, "train", ("file_localization",))
        outcomes = baseline_outcomes(held_out, RepoLocator(directory / "repos"), train)
        row: dict[str, Any] = {name: sum(o.hit for o in items) / len(items) for name, items in outcomes.items()}
        strongest = max(BASELINES, key=lambda name: row[name])
        row.update(n=len(held_out), strongest=strongest,
                   ci=list(wilson_interval(sum(o.hit for o in outcomes[strongest]), len(held_out))))
        rows[style] = row
    return rows


def format_baseline_folds(folds: dict[str, dict[str, Any]]) -> str:
    lines = []
    for style in next(iter(folds.values())):
        lines += [f"Held-out file hit of the trivial baselines, issue texts in the {style} style:", "",
                  "| held-out repository (n) | " + " | ".join(BASELINES) + " | strongest [95% CI] |",
                  "|---|" + "---|" * (len(BASELINES) + 1)]
        for repo, rows in folds.items():
            row = rows[style]
            low, high = row["ci"]
            lines.append(f"| {repo} ({row['n']}) | " + " | ".join(f"{row[name]:.3f}" for name in BASELINES)
                         + f" | {row['strongest']} {row[row['strongest']]:.3f} [{low:.3f}, {high:.3f}] |")
        lines.append("")
    return "\n".join(lines)


def format_cross_validation(report: dict[str, Any]) -> str:
    lines = []
    for style, part in report["tables"].items():
        columns = part["columns"]
        lines += [f"Held-out file hit, issue texts in the {style} style:", "",
                  "| held-out repository (n) | " + " | ".join(columns) + " | strongest baseline | sft_rl - strongest "
                  "[paired 95% CI] |", "|---|" + "---|" * (len(columns) + 2)]
        for repo, row in part["folds"].items():
            low, high = row["ci"]
            lines.append(f"| {repo} ({row['n']}) | " + " | ".join(f"{row[c]:.3f}" for c in columns)
                         + f" | {row['strongest']} | {row['sft_rl_minus_strongest']:+.3f} [{low:+.3f}, {high:+.3f}] |")
        mean = part["mean"]
        lines.append(f"| **mean of {len(part['folds'])} folds** | " + " | ".join(f"{mean[c]:.3f}" for c in columns)
                     + f" | | {mean['sft_rl_minus_strongest']:+.3f} (beats it in {mean['beats_strongest']} of "
                     f"{len(part['folds'])}) |")
        lines.append("")
    if report["missing"]:
        lines.append(f"Folds without results: {', '.join(report['missing'])}")
    return "\n".join(lines).rstrip() + "\n"
