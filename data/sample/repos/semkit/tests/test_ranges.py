import pytest

from semkit.exceptions import InvalidRange
from semkit.parsing import parse_version
from semkit.ranges import Range


def allowed(spec, *texts, **kwargs):
    return [parse_version(t) in Range(spec, **kwargs) for t in texts]


def test_caret_keeps_the_first_non_zero_part():
    assert allowed("^1.2.3", "1.2.3", "1.9.0", "2.0.0", "1.2.2") == [True, True, False, False]
    assert allowed("^0.2.3", "0.2.9", "0.3.0") == [True, False]
    assert allowed("^0.0.3", "0.0.3", "0.0.4") == [True, False]


def test_tilde_keeps_the_minor():
    assert allowed("~1.2.3", "1.2.9", "1.3.0", "1.2.2") == [True, False, False]
    assert allowed("~1", "1.9.9", "2.0.0") == [True, False]


def test_wildcards_and_bare_versions():
    assert allowed("1.x", "1.0.0", "1.99.0", "2.0.0") == [True, True, False]
    assert allowed("1.2", "1.2.7", "1.3.0") == [True, False]
    assert allowed("*", "0.0.1", "99.0.0") == [True, True]
    assert allowed("1.2.3", "1.2.3", "1.2.4") == [True, False]


def test_comparators_with_partial_versions():
    assert allowed(">1.2", "1.2.9", "1.3.0") == [False, True]
    assert allowed("<=1.2", "1.2.9", "1.3.0") == [True, False]
    assert allowed(">= 1.0, < 2", "1.5.0", "2.0.0", "0.9.0") == [True, False, False]


def test_alternatives_and_exclusions():
    assert allowed("<1.0.0 || >=2.0.0 !=2.1.0", "0.5.0", "1.5.0", "2.1.0", "2.2.0") == [True, False, False, True]


def test_prereleases_need_a_prerelease_comparator():
    assert allowed("^1.2.0", "1.3.0-beta") == [False]
    assert allowed("^1.2.0-rc.1", "1.2.0-rc.2", "1.3.0-beta") == [True, False]
    assert allowed("^1.2.0", "1.3.0-beta", include_prerelease=True) == [True]


def test_max_and_min_satisfying():
    versions = [parse_version(t) for t in ("1.1.0", "1.4.2", "1.4.10", "2.0.0")]
    assert str(Range("^1.2").max_satisfying(versions)) == "1.4.10"
    assert str(Range("^1.2").min_satisfying(versions)) == "1.4.2"
    assert Range(">=3").max_satisfying(versions) is None


@pytest.mark.parametrize("spec", ["~>1.2", "<*", "1.2.3.4"])
def test_invalid_ranges_are_refused(spec):
    with pytest.raises(InvalidRange):
        Range(spec)
