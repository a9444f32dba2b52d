import pytest

from semkit.exceptions import InvalidVersion
from semkit.parsing import coerce, is_valid, parse_version


def test_parse_full_version():
    version = parse_version("v1.10.2-beta.3+sha.5114f85")
    assert version.release == (1, 10, 2)
    assert version.prerelease == ("beta", "3")
    assert version.build == ("sha", "5114f85")


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-", "1.2.3-01", "a.b.c", "1.2.3.4"])
def test_invalid_versions_are_refused(text):
    with pytest.raises(InvalidVersion):
        parse_version(text)


def test_error_names_the_text():
    with pytest.raises(InvalidVersion, match="not a semantic version: 'x1'"):
        parse_version("x1")


@pytest.mark.parametrize("text, expected", [("release-2.4", "2.4.0"), ("v3", "3.0.0"),
                                            ("1.2.3-rc.1", "1.2.3"), ("version 10.0.7 (lts)", "10.0.7")])
def test_coerce_reads_loose_versions(text, expected):
    assert str(coerce(text)) == expected


def test_is_valid():
    assert is_valid("0.0.1") and not is_valid("0.0")
