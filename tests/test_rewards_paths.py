"""Paths in answers: normalization reaches a fixed point, and paths unsafe to write to a checkout
(absolute, `..`, `.git`, control characters, through a symlink) never become a `resolve` patch."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swe_rl_jax.data.sample import commit_all, init_repo, write_files
from swe_rl_jax.data.sources import GitRepo, Instance, Snapshot
from swe_rl_jax.policies import PolicyResponse
from swe_rl_jax.resolve.candidates import make_candidate
from swe_rl_jax.resolve.driver import Counts, StageSampling, resolve_chunk
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.stages import resolve_steps
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.rewards import normalize_path, parse_search_replace, swe_rl_reward
from swe_rl_jax.paths import unsafe_path_reason

# Characters normalization treats specially, plus ordinary path characters.
_PATH_CHARS = st.sampled_from(list(" \t/./`'\":-*+•12)ab_\n") + ["./", "1. ", "- ", "a.py"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PATH_CHARS, max_size=24).map("".join))
def test_normalize_path_is_a_fixed_point(raw):
    once = normalize_path(raw)
    assert normalize_path(once) == once
    kept = normalize_path(raw, keep_root=True)
    assert normalize_path(kept, keep_root=True) == kept
    assert normalize_path(kept) == once  # dropping the root afterwards gives the same path


def test_normalize_path_examples():
    for raw in ["/./a.py", "./ /a.py", "` ./a.py `", "- `/a.py`:", "1. - a.py", "'./'a.py"]:
        assert normalize_path(raw) == "a.py", raw
    assert normalize_path("/./a.py", keep_root=True) == "/./a.py"
    assert normalize_path("../a.py") == "../a.py"  # a parent reference is not a decoration


def test_header_with_a_dot_segment_scores_like_the_plain_header():
    old = {"a.py": "x = 1\n"}
    new = {"a.py": "x = 2\n"}
    answer = ("<think>t</think><solution>\n```python\n### {}\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n"
              ">>>>>>> REPLACE\n```\n</solution>")
    plain = swe_rl_reward(old, new, answer.format("a.py"))
    assert plain[0] == 1.0
    assert swe_rl_reward(old, new, answer.format("/./a.py")) == plain


@pytest.mark.parametrize("path, reason", [
    ("pkg/a.py", None), ("./pkg/a.py", None), ("././a.py", None), ("pkg/.gitignore", None), ("a..b/c.py", None),
    ("", "empty path"), ("/etc/passwd", "absolute path"), ("/./a.py", "absolute path"), ("C:/x.py", "absolute path"),
    ("../x.py", "'..' component"), ("pkg/../../x.py", "'..' component"), (".git/hooks/post-checkout", "'.git'"),
    ("pkg/.GIT/config", "'.git'"), (".git./config", "'.git'"), ("GIT~1/config", "'.git'"),
    ("pkg/a\tb.py", "control character U+0009"), ("a\nb.py", "control character"), ("a\u202eyp.b", "U+202E"),
    (".g\u200cit/config", "control character"), ("pkg\\..\\x.py", "backslash"), ("pkg//a.py", "component"),
    ("pkg/./a.py", "component"), ("pkg/", "component"),
])
def test_unsafe_path_reason(path, reason):
    got = unsafe_path_reason(path)
    assert (got is None) if reason is None else (got is not None and reason in got), (path, got)


@pytest.fixture
def repo_with_link(tmp_path):
    repo = init_repo(tmp_path / "repos" / "o__r")
    write_files(repo, {"pkg/a.py": "def f():\n    return 1\n"})
    (repo / "pkg" / "link").symlink_to("../../outside")
    return repo, commit_all(repo, "base")


def test_symlinks_are_refused_on_disk_and_in_git_objects(repo_with_link):
    repo, commit = repo_with_link
    assert "symlink" in unsafe_path_reason("pkg/link/x.py", repo)
    assert "symlink" in unsafe_path_reason("./pkg/link", repo)
    assert unsafe_path_reason("pkg/a.py", repo) is None and unsafe_path_reason("pkg/new/x.py", repo) is None
    snapshot = Snapshot(GitRepo(repo), commit)
    assert snapshot.links == {"pkg/link"} and "pkg/link" not in snapshot.files
    assert "symlink" in unsafe_path_reason("pkg/link/x.py", links=snapshot.links)


def _block(path, search, replace):
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


DANGEROUS = [_block("../outside.py", "", "X = 1"), _block("/pkg/a.py", "    return 1", "    return 2"),
             _block(".git/hooks/post-checkout", "", "#!/bin/sh\necho owned"), _block("pkg/a\tb.py", "", "X = 1"),
             _block("pkg/link/x.py", "", "X = 1")]
GOOD = _block("pkg/a.py", "    return 1", "    return 2")


def test_parsed_blocks_keep_the_written_path():
    blocks = parse_search_replace(DANGEROUS[1] + _block("./pkg/a.py", "x", "y")).blocks
    assert [(b.path, b.written_path) for b in blocks] == [("pkg/a.py", "/pkg/a.py"), ("pkg/a.py", "./pkg/a.py")]


def test_resolve_drops_candidates_with_unsafe_paths(repo_with_link, tmp_path):
    repo, commit = repo_with_link
    inst = Instance("o__r-1", "o/r", commit, "f() returns 1 instead of 2", "")

    class Policy:
        def generate(self, requests):
            return [PolicyResponse(r.task_id, ("```\npkg/a.py\n```",) if r.n == 1 else  # localization: the one file
                                   (*DANGEROUS, GOOD, GOOD.replace("### pkg", "### ./pkg"))) for r in requests]

    options = AgentlessOptions(num_samples=len(DANGEROUS) + 2)
    git = GitRepo(repo)
    steps = resolve_steps(inst, Snapshot(git, git.resolve(commit)), options)
    sampling = StageSampling(SamplingParams(), SamplingParams(), SamplingParams())
    [res] = resolve_chunk([(inst.instance_id, steps)], Policy(), sampling, 0, Counts())
    assert [c.dropped for c in res.candidates] == ["invalid_path"] * len(DANGEROUS) + ["", ""]
    patch = res.patch
    assert res.status == "patch" and "a/pkg/a.py b/pkg/a.py" in patch
    assert all(bad not in patch for bad in ("outside", ".git/", "link/", "\\t"))
    read = lambda paths: {}  # noqa: E731 - every path is new: only the path decides
    assert [make_candidate(0, a, read).dropped for a in DANGEROUS[:4]] == ["invalid_path"] * 4
