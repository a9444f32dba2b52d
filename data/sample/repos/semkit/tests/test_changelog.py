import pytest

from semkit.changelog import bump_for, next_version, parse_commit, release_notes
from semkit.parsing import parse_version


@pytest.mark.parametrize("message, expected", [
    ("feat(cli): add --dry-run", "minor"),
    ("fix: keep trailing newline", "patch"),
    ("perf: cache parsed ranges", "patch"),
    ("docs: typo", None),
    ("refactor!: drop Python 3.8", "major"),
    ("feat: new parser\n\nBREAKING CHANGE: parse() now raises on empty input", "major"),
    ("Merge branch 'main'", None),
])
def test_bump_for(message, expected):
    assert bump_for(message) == expected


def test_parse_commit_reads_scope_and_subject():
    commit = parse_commit("fix(ranges): accept spaces after operators")
    assert (commit.kind, commit.scope, commit.subject, commit.breaking) == (
        "fix", "ranges", "accept spaces after operators", False)


def test_next_version_takes_the_largest_bump():
    messages = ["fix: a", "feat: b", "docs: c"]
    assert str(next_version(parse_version("1.4.2"), messages)) == "1.5.0"
    assert str(next_version(parse_version("1.4.2"), ["fix: a", "feat!: b"])) == "2.0.0"
    assert next_version(parse_version("1.4.2"), ["chore: deps"]) is None


def test_breaking_change_before_one_zero_raises_minor():
    assert str(next_version(parse_version("0.6.1"), ["feat!: new api"])) == "0.7.0"


def test_release_notes_group_by_section():
    notes = release_notes("1.5.0", ["fix(lock): sort names", "feat: ranges with ||", "chore: ci",
                                    "feat!: rename coerce"], "2024-05-02")
    assert notes == ("## 1.5.0 (2024-05-02)\n\n### Breaking changes\n\n- rename coerce\n\n"
                     "### Features\n\n- ranges with ||\n\n### Fixes\n\n- **lock:** sort names\n")
