import pytest

from semkit.parsing import parse_version
from semkit.version import Version


def v(text):
    return parse_version(text)


def test_str_round_trips():
    assert str(Version(1, 2, 3, ("rc", "1"), ("build", "7"))) == "1.2.3-rc.1+build.7"
    assert str(Version(2)) == "2.0.0"


def test_precedence_follows_the_semver_example():
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
               "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0"]
    versions = [v(t) for t in ordered]
    assert sorted(reversed(versions)) == versions
    assert all(a < b for a, b in zip(versions, versions[1:]))


def test_build_metadata_is_ignored_for_equality():
    assert v("1.2.3+linux") == v("1.2.3+windows")
    assert len({v("1.2.3+a"), v("1.2.3")}) == 1


def test_negative_numbers_are_refused():
    with pytest.raises(ValueError):
        Version(1, -1, 0)


@pytest.mark.parametrize("part, expected", [("major", "2.0.0"), ("minor", "1.3.0"), ("patch", "1.2.4")])
def test_bump_resets_the_lower_parts(part, expected):
    assert str(v("1.2.3").bump(part)) == expected


def test_bump_of_a_prerelease_finishes_it():
    assert str(v("2.0.0-rc.1").bump("major")) == "2.0.0"
    assert str(v("1.3.0-beta").bump("minor")) == "1.3.0"
    assert str(v("1.3.1-beta").bump("minor")) == "1.4.0"


def test_bump_prerelease_counts_up():
    assert str(v("1.2.3").bump("prerelease")) == "1.2.4-rc.1"
    assert str(v("1.2.4-rc.1").bump("prerelease")) == "1.2.4-rc.2"
    assert str(v("1.2.4-beta").bump("prerelease")) == "1.2.4-beta.1"


def test_finalize_drops_prerelease_and_build():
    assert str(v("3.1.0-rc.2+abc").finalize()) == "3.1.0"
