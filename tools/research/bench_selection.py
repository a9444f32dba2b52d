"""The selection rules measured on real SWE-bench instances with a scripted policy (docs/RESULTS.md).

No model here writes useful patches, so this measures the choosing itself: a recorded-answers file
(policies/recorded.py) plays the policy, and for every instance it offers the gold patch among
wrong patches that outnumber it. `resolve` runs it with the regression and reproduction tests on,
`rerank` applies each rule to the trace, and the harness (`evaluate`) judges each rule's choices.

    python tools/research/bench_selection.py answers --instances I.jsonl --repos DIR --out W/answers.jsonl [--seed 0]
    python tools/research/bench_selection.py run --instances I.jsonl --repos DIR --work W --env-cache C \
        [--config configs/agentless.yaml] [--workers 2] [key=value ...]
    python tools/research/bench_selection.py table --work W            # the table again, from W's files

The scripted policy, per instance (every choice below is deterministic; the sample order is a
shuffle seeded by (seed, instance id)):
- localization (`/file`, `/function`, `/line`): the gold patch's files, the items enclosing its
  changed lines and those lines (and the function the `breaks` answers edit, its first line), so
  the run is never limited by localization and every repair below lies in the shown code;
- repair (`/repair`), 8 answers in SEARCH/REPLACE blocks (`sft.ground_truth.render_edit`):
  `gold` x2 (identical); `breaks` x3: the gold fix plus `raise RuntimeError(...)` as the first
  statement of another function of the same file, the one whose name the instance's test files
  mention most (existing tests exercise it: the regression tests catch it), twice identical and
  once with a comment (the same change written differently); `no_fix` x3: the base code with an
  inert statement (`if False: pass`) at the top of the function the gold patch edits, which keeps
  every existing test passing and fixes nothing (only a reproduction test catches it), written
  the same two ways. Each wrong kind outnumbers gold, so the plain vote picks a wrong patch;
- reproduction (`/reproduction`), 4 answers: `repro` x2 (the second with comments: one normalized
  form) is written from the issue's own FAIL_TO_PASS tests (an id whose parameter SWE-bench cut at
  a space or newline, `test_x[select`, runs its whole test function): it writes the test patch's version of
  the test files in place, runs pytest on those tests with the running interpreter, restores the
  files and prints "Issue resolved" (all pass), "Issue reproduced" (a test fails or does not
  collect) or "Other issues"; `never` prints "Issue resolved" whatever happens (it cannot
  reproduce the issue at base: dropped); `all_markers` prints all three (dropped);
- regression selection (`/regression_selection`, asked when `verification.regression_selection`
  is on, as configs/agentless.yaml has it), 1 answer: the issue's FAIL_TO_PASS tests (as
  `runnable_ids` writes them; those that exist at base check the behaviour the fix changes) and
  the existing test functions whose lines the instance's test patch changes (`path::Class::test_f`,
  naming every parametrization): what a model that foresaw the fix's test changes would name, an
  upper bound on what the selection can do, not a model's answer.

`run` writes W/answers.jsonl (and W/kinds.json: the kind of every sample), then runs, with the
CLI, `resolve` (the config, recorded answers, verification on), `rerank` per rule and `evaluate`
per rule, and prints the table (W/table.md): per rule, %Resolved of the chosen patches (of the
instances whose gold patch resolves: W/gold/report.json, run first if absent), the kinds chosen,
the instances whose choice differs from the plain vote, and the test runs and seconds per instance
of the `resolve` run. Results: docs/RESULTS.md, "Selection rules on SWE-bench Lite".
"""
from __future__ import annotations

import argparse
import ast
import collections
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from swe_rl_jax.data.patches import apply_file_change, changed_old_lines, parse_patch  # noqa: E402
from swe_rl_jax.data.pysource import Item, enclosing_item, outline, parse_source  # noqa: E402
from swe_rl_jax.data.sources import InputError, Instance, RepoLocator, load_instances, run_git  # noqa: E402
from swe_rl_jax.resolve.selection import RULES  # noqa: E402
from swe_rl_jax.resolve.testcache import TestCache, run_key  # noqa: E402
from swe_rl_jax.sft.ground_truth import render_edit, render_localization  # noqa: E402

REPAIR_PLAN = ("gold", "gold", "breaks", "breaks", "breaks_restyled", "no_fix", "no_fix", "no_fix_restyled")
REPRO_PLAN = ("repro", "repro_restyled", "never", "all_markers")
BREAK = 'raise RuntimeError("broken by a wrong patch")'
INERT = "if False:\n    pass"


def kind_of(name: str) -> str:
    """The kind a plan entry counts as (a restyled answer is the same change)."""
    return name.removesuffix("_restyled")


# ---------------------------------------------------------------- editing functions


def _first_body_line(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(0-based line index before which a statement goes at the top of the body, its column): after
    the docstring, if any."""
    body = node.body
    doc = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
           and isinstance(body[0].value.value, str))
    if doc and len(body) > 1:
        return body[1].lineno - 1, body[1].col_offset
    if doc:
        return body[0].end_lineno, body[0].col_offset  # type: ignore[return-value]
    return body[0].lineno - 1, body[0].col_offset


def _function_node(tree: ast.Module, item: Item) -> ast.FunctionDef | ast.AsyncFunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= item.end \
                and min([node.lineno] + [d.lineno for d in node.decorator_list]) == item.start:
            return node
    raise ValueError(f"no function at line {item.start}")


def insert_statement(source: str, item: Item, statement: str, comment: str = "") -> str:
    """`source` with `statement` (lines, relative indentation kept) at the top of `item`'s body,
    after its docstring; `comment` (a `# ...` line) above it when given."""
    lines = source.split("\n")
    at, col = _first_body_line(_function_node(parse_source(source), item))
    pad = " " * col
    new = ([pad + comment] if comment else []) + [pad + s for s in statement.split("\n")]
    return "\n".join(lines[:at] + new + lines[at:])


def functions(items: Sequence[Item]) -> list[Item]:
    return [i for i in items if i.kind == "function"]


def edited_function(source: str, lines: Sequence[int]) -> Item:
    """The function the changed lines fall in (the first that does); a change in a class body
    outside its methods picks the class's method just before it (else its first); a change at the
    module level only, the first function after it, else the first one."""
    items = outline(parse_source(source))
    for line in lines:
        item = enclosing_item(items, line)
        if item is not None and item.kind == "function":
            return item
        if item is not None:  # a class: its methods
            methods = [i for i in functions(items) if item.start <= i.start <= item.end]
            before = [m for m in methods if m.start <= line]
            if methods:
                return before[-1] if before else methods[0]
    after = [i for i in functions(items) if i.start > min(lines)]
    return (after or functions(items))[0]


def victim_function(source: str, avoid: Sequence[tuple[int, int]], tests_text: str) -> Item:
    """The function of `source` (outside the `avoid` spans) whose name the tests mention most
    (`__init__`: its class's name); ties to the first in the file."""
    words = collections.Counter(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", tests_text))
    best, score = None, -1
    for item in functions(outline(parse_source(source))):
        if any(item.start <= hi and lo <= item.end for lo, hi in avoid):
            continue
        cls, _, name = item.qualname.rpartition(".")
        n = words[cls] if name == "__init__" else (0 if name.startswith("__") else words[name])
        if n > score:
            best, score = item, n
    if best is None:
        raise ValueError("no function to break outside the gold change")
    return best


# ---------------------------------------------------------------- the scripted answers


def _show(repo: Path, commit: str, path: str) -> str:
    try:
        return run_git(repo, "show", f"{commit}:{path}").decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 at the base commit") from None


def _patched(repo: Path, commit: str, patch: str) -> tuple[dict[str, str], dict[str, str], dict[str, list[int]]]:
    """(old files, new files, changed old lines per file) of a patch at `commit`."""
    old, new, changed = {}, {}, {}
    for change in parse_patch(patch):
        path = change.path
        old[path] = _show(repo, commit, path) if change.old_path else ""
        if change.new_path:  # a rename lands at its new path; a deleted file has no new content
            new[change.new_path] = apply_file_change(old[path], change)
        changed[path] = changed_old_lines(change)
    return old, new, changed


def repro_script(files: dict[str, str], tests: Sequence[str], restyled: bool = False) -> str:
    """A standalone reproduction script from the issue's FAIL_TO_PASS tests (see the docstring)."""
    comment = "# The issue's own failing tests, in the test patch's version of their files.\n" if restyled else ""
    return f'''import os
import subprocess
import sys

{comment}FILES = {files!r}
TESTS = {list(tests)!r}

saved = {{}}
try:
    for path, text in FILES.items():
        saved[path] = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                         capture_output=True, text=True)
    code = run.returncode
except OSError:
    code = -1
finally:
    for path, text in saved.items():
        if text is None:
            os.remove(path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
if code == 0:
    print("Issue resolved")
elif code in (1, 2):
    print("Issue reproduced")
else:
    print("Other issues")
'''


def runnable_ids(tests: Sequence[str]) -> list[str]:
    """The FAIL_TO_PASS ids as pytest can select them: an id whose parameter part was cut (SWE-bench's
    ids end at the first space or newline of a parameter, e.g. `test_x[select`) selects its whole
    test function instead; duplicates dropped."""
    return list(dict.fromkeys(t.split("[", 1)[0] if "[" in t and not t.endswith("]") else t for t in tests))


def _fenced(script: str) -> str:
    return f"```python\n{script}```"


def changed_tests(tests_old: dict[str, str], changed: dict[str, list[int]]) -> list[str]:
    """The pytest ids (without parameters) of the test functions (`test*`) at base whose lines a
    patch changes, in path and line order; module-level changes, fixtures and files new in the
    patch name none."""
    ids = []
    for path in sorted(changed):
        if not (path.endswith(".py") and tests_old.get(path)):
            continue
        items = outline(parse_source(tests_old[path]))
        for n in changed[path]:
            item = enclosing_item(items, n)
            if item is not None and item.kind == "function" and item.qualname.rsplit(".", 1)[-1].startswith("test"):
                ids.append(f"{path}::{item.qualname.replace('.', '::')}")
    return list(dict.fromkeys(ids))


USELESS = {
    "never": 'print("Issue resolved")\n',
    "all_markers": 'print("Issue reproduced")\nprint("Issue resolved")\nprint("Other issues")\n',
}


def _targets(py: Sequence[str], old: dict[str, str], gold: dict[str, str], changed: dict[str, list[int]],
             located: dict[str, list[Item | None]], tests_text: str) -> tuple[str, Item, Item]:
    """(file, the function its gold change edits, the function to break) in the first gold-edited
    file (path order) that has both."""
    for target in py:
        if len(functions(outline(parse_source(old[target])))) < 2:
            continue
        edited = edited_function(old[target], changed[target])
        # The break goes into the gold-fixed file, outside every item the gold patch changes there.
        touched = {e.qualname for e in located[target] if e and e.kind == "function"} | {edited.qualname}
        fixed_spans = [(i.start, i.end) for i in outline(parse_source(gold[target])) if i.qualname in touched]
        try:
            return target, edited, victim_function(gold[target], fixed_spans, tests_text)
        except ValueError:
            continue
    raise ValueError("no gold-edited file has a function to break outside the gold change")


def scripted_answers(inst: Instance, repo: Path, seed: int) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The recorded answers of one instance and the kind of each repair / reproduction sample."""
    old, gold, changed = _patched(repo, inst.base_commit, inst.patch)
    tests_old, tests_new, tests_changed = _patched(repo, inst.base_commit, inst.test_patch)
    py = sorted(p for p in gold if p.endswith(".py") and old[p])
    if not py:
        raise ValueError("the gold patch edits no existing Python file")
    located = {p: [enclosing_item(outline(parse_source(old[p])), n) for n in changed[p]] for p in py}
    tests_text = "\n".join(tests_old.values())
    target, edited, victim = _targets(py, old, gold, changed, located, tests_text)
    variants = {
        "gold": gold,
        "breaks": {**gold, target: insert_statement(gold[target], victim, BREAK)},
        "breaks_restyled": {**gold, target: insert_statement(gold[target], victim, BREAK,
                                                             "# Fail early on this path.")},
        "no_fix": {target: insert_statement(old[target], edited, INERT)},
        "no_fix_restyled": {target: insert_statement(old[target], edited, INERT, "# Guard.")},
    }
    rng = random.Random(f"{seed}/{inst.instance_id}")
    repair = list(REPAIR_PLAN)
    rng.shuffle(repair)
    repro = list(REPRO_PLAN)
    rng.shuffle(repro)
    # Localization also names the function the `breaks` answers edit, so every scripted repair lies
    # in the shown code (as `search_in_shown` requires of a SEARCH).
    broken = next(i for i in outline(parse_source(old[target])) if i.qualname == victim.qualname)
    func_items = [(p, i.qualname if i else "") for p in py for i in located[p]] + [(target, victim.qualname)]
    line_items = [(p, n) for p in py for n in changed[p]] + [(target, broken.start)]
    ids = runnable_ids(inst.fail_to_pass)
    scripts = {"repro": repro_script(tests_new, ids), "repro_restyled": repro_script(tests_new, ids, restyled=True),
               **USELESS}
    iid = inst.instance_id
    rows = [
        {"task_id": f"{iid}/file", "response": render_localization("file_localization", py)},
        {"task_id": f"{iid}/function",
         "response": render_localization("function_localization", list(dict.fromkeys(func_items)))},
        {"task_id": f"{iid}/line", "response": render_localization("line_localization", line_items)},
        {"task_id": f"{iid}/repair", "responses": [render_edit(old, variants[k]) for k in repair]},
        {"task_id": f"{iid}/reproduction", "responses": [_fenced(scripts[k]) for k in repro]},
        {"task_id": f"{iid}/regression_selection", "response": "```\n" + "".join(
            f"{t}\n" for t in dict.fromkeys([*ids, *changed_tests(tests_old, tests_changed)])) + "```"},
    ]
    kinds = {"repair": [kind_of(k) for k in repair], "reproduction": [kind_of(k) for k in repro],
             "edited": [target, edited.qualname], "broken": [target, victim.qualname]}
    return rows, kinds


def write_answers(instances_path: str, repos: str, out: Path, seed: int) -> tuple[dict[str, Any], dict[str, str]]:
    """Writes the recorded answers (`out`) and the kinds (`out`'s folder / kinds.json); returns the
    kinds and the instances skipped, with why (no answers are written for them)."""
    locator = RepoLocator(repos)
    rows, kinds, skipped = [], {}, {}
    for inst in load_instances(instances_path):
        repo = locator.find(inst.repo)
        if repo is None:
            raise InputError(f"no clone of {inst.repo} under {repos}")
        try:
            r, k = scripted_answers(inst, Path(repo), seed)
        except ValueError as e:  # SourceSyntaxError and PatchError too
            skipped[inst.instance_id] = str(e)
            print(f"skipped {inst.instance_id}: {e}", file=sys.stderr)
            continue
        rows += r
        kinds[inst.instance_id] = k
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out.parent / "kinds.json").write_text(json.dumps(kinds, indent=1) + "\n")
    return kinds, skipped


# ---------------------------------------------------------------- the measurement


def _cli(args: Sequence[str], log: Path) -> float:
    """Runs `python -m swe_rl_jax.cli ARGS` (its output to `log`); its wall seconds. Exits on failure."""
    command = [sys.executable, "-m", "swe_rl_jax.cli", *args]
    print("$ " + " ".join(command), flush=True)
    start = time.perf_counter()
    with log.open("w") as f:
        code = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if code != 0:
        raise SystemExit(f"error: the command above exited {code}; its output: {log}")
    return time.perf_counter() - start


def _report(path: Path) -> dict[str, bool]:
    """instance id -> resolved, from an `evaluate` report."""
    report = json.loads(path.read_text())
    return {r["instance_id"]: bool(r.get("resolved")) for r in report["records"]}


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["instance_id"]: r for r in map(json.loads, path.read_text().splitlines()) if r}


def used_runs(row: dict[str, Any], cache: TestCache) -> list[dict[str, Any]]:
    """The cached results of every test run a trace row's choices rest on (whichever session of the
    run executed them): the regression runs at base and on each distinct candidate, every script at
    base and each kept script on each distinct candidate."""
    iid = row["instance_id"]
    patches = list({c["key_sha"]: c["patch"] for c in sorted(row["candidates"], key=lambda c: -c["sample"])
                    if not c["dropped"]}.values())
    keys = []
    files = row.get("regression_tests", {}).get("files", [])
    if files:
        keys += [run_key(iid, "regression", p, files) for p in ["", *patches]]
    scripts = row.get("reproduction_scripts", [])
    keys += [run_key(iid, "reproduction", "", s) for s in dict.fromkeys(s for s in scripts if s)]
    keys += [run_key(iid, "reproduction", p, scripts[i]) for i in row.get("reproduction_kept", []) for p in patches]
    return [r for r in map(cache.get, keys) if r is not None]


def table(work: Path) -> str:
    """The per-rule table of a finished `run` in `work` (module docstring)."""
    kinds = json.loads((work / "kinds.json").read_text())
    gold = _report(work / "gold" / "report.json")
    trace = _rows(work / "preds.trace.jsonl")
    meta = json.loads((work / "run.json").read_text())
    cache = TestCache(work / "tests.jsonl")
    used = {iid: used_runs(row, cache) for iid, row in trace.items()}
    n = len(trace)
    runs = sum(len(u) for u in used.values())
    seconds = sum(r["seconds"] for u in used.values() for r in u)
    executed = sum(t.get("test_runs", 0) for t in trace.values())
    ok = sorted(i for i in trace if gold.get(i))
    lines = [f"Instances: {n}; gold resolves {len(ok)}. Test runs the choices rest on: {runs} ({runs / n:.1f} per "
             f"instance), {seconds:.0f} s of runs ({seconds / n:.1f} s per instance, the runs' own durations, "
             f"{executed} of them executed by the last `resolve` session, the rest read from its cache); that "
             f"session's wall time {meta['resolve_seconds']:.0f} s.", "",
             "| rule | %Resolved (of gold-resolving) | resolved | chose gold / breaks / no_fix / none | differs from the vote |",
             "|---|---|---|---|---|"]
    for rule in RULES:
        resolved = _report(work / f"eval_{rule}" / "report.json")
        chosen: collections.Counter = collections.Counter()
        differs = 0
        for iid, row in trace.items():
            kind = [*kinds[iid]["repair"], "none"]  # index None -> "none" below
            pick, vote = (row["selected"][r] for r in (rule, "majority"))
            chosen[kind[-1 if pick is None else pick]] += 1
            differs += kind[-1 if pick is None else pick] != kind[-1 if vote is None else vote]
        hits = sum(resolved.get(i, False) for i in ok)
        lines.append(f"| {rule} | {100 * hits / max(len(ok), 1):.1f} | {hits} / {len(ok)} | "
                     f"{chosen['gold']} / {chosen['breaks']} / {chosen['no_fix']} / {chosen['none']} | {differs} |")
    lines += ["", "| instance | gold resolves | regression failures gold / breaks / no_fix | reproduction kept | "
              + " | ".join(RULES) + " |", "|---|---|---|---|" + "---|" * len(RULES)]
    for iid, row in trace.items():
        k = kinds[iid]["repair"]
        fails = {}
        for c in row["candidates"]:
            fails.setdefault(k[c["sample"]], c.get("regression_failures"))
        picks = [k[row["selected"][r]] if row["selected"][r] is not None else "none" for r in RULES]
        lines.append(f"| {iid} | {'yes' if gold.get(iid) else 'no'} | {fails.get('gold')} / {fails.get('breaks')} / "
                     f"{fails.get('no_fix')} | {len(row.get('reproduction_kept', []))} | " + " | ".join(picks) + " |")
    text = "\n".join(lines) + "\n"
    (work / "table.md").write_text(text)
    return text


def run(args: argparse.Namespace) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    kinds, skipped = write_answers(args.instances, args.repos, work / "answers.jsonl", args.seed)
    if skipped:
        raise InputError(f"{len(skipped)} instances have no scripted answers (named above); leave them out")
    common = ["--instances", args.instances, "--repos", args.repos]
    harness = ["--workers", str(args.workers), "--timeout", "1800", "--env-cache", args.env_cache]
    if not (work / "gold" / "report.json").is_file():
        _cli(["evaluate", "--gold", *common, "--out", str(work / "gold"), *harness], work / "gold.log")
    preds = work / "preds.jsonl"
    for stale in (preds, work / "preds.trace.jsonl"):  # a rerun measures again (the test cache stays)
        stale.unlink(missing_ok=True)
    settings = [f"answers={work / 'answers.jsonl'}", "model_name=scripted", "progress=false",
                f"agentless.num_samples={len(REPAIR_PLAN)}", f"agentless.reproduction_samples={len(REPRO_PLAN)}",
                "verification.regression=true", "verification.reproduction=true",
                f"verification.workers={args.workers}", f"verification.env_cache={args.env_cache}",
                f"verification.cache={work / 'tests.jsonl'}", *args.overrides]
    config = ["--config", args.config] if args.config else []
    seconds = _cli(["resolve", *common, "--out", str(preds), *config, *settings], work / "resolve.log")
    (work / "run.json").write_text(json.dumps({"resolve_seconds": seconds, "settings": settings,
                                               "config": args.config}) + "\n")
    for rule in RULES:
        out = work / f"preds_{rule}.jsonl"
        _cli(["rerank", "--trace", str(work / "preds.trace.jsonl"), "--rule", rule, "--out", str(out)],
             work / f"rerank_{rule}.log")
        _cli(["evaluate", "--predictions", str(out), *common, "--out", str(work / f"eval_{rule}"), *harness],
             work / f"eval_{rule}.log")
    print(table(work))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("answers", help="write the scripted policy's recorded answers")
    a.add_argument("--instances", required=True)
    a.add_argument("--repos", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="answers, resolve, rerank and evaluate per rule, the table")
    r.add_argument("--instances", required=True)
    r.add_argument("--repos", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--env-cache", required=True)
    r.add_argument("--config", default="")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("overrides", nargs="*", help="key=value settings of resolve, after the others")
    t = sub.add_parser("table", help="the table of a finished run")
    t.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    try:
        _command(args)
    except InputError as e:  # a missing or malformed instances file: one line, exit 2 as the CLI does
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _command(args: argparse.Namespace) -> None:
    if args.command == "answers":
        kinds, skipped = write_answers(args.instances, args.repos, Path(args.out), args.seed)
        print(f"{len(kinds)} instances → {args.out}; {len(skipped)} skipped")
    elif args.command == "run":
        run(args)
    else:
        print(table(Path(args.work)))


if __name__ == "__main__":
    main()
