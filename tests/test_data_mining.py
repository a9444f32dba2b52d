"""Mining a repository's first-parent history: which commits become instances and why the others
are dropped, on a hand-made history."""
from swe_rl_jax.data.mining import mine_history
from swe_rl_jax.data.options import MiningOptions
from swe_rl_jax.data.sample import commit_all, init_repo, run_isolated_git, write_files
from swe_rl_jax.data.skeleton import SourceFilter
from swe_rl_jax.data.sources import run_git

HUMAN = "Ada Lovelace <ada@example.org>"
BOT = "dependabot[bot] <49699333+dependabot[bot]@users.noreply.github.com>"


def test_mining_keeps_fixes_and_drops_the_rest(tmp_path):
    repo = init_repo(tmp_path / "proj")
    write_files(repo, {"pkg/a.py": "def a():\n    return 1\n", "pkg/b.py": "B = 1\n",
                       "pkg/__init__.py": '__version__ = "1.0"\n', "tests/test_a.py": "def test_a():\n    pass\n",
                       "poetry.lock": "x\n", "README.md": "hi\n"})
    commits = {"root": commit_all(repo, "Initial commit", HUMAN)}

    def commit(name, files, message, who=HUMAN):
        write_files(repo, files)
        commits[name] = commit_all(repo, message, who)

    commit("fix", {"pkg/a.py": "def a():\n    return 2\n", "tests/test_a.py": "def test_a():\n    assert a() == 2\n"},
           "Fix wrong return value of a() (#12)\n\nIt returned 1.")
    commit("bot", {"pkg/b.py": "B = 2\n"}, "Fix B", BOT)
    commit("version", {"pkg/__init__.py": '__version__ = "1.1"\n'}, "Bump version (fixes #3)")
    commit("lock", {"poetry.lock": "y\n"}, "Fix lock file")
    commit("refactor", {"pkg/b.py": "B = 3\n"}, "Tidy up constants")
    commit("huge", {"pkg/big.py": "".join(f"V{i} = {i}\n" for i in range(30))}, "Fix missing values")
    commit("many", {f"pkg/m{i}.py": "M = 1\n" for i in range(4)}, "Fix modules")
    commit("docs", {"README.md": "hello\n"}, "Fix typo in README")
    commit("tests", {"tests/test_a.py": "def test_a():\n    assert a() == 2  # checked\n"}, "Fix flaky test")
    # A merged pull request: its branch commits are not on the first-parent history.
    run_isolated_git(repo, "checkout", "-q", "-b", "feature")
    commit("wip1", {"pkg/b.py": "B = 4\n"}, "fix b, part 1")
    commit("wip2", {"pkg/a.py": "def a():\n    return 3\n"}, "fix a, part 2")
    run_isolated_git(repo, "checkout", "-q", "main")
    run_isolated_git(repo, "merge", "-q", "--no-ff", "-m",
                     "Merge pull request #40 from ada/fix-ab\n\nResolve a and b drift", "feature", identity=HUMAN)
    commits["merge"] = run_isolated_git(repo, "rev-parse", "HEAD").strip()
    # A bot's pull request merged by a human.
    run_isolated_git(repo, "checkout", "-q", "-b", "deps", commits["merge"])
    commit("botbranch", {"pkg/b.py": "B = 5\n"}, "Bump b", BOT)
    run_isolated_git(repo, "checkout", "-q", "main")
    run_isolated_git(repo, "merge", "-q", "--no-ff", "-m", "Merge pull request #41 from acme/dependabot/pip/b-5",
                     "deps", identity=HUMAN)

    opts = MiningOptions(max_files=3, max_changed_lines=20)
    instances, stats = mine_history(repo, "acme/proj", opts, SourceFilter())
    assert stats == {"commits_examined": 12, "instances": 2, "dropped": {
        "bot_author": 2, "lock_or_generated_only": 1, "no_issue_reference": 1, "no_source_change": 1,
        "root_commit": 1, "tests_only_or_empty": 1, "too_many_changed_lines": 1, "too_many_files": 1,
        "version_bump": 1}}
    merge, fix = instances  # newest first
    assert fix.instance_id == f"acme__proj-{commits['fix'][:12]}"
    assert fix.base_commit == commits["root"] and fix.repo == "acme/proj" and fix.source == "git-history"
    assert fix.problem_statement == "Fix wrong return value of a() (#12)\n\nIt returned 1."
    assert "pkg/a.py" in fix.patch and "tests/" not in fix.patch
    assert fix.test_patch.startswith("diff --git a/tests/test_a.py b/tests/test_a.py")
    # The merge is diffed against its first parent: both branch commits' changes, one instance.
    assert merge.base_commit == commits["tests"]
    assert merge.patch == run_git(repo, "diff", "--src-prefix=a/", "--dst-prefix=b/", commits["tests"],
                                  commits["merge"]).decode()
    assert "pkg/a.py" in merge.patch and "pkg/b.py" in merge.patch

    limited, stats = mine_history(repo, "acme/proj", MiningOptions(max_commits=3, rev=commits["fix"]), SourceFilter())
    assert [i.base_commit for i in limited] == [commits["root"]] and stats["commits_examined"] == 2
