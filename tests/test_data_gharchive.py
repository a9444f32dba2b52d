"""Curation from GitHub's event archive (swe_rl_jax/data/gharchive): recorded events of both payload
shapes (tests/data/gharchive/README.md names their sources), issue linking, aggregation order, each
filter on a hand-made repository, bad input, and build-data on the produced instances."""
import copy
import gzip
import json
import shutil
from pathlib import Path

import pytest

from swe_rl_jax.cli import main as cli_main
from swe_rl_jax.data.gharchive.assemble import problem_statement
from swe_rl_jax.data.gharchive.curate import CurateOptions, curate
from swe_rl_jax.data.gharchive.events import Tally, normalize, read_events
from swe_rl_jax.data.gharchive.linking import IssueLink, issue_links
from swe_rl_jax.data.gharchive.pulls import aggregate
from swe_rl_jax.data.gharchive.relevant import parse_relevant, relevant_messages
from swe_rl_jax.data.gharchive.store import EventStore
from swe_rl_jax.data.options import MiningOptions
from swe_rl_jax.data.records import read_records
from swe_rl_jax.data.sample import commit_all, init_repo, run_isolated_git, write_files
from swe_rl_jax.data.skeleton import SourceFilter

DATA = Path(__file__).parent / "data" / "gharchive"
HOUR = DATA / "2015-01-01-12.excerpt.json.gz"
OCTOCRAB = DATA / "octocrab-events.jsonl"
TRIMMED = DATA / "trimmed-pull-request-event.jsonl"


def _recorded(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def test_both_payload_shapes_are_read_and_trimmed_text_is_unknown_not_empty():
    tally = Tally()
    events = list(read_events([HOUR, OCTOCRAB, TRIMMED], tally))
    counts = tally.counts
    assert counts["archive_files"] == 3 and counts["lines"] == 11 + 6 + 1
    assert counts["ignored_type"] == 2  # the two WatchEvents
    assert counts["unknown_type"] == 1 and "(AmazingEvent)" in tally.examples["unknown_type"][0]
    assert counts["trimmed_pull_request_payload"] == 1
    assert counts["read_pull_request"] == 4 + 2  # 2015: #210 twice, #243, #733; octocrab: opened; trimmed
    by = {(e.repo, e.number, e.kind, e.action): e for e in events}
    silhouette = by[("mohiva/play-silhouette", 243, "pull_request", "closed")]
    assert silhouette.merged is True and silhouette.author == "Firfi" and not silhouette.trimmed
    assert silhouette.body == "...ticate to AuthenticateExceptions refs #242"
    assert silhouette.head_sha == "2f8fb4597b46a0d587ab584aebe63fbe32d74536"
    assert by[("mohiva/play-silhouette", 243, "pr_comment", "created")].comment  # a comment on the PR
    assert by[("mohiva/play-silhouette", 242, "issue", "closed")].title.startswith("CredentialsProvider doesn't")
    opened = by[("wayofthepie/test-events", 8, "pull_request", "opened")]
    assert opened.title == "Add test file ()" and opened.body == ""  # GitHub sent null: no body written
    trimmed = by[("wayofthepie/test-events", 8, "pull_request", "closed")]
    assert trimmed.trimmed and trimmed.title is None and trimmed.body is None and trimmed.merged is None
    assert trimmed.head_sha == opened.head_sha  # head and base survive the trimming
    review = by[("LizardByte/RetroArcher", 218, "review", "created")]
    assert review.merged is True and review.author == "LizardByte-bot" and review.comment == ""  # body null


def test_issue_links_closing_keywords_cross_repository_and_several():
    text = ("Fixes #12, closes: acme/other#3 and resolves https://github.com/acme/lib/issues/7.\n"
            "See #4 and #12 again; not refs: abc#5, &#39;, #0. This PR is #99.")
    assert issue_links(text, "acme/proj", own_number=99) == [
        IssueLink("acme/proj", 12, True), IssueLink("acme/other", 3, True), IssueLink("acme/lib", 7, True),
        IssueLink("acme/proj", 4, False)]
    assert issue_links("FIXED #1 fix #2 fixing #3 Resolved acme/x#4", "a/b") == [
        IssueLink("a/b", 1, True), IssueLink("a/b", 2, True), IssueLink("a/b", 3, False), IssueLink("acme/x", 4, True)]


def test_problem_statement_rule_closing_issues_first_else_mentions_else_the_pull_request():
    pr = aggregate("a/b", 9, [normalize(_recorded(HOUR)[4])])  # a recorded merged closing event
    fix, see = IssueLink("a/b", 1, True), IssueLink("a/b", 2, False)
    assert problem_statement(pr, [(see, ("Mentioned", "m"), False), (fix, ("Bug", "It fails.\n"), False)]) == (
        "Bug\nIt fails.", "issues")
    assert problem_statement(pr, [(see, ("A", "x"), False), (IssueLink("c/d", 3, False), ("B", ""), False)]) == (
        "A\nx\n\nB", "issues")
    assert problem_statement(pr, [(fix, None, False)]) == (f"{pr.title}\n{pr.body}", "pull_request")


def test_store_gives_each_pull_request_its_events_in_time_order_once(tmp_path):
    hour = _recorded(HOUR)
    opened, closed = hour[2], hour[3]  # divio/djangocms-text-ckeditor#210
    late = _write_jsonl(tmp_path / "a.jsonl", [closed])
    early = _write_jsonl(tmp_path / "b.jsonl", [opened, closed])  # read second, and closed seen twice
    edited = copy.deepcopy(opened)
    edited.update(id="1", created_at="2015-01-01T12:43:36Z")
    edited["payload"].update(action="edited")
    edited["payload"]["pull_request"]["title"] = "Revert auto hyphenation"
    tally = Tally()
    store = EventStore(tmp_path / "s.sqlite")
    store.add(read_events([late, early, _write_jsonl(tmp_path / "c.jsonl", [edited])], tally), tally)
    [(repo, number, events)] = list(store.pulls())
    assert (repo, number) == ("divio/djangocms-text-ckeditor", 210) and tally.counts["duplicate_events"] == 1
    assert [(e.action, e.time) for e in events] == [("opened", opened["created_at"]),
                                                    ("edited", "2015-01-01T12:43:36Z"),
                                                    ("closed", closed["created_at"])]
    assert opened["created_at"] < "2015-01-01T12:43:36Z" < closed["created_at"]
    pr = aggregate(repo, number, events)
    # The closing payload is later than the edit and carries the old title again: the latest wins.
    assert pr.state == "merged" and pr.title == closed["payload"]["pull_request"]["title"]
    assert pr.opened_at == opened["payload"]["pull_request"]["created_at"]


def test_bad_input_is_counted_named_and_the_rest_kept(tmp_path):
    whole = HOUR.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    lines = gzip.decompress(whole).splitlines()
    broken = tmp_path / "broken.jsonl"
    unknown = OCTOCRAB.read_bytes().splitlines()[-1]
    broken.write_bytes(lines[4] + b"\n{not json\n" + lines[9][:100] + b"\n" + unknown + b"\n")
    tally = Tally()
    events = list(read_events([cut, broken], tally))
    assert tally.counts["truncated_or_corrupt_gzip"] == 1 and str(cut) in tally.examples["truncated_or_corrupt_gzip"][0]
    assert tally.examples["malformed_line"] == [f"{broken}:2", f"{broken}:3"]
    assert tally.examples["unknown_type"] == [f"{broken}:4 (AmazingEvent)"]
    kept = [(e.repo, e.number) for e in events]
    assert kept[-1] == ("mohiva/play-silhouette", 243)  # the good line after the truncated file
    assert 0 < len(kept) - 1 < 9  # a part of the truncated file's events


# --- the whole run on a hand-made repository, events derived from recorded ones ---------------------

HUMAN = "Ada Lovelace <ada@example.org>"


def _pr_event(template: dict, repo: str, number: int, action: str, time: str, *, title: str | None = None,
              body: str | None = "", merged: bool | None = None, base: str = "", head: str = "",
              login: str = "ada", user_type: str = "User", trimmed: bool = False) -> dict:
    """A recorded PullRequestEvent with repository, number, text, commits and state replaced."""
    e = copy.deepcopy(template)
    e.update(id=f"{repo}-{number}-{action}-{time}", created_at=time, repo={"id": 1, "name": repo})
    pr = e["payload"]["pull_request"]
    e["payload"].update(action=action, number=number)
    pr.update(number=number, title=title or f"PR {number}", body=body, merged=bool(merged),
              merge_commit_sha="0" * 40, created_at=time, user={"login": login, "type": user_type})
    pr["base"]["sha"], pr["head"]["sha"] = base, head
    if trimmed:
        e["payload"]["pull_request"] = {"url": pr["url"], "id": pr["id"], "number": number,
                                        "head": {"ref": "x", "sha": head}, "base": {"ref": "main", "sha": base}}
    return e


def _issue_event(template: dict, repo: str, number: int, title: str, body: str, time: str) -> dict:
    e = copy.deepcopy(template)
    e.update(id=f"{repo}-issue-{number}", created_at=time, repo={"id": 2, "name": repo})
    e["payload"]["issue"].update(number=number, title=title, body=body)
    return e


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    """A repository with one merged pull request per filter, its archive hour and the curation."""
    root = tmp_path_factory.mktemp("gharchive")
    repo = init_repo(root / "repos" / "acme__widgets")
    write_files(repo, {"pkg/__init__.py": '__version__ = "1.0"\n', "pkg/core.py": "from pkg import util\n\n\n"
                       "def area(w, h):\n    return util.mul(w, h)\n",
                       "pkg/util.py": "def mul(a, b):\n    return a * b\n",
                       "pkg/zeta.py": "Z = 1\n", "tests/test_core.py": "def test_area():\n    pass\n",
                       "poetry.lock": "a\n"})
    commit_all(repo, "Initial commit", HUMAN)

    def git(*args: str) -> str:
        return run_isolated_git(repo, *args).strip()

    def pull(name: str, files: dict, merge: bool = True, message: str = "") -> tuple[str, str]:
        """(main's tip when merged, the branch head)."""
        git("checkout", "-q", "-b", name, "main")
        write_files(repo, files)
        head = commit_all(repo, message or f"work on {name}", HUMAN)
        git("checkout", "-q", "main")
        tip = git("rev-parse", "HEAD")
        if merge:
            run_isolated_git(repo, "merge", "-q", "--no-ff", "-m", f"Merge {name}", name, identity=HUMAN)
        return tip, head

    fix_base, fix_head = git("rev-parse", "HEAD"), None
    git("checkout", "-q", "-b", "fix", "main")
    write_files(repo, {"pkg/core.py": "from pkg import util\n\n\ndef area(w, h):\n    return abs(util.mul(w, h))\n",
                       "tests/test_core.py": "def test_area():\n    assert True\n"})
    fix_head = commit_all(repo, "Fix negative areas", HUMAN)
    git("checkout", "-q", "main")
    write_files(repo, {"README.md": "moved on\n"})  # main moves on before the merge
    commit_all(repo, "Readme", HUMAN)
    run_isolated_git(repo, "merge", "-q", "--no-ff", "-m", "Merge fix", "fix", identity=HUMAN)
    tips = {"fix": (git("rev-parse", "HEAD^1"), fix_head)}
    tips["bot"] = pull("bot", {"pkg/zeta.py": "Z = 2\n"})
    tips["lock"] = pull("lock", {"poetry.lock": "b\n"})
    tips["version"] = pull("version", {"pkg/__init__.py": '__version__ = "1.1"\n'})
    tips["many"] = pull("many", {f"pkg/m{i}.py": "M = 1\n" for i in range(4)})
    tips["tests"] = pull("tests", {"tests/test_core.py": "def test_area():\n    assert 1\n"})
    tips["trimmed"] = pull("trimmed", {"pkg/zeta.py": "Z = 3\n"})
    tips["textless"] = pull("textless", {"pkg/zeta.py": "Z = 4\n"})
    tips["unmerged"] = pull("unmerged", {"pkg/zeta.py": "Z = 5\n"}, merge=False)
    tips["by_commit"] = pull("by_commit", {"pkg/zeta.py": "Z = 6\n"}, message="Zeta six, fixes #10")
    tips["long"] = pull("long", {"pkg/zeta.py": "".join(f"Z{i} = {i}\n" for i in range(30))})
    tips["docs"] = pull("docs", {"README.md": "docs\n"})

    hour = _recorded(HOUR)
    pr_t, issue_t = hour[4], hour[6]  # recorded PullRequestEvent (closed, merged) and IssuesEvent
    r, t0, t1 = "acme/widgets", "2015-01-01T12:00:00Z", "2015-01-01T12:30:00Z"

    def closed(n: int, key: str, **kw) -> dict:
        return _pr_event(pr_t, r, n, "closed", t1, base=tips[key][0], head=tips[key][1], **kw)

    events = [
        _issue_event(issue_t, r, 10, "Negative areas", "area(-2, 3) is -6.", t0),
        _issue_event(issue_t, "acme/other", 4, "Related", "Elsewhere.", t0),
        _pr_event(pr_t, r, 11, "opened", t0, title="Fix area", body="Fixes #10, see acme/other#4.",
                  base=fix_base, head=fix_head),
        closed(11, "fix", title="Fix area", body="Fixes #10, see acme/other#4.", merged=True),
        closed(12, "bot", merged=True, login="dependabot[bot]", user_type="Bot"),
        closed(13, "lock", merged=True), closed(14, "version", merged=True), closed(15, "many", merged=True),
        closed(16, "tests", merged=True), closed(17, "fix", merged=False),
        closed(23, "long", merged=True), closed(24, "docs", merged=True),
        closed(25, "by_commit", trimmed=True),  # trimmed: its only link is in its commit's message
        _pr_event(pr_t, r, 18, "closed", t1, merged=True, base="1" * 40, head="2" * 40),
        _pr_event(pr_t, r, 19, "opened", t0, title="Zeta three", body="", base=tips["trimmed"][0],
                  head=tips["trimmed"][1]),
        closed(19, "trimmed", trimmed=True), closed(20, "textless", trimmed=True), closed(21, "unmerged", trimmed=True),
        _pr_event(pr_t, r, 22, "opened", t0),
        _pr_event(pr_t, "acme/unknown", 1, "closed", t1, merged=True),
        _pr_event(pr_t, "acme/broken", 1, "closed", t1, merged=True),
    ]
    (root / "repos" / "acme__broken").mkdir()  # a directory, not a clone
    hours = root / "archive"
    hours.mkdir()
    with gzip.open(hours / "2015-01-01-12.json.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
    answers = _write_jsonl(root / "policy.jsonl", [
        {"task_id": "acme__widgets-11", "response": "```\npkg/core.py\n- pkg/zeta.py\nnope.py\n```"},
        {"task_id": "acme__widgets-19", "response": "I cannot tell."}])
    opts = CurateOptions(str(hours / "*.json.gz"), str(root / "repos"), str(root / "out"))
    mining = MiningOptions(max_files=3, max_changed_lines=20)
    report = curate(opts, mining, SourceFilter())
    # The policy through the command: a policy config (kind jsonl) replaying recorded answers.
    (root / "policy.yaml").write_text(f"kind: jsonl\npath: {answers}\n")
    assert cli_main(["curate", "--events", str(hours), "--repos", str(root / "repos"),
                     "--out", str(root / "out_policy"), "--max-files", "3", "--max-changed-lines", "20",
                     "--related-policy", str(root / "policy.yaml")]) == 0
    policy_report = json.loads((root / "out_policy" / "report.json").read_text())
    return root, repo, tips, report, policy_report


def _instances(out: Path) -> dict[str, dict]:
    return {d["instance_id"]: d for d in map(json.loads, (out / "instances.jsonl").read_text().splitlines())}


def test_each_filter_is_counted_and_the_missing_commits_named(curated):
    root, _, _, report, _ = curated
    assert report["instances"] == 3
    assert report["pull_requests"]["counts"] == {
        "bot_author": 1, "commits_not_in_clone": 1, "lock_or_generated_only": 1, "merge_unknown": 1, "no_clone": 1,
        "no_source_change": 1, "no_text_trimmed_payload": 1, "not_a_repository": 1, "not_closed_in_archive": 1,
        "not_merged": 1, "pull_requests": 17, "tests_only_or_empty": 1, "too_many_changed_lines": 1, "too_many_files": 1,
        "version_bump": 1}
    examples = report["pull_requests"]["examples"]
    assert examples["commits_not_in_clone"] == ["acme/widgets#18 (head 222222222222, merge 000000000000)"]
    assert examples["no_clone"] == ["acme/unknown#1"] and examples["bot_author"] == ["acme/widgets#12"]
    assert report["events"]["counts"]["trimmed_pull_request_payload"] == 4
    assert not (root / "out" / "events.sqlite").exists()


def test_instance_patch_is_the_pull_requests_change_and_text_the_linked_issue(curated):
    root, repo, tips, _, _ = curated
    inst = _instances(root / "out")
    fix = inst["acme__widgets-11"]
    fork = run_isolated_git(repo, "rev-parse", f"{tips['fix'][1]}^").strip()  # where the branch began
    assert fix["base_commit"] == fork != tips["fix"][0]  # the fork point, not main's tip at merge time
    assert fix["problem_statement"] == "Negative areas\narea(-2, 3) is -6."
    assert fix["problem_statement_source"] == "issues"
    assert fix["linked_issues"] == [
        {"repo": "acme/widgets", "number": 10, "closing": True, "text_in_archive": True, "is_pull_request": False},
        {"repo": "acme/other", "number": 4, "closing": False, "text_in_archive": True, "is_pull_request": False}]
    assert [e["action"] for e in fix["events"]] == ["opened", "closed"]
    assert fix["patch"].startswith("diff --git a/pkg/core.py") and fix["test_patch"].startswith("diff --git a/tests/")
    # Independent check: patch + test_patch applied to the base give the head's tree exactly.
    index = str(root / "check.index")
    run_isolated_git(repo, "read-tree", fork, index_file=index)
    run_isolated_git(repo, "apply", "--cached", "-", index_file=index, stdin=fix["patch"] + fix["test_patch"])
    tree = run_isolated_git(repo, "write-tree", index_file=index).strip()
    assert tree == run_isolated_git(repo, "rev-parse", f"{tips['fix'][1]}^{{tree}}").strip()
    # `from pkg import util` imports pkg/__init__.py and pkg/util.py, not pkg/zeta.py.
    assert fix["related_files"] == ["pkg/__init__.py", "pkg/util.py"] and fix["related_source"] == "imports"
    trimmed = inst["acme__widgets-19"]  # closing payload trimmed: merged per the clone, text from the opening
    assert trimmed["merged_per"] == "clone" and trimmed["problem_statement"] == "Zeta three"
    assert trimmed["problem_statement_source"] == "pull_request"
    by_commit = inst["acme__widgets-25"]  # text unknown, but its commit message "fixes #10"
    assert by_commit["problem_statement"] == fix["problem_statement"] and by_commit["pull_title"] is None
    assert by_commit["linked_issues"][0] == {"repo": "acme/widgets", "number": 10, "closing": True,
                                             "text_in_archive": True, "is_pull_request": False}


def test_policy_chooses_related_files_among_the_candidates(curated):
    root, _, _, _, report = curated
    inst = _instances(root / "out_policy")
    assert inst["acme__widgets-11"]["related_files"] == ["pkg/zeta.py"]  # core.py is modified, nope.py unknown
    assert inst["acme__widgets-11"]["related_source"] == "policy"
    assert inst["acme__widgets-19"]["related_source"] == "imports"  # named nothing: the heuristic's choice
    assert report["pull_requests"]["examples"]["policy_named_no_file"] == ["acme__widgets-19", "acme__widgets-25"]
    system, user = relevant_messages("Bug", ["a.py"], ["b.py", "c.py"], 1)
    assert system["role"] == "system" and "b.py\nc.py" in user["content"] and "at most 1" in user["content"]
    assert parse_relevant("1. `b.py`\n2) c.py\nb.py", ["b.py", "c.py"], 5) == ["b.py", "c.py"]


def test_build_data_makes_valid_records_from_curated_instances(curated, tmp_path):
    root, *_ = curated
    out = tmp_path / "records"
    assert cli_main(["build-data", "--instances", str(root / "out" / "instances.jsonl"), "--repos",
                     str(root / "repos"), "--out", str(out), "--no-progress", "--val-fraction", "0"]) == 0
    swe_rl = list(read_records(out / "train" / "swe_rl.jsonl"))
    assert sorted(r.instance_id for r in swe_rl) == ["acme__widgets-11", "acme__widgets-19", "acme__widgets-25"]
    fix = next(r for r in swe_rl if r.instance_id == "acme__widgets-11")
    assert fix.ground_truth["patch"] == _instances(root / "out")["acme__widgets-11"]["patch"]
    assert len(list(read_records(out / "train" / "file_localization.jsonl"))) == 3
    # The policy's choice reaches the SWE-RL task's context.
    assert cli_main(["build-data", "--instances", str(root / "out_policy" / "instances.jsonl"), "--repos",
                     str(root / "repos"), "--out", str(tmp_path / "p"), "--no-progress", "--val-fraction", "0",
                     "--subtasks", "swe_rl"]) == 0
    chosen = {r.instance_id: r for r in read_records(tmp_path / "p" / "train" / "swe_rl.jsonl")}["acme__widgets-11"]
    assert chosen.meta["related_files"] == ["pkg/zeta.py"] and "pkg/zeta.py" in chosen.context["code_context"]


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli_main(["curate", "--events", str(tmp_path / "none-*.json.gz"), "--repos", str(tmp_path),
                     "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no archive files" in err
    shutil.copy(HOUR, tmp_path / "h.json.gz")
    assert cli_main(["curate", "--events", str(tmp_path / "h.json.gz"), "--repos", str(tmp_path / "missing"),
                     "--out", str(tmp_path / "o")]) == 2
    assert "--repos: no such directory" in capsys.readouterr().err
