"""The `synthesize` run: validated SWE-bench-style tasks from any Python repository with tests.

Per repository, at one commit (the *original*):

1. **Baseline**: the whole test suite (every `test_*.py` / `*_test.py` file) runs
   `baseline_runs` times through the harness; the tests that pass every time are the reference
   (a test that fails or flakes at the original commit can never show a bug).
2. **Candidates**: every mutation of every function and method of the source files
   (`mutations.py`); duplicates (two mutations giving the same AST of the file) are dropped;
   with `max_candidates` a seeded sample of the rest is tried.
3. **Validation**: each candidate's patch is applied to a fresh worktree and the suite runs
   under the harness's sandbox and limits (wall clock: `timeout_factor` × the baseline's time,
   at least `min_timeout_s`, at most the harness limit). Kept when at least one reference test
   now fails: FAIL_TO_PASS = those tests, PASS_TO_PASS = the reference tests that still pass.
   Rejected, by reason: `no_test_fails` (the suite does not notice), `collection_error` (a test
   file no longer imports: the bug breaks the package at import time), `timeout`, the other
   limits' kinds (`memory_limit`, `disk_limit`, `process_limit`), `no_test_results`; before any test runs, `syntax_error`, `no_change`, `duplicate`.
4. **Instances**: the buggy state is committed on top of the original (`repos.py`), the fix
   patch is the diff from it back to the original, the issue text comes from the failing tests
   (`issue_text.py`, in `issue_style`); what the tests showed is recorded in `synth.failure`, so
   the text can be rendered in the other style later without running them (`issue_text.restyle`).
5. **Verification** (`verify`): every kept instance is checked under the harness from the
   written repositories as `evaluate` would: at `base_commit` with no patch every FAIL_TO_PASS
   test fails and every PASS_TO_PASS test passes, and the gold patch resolves it; an instance
   that fails either check is dropped (`verify_failed`).

Output (`write`): `OUT/instances.jsonl` (SWE-bench fields; `synth` holds the mutation: operator,
path, function, line, description, and the failure evidence), `OUT/repos/<owner>__<name>` (clones holding every
`base_commit` under `refs/synth/<instance_id>`), `OUT/specs.json` (each repository's harness
spec, for `evaluate --specs`) and `OUT/report.json` (counts tried, kept and rejected by reason,
per repository and per operator).
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data.skeleton import SourceFilter
from swe_rl_jax.data.sources import GitError, GitRepo, InputError, RepoLocator, Snapshot, instance_from_dict
from swe_rl_jax.harness import (HarnessOptions, RepoSpec, TestRun, ensure_environment, evaluate_predictions,
                                isolation_mode, run_tests)
from swe_rl_jax.harness.defaults import resolve_spec
from swe_rl_jax.harness.environments import Environment, EnvironmentBuildError
from swe_rl_jax.harness.sandbox import check_work_dir, interruptible_pool
from swe_rl_jax.harness.specs import repo_spec, spec_to_dict
from swe_rl_jax.harness.testlog import ERROR, SUCCESS
from swe_rl_jax.rewards import git_diff
from swe_rl_jax.synth.issue_text import ISSUE_STYLES, failure_evidence, render_issue, restyle
from swe_rl_jax.synth.mutations import OPERATORS, Candidate, enumerate_mutations
from swe_rl_jax.synth.repos import build_buggy_commits, clone, commit_date

REJECT_REASONS = ("syntax_error", "no_change", "duplicate", "no_test_fails", "collection_error", "timeout",
                  "memory_limit", "disk_limit", "process_limit", "no_test_results", "tampered", "patch_failed",
                  "checkout_failed", "verify_failed")
PROGRESS_EVERY = 50  # candidates between progress lines


@dataclasses.dataclass(frozen=True)
class SynthOptions:
    operators: tuple[str, ...] = OPERATORS
    max_candidates: int = 0  # per repository: 0 tries every candidate, N a seeded sample of N
    seed: int = 0
    rev: str = "HEAD"  # the original commit
    baseline_runs: int = 2  # the reference tests pass in every one of these runs
    timeout_factor: float = 5.0  # a candidate's wall-clock limit, in baseline test-suite times
    min_timeout_s: float = 10.0
    verify: bool = True
    issue_style: str = "behaviour"  # how the problem statement reads (synth/issue_text.py)
    harness: HarnessOptions = dataclasses.field(default_factory=HarnessOptions)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.operators) - set(OPERATORS))
        require(not unknown and bool(self.operators), "operators", f"must be among {list(OPERATORS)}")
        require(self.max_candidates >= 0, "max_candidates", "must be >= 0")
        require(self.baseline_runs >= 1, "baseline_runs", "must be >= 1")
        require(self.timeout_factor > 0 and self.min_timeout_s > 0, "timeout_factor", "timeouts must be > 0")
        require(self.issue_style in ISSUE_STYLES, "issue_style", f"must be one of {list(ISSUE_STYLES)}")


@dataclasses.dataclass(frozen=True)
class RepoSource:
    path: str  # a git repository
    name: str  # owner/name, the instances' `repo`


def is_test_file(path: str) -> bool:
    """A test module pytest collects by default: `test_*.py` or `*_test.py`."""
    name = path.rsplit("/", 1)[-1]
    return (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py")


@dataclasses.dataclass(frozen=True)
class Outcome:
    reason: str  # "kept" or a rejection reason
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    log: str = ""


def classify(run: TestRun, reference: Sequence[str]) -> Outcome:
    """What a candidate's test run says about it (see the module docstring)."""
    if run.error:  # the TestRun error kinds are rejection reasons of their own
        return Outcome(run.error)
    if any("::" not in test and status == ERROR for test, status in run.statuses.items()):
        return Outcome("collection_error")
    failed = tuple(t for t in reference if run.statuses.get(t) not in SUCCESS)
    if not failed:
        return Outcome("no_test_fails")
    return Outcome("kept", failed, tuple(t for t in reference if t not in failed), run.log)


class Counts:
    """Tried / kept / rejected-by-reason counts, overall and per operator."""

    def __init__(self) -> None:
        self.reasons: collections.Counter = collections.Counter()
        self.by_operator: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def add(self, operator: str, reason: str) -> None:
        self.reasons[reason] += 1
        self.by_operator[operator][reason] += 1

    def move(self, operator: str, old: str, new: str) -> None:
        for counter in (self.reasons, self.by_operator[operator]):
            counter[old] -= 1
            counter[new] += 1

    @staticmethod
    def _summary(counter: collections.Counter) -> dict[str, Any]:
        tried = sum(counter.values())
        kept = counter["kept"]
        return {"tried": tried, "kept": kept, "keep_rate": kept / tried if tried else 0.0,
                "rejected": {r: counter[r] for r in REJECT_REASONS if counter[r]}}

    def update(self, other: "Counts") -> None:
        self.reasons.update(other.reasons)
        for op, counter in other.by_operator.items():
            self.by_operator[op].update(counter)

    def to_json(self) -> dict[str, Any]:
        return {**self._summary(self.reasons),
                "by_operator": {op: self._summary(c) for op, c in sorted(self.by_operator.items())}}


def source_files(snapshot: Snapshot) -> list[str]:
    """The files whose functions get mutated: Python source files, tests excluded (DATA.md's rule)."""
    return sorted(p for p in snapshot.files if SourceFilter()(p))


def repo_candidates(snapshot: Snapshot, paths: Sequence[str], options: SynthOptions, counts: Counts) -> list[Candidate]:
    """The candidates of `paths` in order, duplicates counted in `counts` and left out; with
    `max_candidates`, a seeded sample of them."""
    texts = snapshot.read_text(paths)
    out: list[Candidate] = []
    seen: set[tuple[str, str]] = set()
    for path in paths:
        text = texts.get(path)
        if text is None:
            continue
        for cand in enumerate_mutations(path, text, options.operators,
                                        on_drop=lambda reason, m: counts.add(m.operator, reason)):
            key = (path, cand.canonical)
            if key in seen:
                counts.add(cand.mutation.operator, "duplicate")
                continue
            seen.add(key)
            out.append(cand)
    if options.max_candidates and len(out) > options.max_candidates:
        chosen = sorted(random.Random(options.seed).sample(range(len(out)), options.max_candidates))
        out = [out[i] for i in chosen]
    return out


def _baseline(repo: Path, commit: str, test_files: Sequence[str], env: Environment, spec: RepoSpec,
              options: SynthOptions, isolation: str) -> tuple[list[str], float]:
    """The reference tests (passing in every baseline run, in report order) and the slowest run's time."""
    passing: Optional[list[str]] = None
    seconds = 0.0
    for _ in range(options.baseline_runs):
        run = run_tests(repo, commit, "", test_files, env, spec, limits=options.harness.limits, isolation=isolation,
                        work_dir=Path(options.harness.work_dir), history_root=options.harness.env.history_root())
        if run.error:
            raise InputError(f"{repo}: the test suite does not run at {commit[:12]}: {run.error}: {run.message}")
        now = [t for t, s in run.statuses.items() if s in SUCCESS and "::" in t]
        passing = now if passing is None else [t for t in passing if t in set(now)]
        seconds = max(seconds, run.seconds)
    return passing or [], seconds


def instance_id_for(name: str, original: str, cand: Candidate) -> str:
    digest = hashlib.sha256(f"{original}\n{cand.mutation.key()}".encode()).hexdigest()
    return f"{name.replace('/', '__')}.synth.{digest[:10]}"


def synthesize_repo(source: RepoSource, spec: RepoSpec, out_dir: Path, options: SynthOptions, isolation: str,
                    log: Callable[[str], None] = print
                    ) -> tuple[list[dict[str, Any]], dict[str, Any], Counts, RepoSpec]:
    """One repository → (instance dicts, its report, its counts, the spec its tests ran with: `spec`,
    or the default environment of the repository, harness/defaults.py). Writes
    `out_dir/repos/<owner>__<name>`."""
    start = time.perf_counter()
    try:
        repo = GitRepo(source.path)
    except GitError as e:
        raise InputError(f"--repo {source.path}: not a git repository ({e})") from None
    original = repo.resolve(options.rev)
    if original is None:
        raise InputError(f"--repo {source.path}: no commit {options.rev!r}")
    snapshot = Snapshot(repo, original)
    test_files = sorted(p for p in snapshot.files if is_test_file(p))
    sources = source_files(snapshot)
    if not test_files:
        raise InputError(f"--repo {source.path}: no test files (test_*.py, *_test.py) at {options.rev}")
    spec = resolve_spec(spec, repo.path, original)
    try:
        env = ensure_environment(spec.environment, options.harness.env)
    except EnvironmentBuildError as e:
        raise InputError(f"{source.name}: cannot build the test environment: {e}") from None
    reference, base_seconds = _baseline(repo.path, original, test_files, env, spec, options, isolation)
    if not reference:
        raise InputError(f"{source.name}: no test passes at {original[:12]}; nothing can show a bug")
    counts = Counts()
    candidates = repo_candidates(snapshot, sources, options, counts)
    limit = min(options.harness.limits.timeout_s, max(options.min_timeout_s, options.timeout_factor * base_seconds))
    limits = dataclasses.replace(options.harness.limits, timeout_s=limit)
    log(f"{source.name}: {len(reference)} reference tests ({base_seconds:.1f} s), {len(candidates)} candidates "
        f"from {len(sources)} source files; limit {limit:.0f} s per run")
    texts = snapshot.read_text(sources)

    def attempt(cand: Candidate) -> Outcome:
        path = cand.mutation.path
        patch = git_diff({path: texts[path]}, {path: cand.source})
        run = run_tests(repo.path, original, patch, test_files, env, spec, limits=limits, isolation=isolation,
                        work_dir=Path(options.harness.work_dir), history_root=options.harness.env.history_root())
        return classify(run, reference)

    done: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def tracked(cand: Candidate) -> Outcome:
        outcome = attempt(cand)
        with lock:
            done[outcome.reason] += 1
            if sum(done.values()) % PROGRESS_EVERY == 0:
                log(f"{source.name}: {sum(done.values())}/{len(candidates)} tried, {done['kept']} kept")
        return outcome

    with interruptible_pool(options.harness.workers) as pool:
        outcomes = list(pool.map(tracked, candidates))
    date = commit_date(repo.path, original)
    instances = []
    for cand, outcome in zip(candidates, outcomes):
        counts.add(cand.mutation.operator, outcome.reason)
        if outcome.reason != "kept":
            continue
        m = cand.mutation
        text = texts[m.path]
        evidence = failure_evidence(outcome.fail_to_pass, outcome.log, is_test_file, sources)
        instances.append({
            "instance_id": instance_id_for(source.name, original, cand), "repo": source.name, "base_commit": "",
            "patch": git_diff({m.path: cand.source}, {m.path: text}), "test_patch": "",
            "problem_statement": render_issue(outcome.fail_to_pass, evidence, options.issue_style),
            "hints_text": "", "created_at": date, "version": "", "environment_setup_commit": original,
            "FAIL_TO_PASS": json.dumps(list(outcome.fail_to_pass)),
            "PASS_TO_PASS": json.dumps(list(outcome.pass_to_pass)),
            "synth": {"operator": m.operator, "path": m.path, "function": m.function, "line": m.line,
                      "description": m.description, "failure": evidence.to_json()},
        })
    # Ids are hashes, so in id order any prefix of a repository's instances is a uniform sample of them
    # (what an eval's `max_examples` or RL's held-out subset takes), not the bugs of its first file.
    instances.sort(key=lambda inst: inst["instance_id"])
    target = clone(repo.path, out_dir / "repos" / source.name.replace("/", "__"))
    for inst, commit in zip(instances, build_buggy_commits({source.name: target}, instances)):
        inst["base_commit"] = commit
    report = {"original_commit": original, "source_files": len(sources), "test_files": len(test_files),
              "reference_tests": len(reference), "baseline_seconds": round(base_seconds, 2),
              "timeout_s": round(limit, 1)}
    if options.verify and instances:
        failed = verify_instances(instances, out_dir / "repos", {source.name: spec}, options, isolation)
        for inst in instances:
            if inst["instance_id"] in failed:
                counts.move(inst["synth"]["operator"], "kept", "verify_failed")
        report["verify_failures"] = failed
        instances = [i for i in instances if i["instance_id"] not in failed]
        report["verified"] = len(instances)
    report.update(counts.to_json())
    report["seconds"] = round(time.perf_counter() - start, 1)
    log(f"{source.name}: tried {report['tried']}, kept {report['kept']}, rejected {report['rejected']}")
    return instances, report, counts, spec


def verify_instances(instances: Sequence[Mapping[str, Any]], repos_dir: Path, specs: Mapping[str, RepoSpec],
                     options: SynthOptions, isolation: str) -> dict[str, str]:
    """Checks every instance under the harness from the written repositories: the buggy state
    fails every FAIL_TO_PASS test and passes every PASS_TO_PASS test, and the gold patch resolves
    it. Returns instance id → what failed, for the instances that do not pass both checks."""
    objects = [instance_from_dict(dict(inst), inst["instance_id"]) for inst in instances]
    locator = RepoLocator(repos_dir)
    report = evaluate_predictions([{"instance_id": i.instance_id, "model_patch": i.patch} for i in objects], objects,
                                  locator, specs, options.harness)
    failed = {r["instance_id"]: f"gold patch: {r['error'] or 'not resolved'}" for r in report["records"]
              if not r["resolved"]}

    def buggy(inst) -> Optional[str]:
        spec = specs[inst.repo]
        env = ensure_environment(spec.environment, options.harness.env)
        run = run_tests(locator.find(inst.repo), inst.base_commit, "", inst.fail_to_pass + inst.pass_to_pass, env,
                        spec, fail_to_pass=inst.fail_to_pass, limits=options.harness.limits, isolation=isolation,
                        work_dir=Path(options.harness.work_dir), history_root=options.harness.env.history_root(),
                        max_failing_sentinels=options.harness.max_failing_sentinels)
        if run.error:
            return f"buggy state: {run.error}"
        if any(run.statuses.get(t) in SUCCESS for t in inst.fail_to_pass):
            return "buggy state: a FAIL_TO_PASS test passes"
        if any(run.statuses.get(t) not in SUCCESS for t in inst.pass_to_pass):
            return "buggy state: a PASS_TO_PASS test fails"
        return None

    with interruptible_pool(options.harness.workers) as pool:
        for inst, problem in zip(objects, pool.map(buggy, objects)):
            if problem and inst.instance_id not in failed:
                failed[inst.instance_id] = problem
    return failed


def synthesize(sources: Sequence[RepoSource], specs: Mapping[str, RepoSpec], out_dir: str | Path,
               options: SynthOptions = SynthOptions(), log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every repository of `sources` (specs: repository name → its harness spec) → `out_dir`
    (see the module docstring); returns the report."""
    names = [s.name for s in sources]
    require(len(set(names)) == len(names), "repo_name", f"repository names must be distinct: {names}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    isolation = isolation_mode(options.harness.isolation)
    work_dir = options.harness.work_dir or tempfile.gettempdir()
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    check_work_dir(Path(work_dir), isolation)
    options = dataclasses.replace(options, harness=dataclasses.replace(options.harness, work_dir=work_dir))
    instances, repos, totals, used = [], {}, Counts(), {}
    for source in sources:
        kept, repos[source.name], counts, used[source.name] = synthesize_repo(
            source, repo_spec(source.name, specs), out, options, isolation, log)
        instances += kept
        totals.update(counts)
    with open(out / "instances.jsonl", "w", encoding="utf-8") as handle:
        for inst in instances:
            handle.write(json.dumps(inst, sort_keys=True) + "\n")
    (out / "specs.json").write_text(json.dumps({name: spec_to_dict(spec) for name, spec in used.items()},
                                               indent=2, sort_keys=True) + "\n", encoding="utf-8")
    report = {"options": {"operators": list(options.operators), "max_candidates": options.max_candidates,
                          "seed": options.seed, "rev": options.rev, "baseline_runs": options.baseline_runs,
                          "verify": options.verify, "isolation": isolation, "issue_style": options.issue_style},
              "repos": repos, "totals": totals.to_json(), "instances": len(instances)}
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return report


def restyle_output(out_dir: str | Path, style: str) -> int:
    """Renders every problem statement of a `synthesize` output (`out_dir/instances.jsonl`) again
    in `style` from the recorded failure evidence, without running any test; the report's
    `options.issue_style` follows. Returns the number of instances rewritten."""
    require(style in ISSUE_STYLES, "issue_style", f"must be one of {list(ISSUE_STYLES)}")
    path = Path(out_dir) / "instances.jsonl"
    if not path.is_file():
        raise InputError(f"--restyle: no instances file {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    missing = [r["instance_id"] for r in rows if "failure" not in (r.get("synth") or {})]
    if missing:
        raise InputError(f"--restyle: {len(missing)} instances of {path} record no failure evidence "
                         f"(synthesized before it was recorded?), e.g. {missing[0]}; run synthesize again")
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(restyle(row, style), sort_keys=True) + "\n")
    report_path = Path(out_dir) / "report.json"
    if report_path.is_file():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        report.setdefault("options", {})["issue_style"] = style
        report_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return len(rows)


def format_report(report: Mapping[str, Any]) -> str:
    """The report as two tables: per repository, and per operator over all of them."""
    lines = [f"{'repository':<28} {'tried':>6} {'kept':>5} {'rate':>6} {'verified':>8}  rejected by reason"]
    for name, rep in report["repos"].items():
        rejected = ", ".join(f"{k} {v}" for k, v in rep["rejected"].items())
        lines.append(f"{name:<28} {rep['tried']:>6} {rep['kept']:>5} {rep['keep_rate']:>6.1%} "
                     f"{rep.get('verified', '-'):>8}  {rejected}")
    lines += ["", f"{'operator':<28} {'tried':>6} {'kept':>5} {'rate':>6}  rejected by reason"]
    for op, rep in report["totals"]["by_operator"].items():
        rejected = ", ".join(f"{k} {v}" for k, v in rep["rejected"].items())
        lines.append(f"{op:<28} {rep['tried']:>6} {rep['kept']:>5} {rep['keep_rate']:>6.1%}  {rejected}")
    return "\n".join(lines)
