"""Agentless-style inference (`resolve`): a scripted policy drives localize → repair → diff → filter →
vote on the sample repositories; the predictions must `git apply` at base_commit. Plus one smoke run of
the real CLI with a tiny random model."""
import ast
import dataclasses
import json
import subprocess

import pytest

from swe_rl_jax.data.builder import BuildStats, iter_tasks
from swe_rl_jax.data.options import BuildOptions
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.data.retrieval import lexical_file_ranking
from swe_rl_jax.policies import PolicyResponse
from swe_rl_jax.resolve.candidates import Candidate, make_candidate, select_patch
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.run import run_resolve

INSTANCES = SAMPLE_DIR / "instances.jsonl"
COMMENT = "# resolved by the scripted policy\n"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample repositories and their task records (ground truth drives the scripted policy)."""
    repos = make_sample_repos(tmp_path_factory.mktemp("repos"))
    stats = BuildStats(BuildOptions().subtasks)
    records = {}
    for _, rec in iter_tasks(load_instances(INSTANCES), RepoLocator(next(iter(repos.values())).parent),
                             BuildOptions(), stats):
        records[(rec.instance_id, rec.subtask)] = rec
    return repos, records


def _issue_of(messages):
    user = messages[-1]["content"]
    return user.split("<issue>\n", 1)[1].split("\n</issue>", 1)[0]


def _block(path, search, replace):
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


def _whole_file_blocks(edit_record, transform=lambda path, new: new):
    """SEARCH the whole old file, REPLACE it with the (transformed) oracle content; deletions are
    not expressible as SEARCH/REPLACE and are left out."""
    old_files = edit_record.context["code_context"]
    blocks = []
    for path, new in edit_record.ground_truth["oracle_new_content"].items():
        if new == "":
            continue
        new = transform(path, new)
        blocks.append(_block(path, old_files.get(path, "").removesuffix("\n"), new.removesuffix("\n")))
    return "".join(blocks)


def _parses(text):
    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False


def repair_answers(edit_record):
    """Samples in order: a different valid patch (B), broken syntax, blank lines only, the oracle (A),
    the oracle with an extra comment (A again after normalization) → A wins 2 votes to 1."""
    old_files = edit_record.context["code_context"]
    path = next((p for p, t in old_files.items() if t.strip() and _parses(t)), None)
    if path is None:  # tidewater__ledgerly-14 only deletes a Python 2 file: nothing to write
        return ["I cannot express a deletion."] * 5
    old = old_files[path].removesuffix("\n")
    first_line = old.split("\n", 1)[0]
    b = _block(path, old, old + "\n\n_ALTERNATIVE_FIX = True")
    broken = _whole_file_blocks(edit_record, lambda p, new: new + "\ndef broken(:\n    pass\n")
    blank = _block(path, first_line, first_line + "\n\n")
    oracle = "<think>copy the fix</think>\n" + _whole_file_blocks(edit_record)
    commented = _whole_file_blocks(edit_record, lambda p, new: COMMENT + new if p.endswith(".py") else new)
    return [b, broken, blank, oracle, commented]


class FunctionPolicy:
    """A Policy from `respond(prompts, n) -> [[answer] * n per prompt]`; remembers every batch."""

    def __init__(self, respond):
        self.respond, self.batches = respond, []

    def generate(self, requests):
        self.batches.append(list(requests))
        return [PolicyResponse(r.task_id, tuple(a)) for r, a in
                zip(requests, [self.respond([list(r.messages)], r.n)[0] for r in requests])]


def scripted_policy(records, by_issue):
    calls = []

    def respond(prompts, n):
        out = []
        for messages in prompts:
            user = messages[-1]["content"]
            iid = by_issue[_issue_of(messages)]
            rec = lambda s: records.get((iid, s))  # noqa: E731
            if "Which files must be edited" in user:
                answers = ["```\n" + "\n".join(rec("file_localization").ground_truth["items"]) + "\n```"]
                calls.append("file")
            elif "Which classes, functions or methods" in user:
                r = rec("function_localization")
                if r is None:  # the Python 2 file: no function ground truth, the pipeline must fall back
                    answers = ["I am not sure."]
                else:
                    lines = []
                    for path in dict.fromkeys(p for p, _ in r.ground_truth["items"]):
                        names = [nm for p, nm in r.ground_truth["items"] if p == path]
                        lines += [path] + [f"function: {nm}" for nm in names if nm] + [""]
                        if "" in names:
                            lines += [path, ""]
                    answers = ["```\n" + "\n".join(lines) + "\n```"]
                calls.append("function")
            elif "Which lines must be edited" in user:
                items = rec("line_localization").ground_truth["items"]
                text = "\n".join(f"{p}\nline: {n}" for p, n in items)
                answers = [f"```\n{text}\n```"]
                calls.append("line")
            else:
                assert "Edit the code to resolve the issue" in user
                answers = repair_answers(rec("edit_generation"))
                calls.append("repair")
            assert len(answers) >= n
            out.append(answers[:n])
        return out

    return respond, calls


def _git(repo, *args, input=None):
    return subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, text=True)


def test_scripted_pipeline_applies_filters_and_votes(sample, tmp_path):
    repos, records = sample
    instances = load_instances(INSTANCES, require_patch=False)
    by_issue = {i.problem_statement: i.instance_id for i in instances}
    respond, calls = scripted_policy(records, by_issue)
    out = tmp_path / "preds.jsonl"
    policy = FunctionPolicy(respond)
    summary = run_resolve(ResolveConfig(instances=str(INSTANCES), repos=str(next(iter(repos.values())).parent),
                                        out=str(out), model_name="scripted", agentless=AgentlessOptions(num_samples=5),
                                        chunk=5, progress=False), policy)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    traces = {t["instance_id"]: t for t in map(json.loads, (tmp_path / "preds.trace.jsonl").read_text().splitlines())}
    assert [r["instance_id"] for r in rows] == [i.instance_id for i in instances]
    assert all(set(r) == {"instance_id", "model_name_or_path", "model_patch"} for r in rows)
    assert summary["instances"] == len(instances) == 12
    assert calls.count("file") == calls.count("repair") == 12
    # Batched: one generate call per round of a chunk, not one per prompt (3 chunks of <= 5 instances,
    # at most 4 stages each).
    assert summary["generate_calls"] == len(policy.batches) <= 12 < len(calls)
    assert max(len(b) for b in policy.batches) == 5
    assert summary["requests"]["file"] == 12 and summary["failed"] == {} and summary["skipped"] == {}
    # The trace keeps every raw answer and every candidate's patch (a reranking needs no new samples).
    some = traces["quillsoft__configlet-12"]
    assert len(some["responses"]["repair"]) == 5 and some["candidates"][3]["patch"].startswith("diff --git")

    # The deletion-only instance gets no candidate and an empty patch (counted).
    deletion = traces.pop("tidewater__ledgerly-14")
    assert deletion["status"] == "no_candidate" and deletion["votes"] == 0
    assert {c["dropped"] for c in deletion["candidates"]} == {"no_blocks"}
    assert next(r for r in rows if r["instance_id"] == "tidewater__ledgerly-14")["model_patch"] == ""
    # Every other instance: the broken and the blank-line candidates are dropped; the oracle wins 2 to 1.
    for iid, t in traces.items():
        dropped = {c["sample"]: c["dropped"] for c in t["candidates"]}
        assert dropped[1] == "syntax_error" and dropped[2] == "blank_lines_only", iid
        assert dropped[0] == dropped[3] == dropped[4] == "", iid
        assert t["votes"] == 2 and t["status"] == "patch", iid
        assert t["files"] == records[(iid, "file_localization")].ground_truth["items"]
    assert summary["with_patch"] == 11 and summary["empty_patch"] == 1
    assert summary["status"] == {"no_candidate": 1, "patch": 11}
    assert summary["candidates_dropped"] == {"syntax_error": 11, "blank_lines_only": 11, "no_blocks": 5}
    # The Python 2 instance has no function answer: the pipeline fell back and still produced the fix.
    assert summary["fallbacks"].get("functions_unparsed_file", 0) >= 1

    # Each prediction applies at base_commit in a clone and gives the oracle's files.
    inst_by_id = {i.instance_id: i for i in instances}
    clones = {}
    for row in rows:
        if not row["model_patch"]:
            continue
        inst = inst_by_id[row["instance_id"]]
        if inst.repo not in clones:
            clones[inst.repo] = tmp_path / "clones" / inst.repo.replace("/", "__")
            assert _git(tmp_path, "clone", "-q", str(repos[inst.repo]), str(clones[inst.repo])).returncode == 0
        clone = clones[inst.repo]
        assert _git(clone, "checkout", "-q", "-f", "--detach", inst.base_commit).returncode == 0
        _git(clone, "clean", "-qfd")
        check = _git(clone, "apply", "--check", "-", input=row["model_patch"])
        assert check.returncode == 0, (row["instance_id"], check.stderr)
        assert _git(clone, "apply", "-", input=row["model_patch"]).returncode == 0
        oracle = records[(inst.instance_id, "edit_generation")].ground_truth["oracle_new_content"]
        for path, new in oracle.items():
            if new:  # deletions are not expressible as SEARCH/REPLACE
                assert (clone / path).read_text() == new, (row["instance_id"], path)
        assert COMMENT not in row["model_patch"]  # the earliest sample of the winning key is written


def test_select_patch_majority_and_ties():
    c = lambda k, key, dropped="": Candidate(k, f"patch{k}", key, dropped)  # noqa: E731
    assert select_patch([c(0, "B"), c(1, "A"), c(2, "A")]) == ("patch1", 2)
    assert select_patch([c(0, "B"), c(1, "A")]) == ("patch0", 1)  # tie → earliest sample
    assert select_patch([c(0, "", "syntax_error"), c(1, "A")]) == ("patch1", 1)
    assert select_patch([c(0, "", "no_blocks")]) == ("", 0)


def test_candidate_filters():
    files = {"pkg/a.py": "def f():\n    return 1\n\n\ndef g():\n    return 2\n", "README.md": "hello\n"}
    read = lambda paths: {p: files[p] for p in paths if p in files}  # noqa: E731
    ok = make_candidate(0, _block("pkg/a.py", "    return 1", "    return 3"), read)
    assert not ok.dropped and ok.patch.startswith("diff --git a/pkg/a.py b/pkg/a.py")
    assert make_candidate(0, _block("pkg/a.py", "    return 1", "    return (3"), read).dropped == "syntax_error"
    assert make_candidate(0, _block("pkg/a.py", "def g():", "\ndef g():"), read).dropped == "blank_lines_only"
    comment_only = _block("pkg/a.py", "    return 1", "    return 1  # one")
    assert make_candidate(0, comment_only, read).dropped == "no_code_change"
    assert make_candidate(0, _block("pkg/a.py", "nope", "x"), read).dropped == "no_change"
    assert make_candidate(0, "no edits here", read).dropped == "no_blocks"
    created = make_candidate(0, _block("pkg/new.py", "", "X = 1"), read)
    assert not created.dropped and "new file mode" in created.patch
    assert not make_candidate(0, _block("README.md", "hello", "bye"), read).dropped  # non-Python: text key


def test_lexical_fallback_ranks_mentioned_files():
    paths = ["pkg/a.py", "pkg/ledger.py", "pkg/money.py"]
    contents = {"pkg/a.py": "def unrelated(): ...\n", "pkg/money.py": "class Money:\n    def split(self): ...\n"}
    assert lexical_file_ranking("Money.split rounds wrongly", paths, contents)[0] == "pkg/money.py"
    assert lexical_file_ranking("crash in pkg/ledger.py", paths, contents)[0] == "pkg/ledger.py"
    assert lexical_file_ranking("nothing relevant", paths, {}) == paths


def test_resolve_cli_smoke_tiny_model(sample, tiny_llama, tmp_path, capsys):
    from swe_rl_jax.cli import main as cli

    repos, _ = sample
    out = tmp_path / "preds.jsonl"
    rc = cli(["resolve", "--instances", str(INSTANCES), "--repos", str(next(iter(repos.values())).parent),
              "--out", str(out), f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2", "model_name=tiny",
              "limit=1", "localization.max_new_tokens=4", "repair.max_new_tokens=4", "agentless.num_samples=2",
              "progress=false"])
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["instance_id"] == "quillsoft__configlet-12"
    assert rows[0]["model_name_or_path"] == "tiny" and isinstance(rows[0]["model_patch"], str)
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.index("{"):])["instances"] == 1
    trace = json.loads((tmp_path / "preds.trace.jsonl").read_text())
    assert len(trace["responses"]["repair"]) == 2 and trace["files"]


@pytest.mark.parametrize("repos, overrides, needle", [
    ("missing", [], "--repos: no such directory"),
    ("empty", [], "repositories the instances name is under"),
    ("empty", ["instance_ids=[nope]"], "1 of instance_ids not in"),  # an unknown id is named, not dropped
    ("empty", ["shard=4/4"], "shard: need 0 <= I < N"),
])
def test_resolve_checks_its_inputs_before_loading_the_model(repos, overrides, needle, tmp_path, capsys):
    from swe_rl_jax.cli import main as cli

    (tmp_path / "empty").mkdir()
    out = tmp_path / "preds.jsonl"
    rc = cli(["resolve", "--instances", str(INSTANCES), "--repos", str(tmp_path / repos), "--out", str(out),
              "model.checkpoint=/no/such/model", *overrides])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "/no/such/model" not in err  # the model was never loaded
    assert not out.exists()


def test_file_localization_prompt_lists_the_retrieved_files_when_asked(sample):
    from swe_rl_jax.data.retrieval import bm25_ranking
    from swe_rl_jax.data.sources import GitRepo, Snapshot
    from swe_rl_jax.resolve.localization import localize_files
    from swe_rl_jax.resolve.repo import RepoView as _Repo
    from swe_rl_jax.resolve.steps import Resolution, drive

    repos, _ = sample
    snapshot = Snapshot(GitRepo(repos["quillsoft/configlet"]), "HEAD")
    options = AgentlessOptions(tree_retrieval=2)
    repo = _Repo(snapshot, options)
    prompts_seen = []

    def respond(prompts, n):
        prompts_seen.extend(prompts)
        return [["no fence"]]  # unparsable: the lexical fallback reads the contents retrieval read

    issue = "to_bool('on') returns False; converter registry"
    files = drive(localize_files(issue, repo, options, Resolution("x", "", "patch"), "x"),
                  lambda ask: respond([ask.messages], ask.n)[0])
    assert len(files) == options.top_files
    paths = sorted(repo.source_files)
    expected = bm25_ranking(issue, paths, snapshot.read_text(paths))[:2]
    assert "most similar first:\n\n" + "\n".join(expected) + "\n\nWhich" in prompts_seen[0][-1]["content"]


@pytest.mark.parametrize("tree_outline", [False, True])
def test_file_localization_prompt_shows_the_outline_when_asked(sample, tree_outline):
    from swe_rl_jax.data.sources import GitRepo, Snapshot
    from swe_rl_jax.resolve.localization import localize_files
    from swe_rl_jax.resolve.repo import RepoView as _Repo
    from swe_rl_jax.resolve.steps import Resolution, drive

    repos, _ = sample
    repo = _Repo(Snapshot(GitRepo(repos["quillsoft/configlet"]), "HEAD"), AgentlessOptions(tree_outline=tree_outline))
    prompts_seen = []

    def respond(prompts, n):
        prompts_seen.extend(prompts)
        return [["```\nconfiglet/types.py\n```"]]

    files = drive(localize_files("to_bool('on') fails", repo, AgentlessOptions(tree_outline=tree_outline),
                                 Resolution("x", "", "patch"), "x"), lambda ask: respond([ask.messages], ask.n)[0])
    assert files == ["configlet/types.py"]
    line = "    env.py  # _env_key, environ_overrides, overlay_environ\n"
    assert (line in prompts_seen[0][-1]["content"]) == tree_outline
    assert "    env.py\n" in prompts_seen[0][-1]["content"] or tree_outline


# ---------------------------------------------------------------------------- batched runs: resume, shards, failures


def _scripted_config(sample, tmp_path, out="preds.jsonl", **kw):
    repos, _ = sample
    return ResolveConfig(instances=str(INSTANCES), repos=str(next(iter(repos.values())).parent),
                         out=str(tmp_path / out), model_name="scripted", agentless=AgentlessOptions(num_samples=5),
                         progress=False, **{"chunk": 4, **kw})


def _scripted(sample):
    _, records = sample
    by_issue = {i.problem_statement: i.instance_id for i in load_instances(INSTANCES, require_patch=False)}
    return FunctionPolicy(scripted_policy(records, by_issue)[0])


class Killed(Exception):
    pass


def test_an_interrupted_run_resumes_to_the_uninterrupted_file(sample, tmp_path, capsys):
    whole = _scripted_config(sample, tmp_path, "whole.jsonl")
    run_resolve(whole, _scripted(sample))

    policy = _scripted(sample)
    real = policy.generate

    def dies_in_the_second_chunk(requests):
        if len(policy.batches) == 5:  # chunk 1 took 4 rounds (file, function, line, repair)
            raise Killed
        return real(requests)

    policy.generate = dies_in_the_second_chunk
    config = _scripted_config(sample, tmp_path)
    with pytest.raises(Killed):
        run_resolve(config, policy)
    out, trace = tmp_path / "preds.jsonl", tmp_path / "preds.trace.jsonl"
    assert len(out.read_text().splitlines()) == 4
    with out.open("a") as f:  # a kill mid-line
        f.write('{"instance_id": "tidewater__led')
    with trace.open("a") as f:  # and a trace row whose prediction was never written
        f.write(json.dumps({"instance_id": "orphan"}) + "\n")

    again = _scripted(sample)
    summary = run_resolve(config, again)
    asked = {r.task_id.split("/")[0] for batch in again.batches for r in batch}
    first_four = [json.loads(line)["instance_id"] for line in (tmp_path / "whole.jsonl").read_text().splitlines()[:4]]
    assert not asked & set(first_four) and len(asked) == 8  # the finished instances were not sampled again
    assert summary["resumed"] == 4 and summary["instances_done_this_run"] == 8
    assert "resume: 4 of 12 instances already in" in capsys.readouterr().err
    assert out.read_text() == (tmp_path / "whole.jsonl").read_text()
    assert trace.read_text() == (tmp_path / "whole.trace.jsonl").read_text()
    # A third run has nothing to do and asks nothing (no model would be loaded).
    assert run_resolve(config, None)["instances_done_this_run"] == 0


def test_shards_concatenate_to_the_whole_run(sample, tmp_path):
    run_resolve(_scripted_config(sample, tmp_path, "whole.jsonl"), _scripted(sample))
    parts = []
    for i in range(3):
        run_resolve(_scripted_config(sample, tmp_path, f"shard{i}.jsonl", shard=f"{i}/3", chunk=3), _scripted(sample))
        parts.append((tmp_path / f"shard{i}.jsonl").read_text())
    assert "".join(parts) == (tmp_path / "whole.jsonl").read_text()
    assert [len(p.splitlines()) for p in parts] == [4, 4, 4]


def test_answers_do_not_depend_on_the_other_instances(sample, tmp_path):
    """Each request's seed derives from (seed, instance id, stage) only: the same whatever the
    chunk, limit or shard, and different across instances and stages."""
    def seeds(**kw):
        policy = _scripted(sample)
        run_resolve(_scripted_config(sample, tmp_path, f"p{len(kw)}{kw.get('chunk', 0)}.jsonl", **kw), policy)
        return {r.task_id: r.seed for batch in policy.batches for r in batch}

    alone = seeds(instance_ids=("quillsoft__configlet-12",), chunk=1)
    together = seeds(chunk=12)
    assert alone and all(together[t] == s for t, s in alone.items())
    assert len(set(together.values())) == len(together)


def test_a_stage_whose_every_request_fails_stops_the_run(sample, tmp_path):
    from swe_rl_jax.policies import PolicyError

    class Dead:
        def generate(self, requests):
            return [PolicyResponse(r.task_id, (), "URLError calling http://h:1/v1/chat/completions: refused")
                    for r in requests]

    with pytest.raises(PolicyError, match="every file request failed .4 of 4.; first error: URLError calling http://h:1"):
        run_resolve(_scripted_config(sample, tmp_path), Dead())
    assert not (tmp_path / "preds.jsonl").exists()  # nothing that looks like a result


def test_failed_requests_are_counted_and_named_in_the_trace(sample, tmp_path):
    policy = _scripted(sample)
    real = policy.generate

    def function_stage_fails_for_one(requests):
        out = real(requests)
        return [PolicyResponse(r.task_id, (), "HTTP 503 from http://h/v1 (gave up after 6 attempts)")
                if r.task_id == "quillsoft__configlet-12/function" else o for r, o in zip(requests, out)]

    policy.generate = function_stage_fails_for_one
    summary = run_resolve(_scripted_config(sample, tmp_path), policy)
    assert summary["failed"] == {"function": 1}
    traces = {t["instance_id"]: t for t in map(json.loads, (tmp_path / "preds.trace.jsonl").read_text().splitlines())}
    assert traces["quillsoft__configlet-12"]["errors"] == {"function": "HTTP 503 from http://h/v1 (gave up after 6 attempts)"}
    assert "functions_lexical" in traces["quillsoft__configlet-12"]["fallbacks"]  # it fell back, counted
    assert all(not t["errors"] for i, t in traces.items() if i != "quillsoft__configlet-12")


def test_one_repair_sample_uses_the_repair_settings(sample, tmp_path):
    """With num_samples=1 the repair request used to be asked with the localization settings
    (max_new_tokens, temperature ...): every repair.* key was ignored."""
    from swe_rl_jax.sampling import SamplingParams

    policy = _scripted(sample)
    config = dataclasses.replace(_scripted_config(sample, tmp_path, instance_ids=("quillsoft__configlet-12",)),
                                 agentless=AgentlessOptions(num_samples=1),
                                 localization=SamplingParams(max_new_tokens=64, temperature=0.0),
                                 repair=SamplingParams(max_new_tokens=321, temperature=0.6, top_p=0.95))
    run_resolve(config, policy)
    [repair] = [r for batch in policy.batches for r in batch if r.task_id.endswith("/repair")]
    assert (repair.n, repair.max_tokens, repair.temperature, repair.top_p) == (1, 321, 0.6, 0.95)
    [file] = [r for batch in policy.batches for r in batch if r.task_id.endswith("/file")]
    assert (file.max_tokens, file.temperature) == (64, 0.0)


def test_an_edit_of_a_file_the_interpreter_cannot_parse_is_kept():
    """The syntax filter parses with the host Python: a Python 2 file never parsed, so every edit
    of it was dropped as `syntax_error`. Only a file that parsed before may not break."""
    files = {"legacy.py": "def f():\n    print 'hello'\n", "ok.py": "def g():\n    return 1\n"}
    read = lambda paths: {p: files[p] for p in paths if p in files}  # noqa: E731
    kept = make_candidate(0, _block("legacy.py", "    print 'hello'", "    print 'hello, world'"), read)
    assert kept.dropped == "" and "+    print 'hello, world'" in kept.patch
    assert make_candidate(0, _block("ok.py", "    return 1", "    return (1"), read).dropped == "syntax_error"


def test_an_existing_file_that_is_not_utf8_is_not_overwritten_as_new():
    """A file that is not UTF-8 used to read as absent: an empty SEARCH then 'created' it, a
    `new file` diff over an existing file."""
    read = lambda paths: {p: None for p in paths if p == "latin1.py"}  # noqa: E731 - exists, not UTF-8
    assert make_candidate(0, _block("latin1.py", "", "X = 1"), read).dropped == "not_utf8"


def test_a_module_level_item_does_not_crowd_out_the_located_functions(tmp_path):
    """`variable:` answers and bare paths are module-level items (the whole file); shown first,
    they used the whole max_shown_lines budget and the located function was cut."""
    from swe_rl_jax.data.sample import commit_all, init_repo, write_files
    from swe_rl_jax.data.sources import GitRepo, Snapshot
    from swe_rl_jax.resolve.localization import item_windows
    from swe_rl_jax.resolve.repo import RepoView

    big = "".join(f"X{i} = {i}\n" for i in range(300)) + "def target():\n    return 1\n"
    repo = tmp_path / "r"
    init_repo(repo)
    write_files(repo, {"a.py": big, "b.py": "def other():\n    return 2\n"})
    commit = commit_all(repo, "base")
    view = RepoView(Snapshot(GitRepo(repo), commit), AgentlessOptions())
    windows = item_windows([("a.py", ""), ("a.py", "target")], view, context=2, budget=100)
    assert windows["a.py"] == [(1, 96), (299, 302)]  # target ±2 first, the file's top with the rest of 100
    # Across files too: a whole file listed first does not push out another file's function.
    windows = item_windows([("a.py", ""), ("b.py", "other")], view, context=0, budget=50)
    assert windows == {"a.py": [(1, 48)], "b.py": [(1, 2)]}


def test_resolve_against_a_dead_endpoint_is_one_line_and_exit_1(sample, tmp_path):
    import socket
    import sys

    repos, _ = sample
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "preds.jsonl"
    proc = subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "resolve", "--instances", str(INSTANCES),
                           "--repos", str(next(iter(repos.values())).parent), "--out", str(out),
                           "--endpoint", f"http://127.0.0.1:{port}/v1", "--served-model", "m",
                           "endpoint.max_retries=0", f"endpoint.cache_dir={tmp_path / 'cache'}", "progress=false"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: every file request failed (12 of 12); first error: URLError calling "
                                  f"http://127.0.0.1:{port}/v1/chat/completions"), proc.stderr
    assert not out.exists() and not (tmp_path / "preds.trace.jsonl").exists()
