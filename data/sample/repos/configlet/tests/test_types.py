import pytest

from configlet.types import get_converter, to_bool, to_duration, to_int, to_list


def test_to_int_accepts_underscores_and_prefixes():
    assert to_int("1_000") == 1000
    assert to_int("0x10") == 16


@pytest.mark.parametrize("text", ["1", "true", "Yes", " TRUE "])
def test_to_bool_true(text):
    assert to_bool(text) is True


def test_to_bool_rejects_garbage():
    with pytest.raises(ValueError):
        to_bool("maybe")


def test_to_list_splits_and_strips():
    assert to_list("a, b,,c") == ["a", "b", "c"]


def test_to_duration_units():
    assert to_duration("250ms") == 0.25
    assert to_duration("2h") == 7200.0
    assert to_duration(5) == 5.0


def test_unknown_converter():
    with pytest.raises(LookupError):
        get_converter("complex")
