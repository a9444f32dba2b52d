import pytest

from configlet import ConfigError, ConversionError, MissingKeyError, parse_ini_text
from configlet.loader import merge

SAMPLE = """
# service settings
[server]
host = 0.0.0.0
port = 8080

[server.tls]
enabled = yes
"""


def test_dotted_get():
    config = parse_ini_text(SAMPLE)
    assert config.get("server.port") == "8080"
    assert config.get("server.tls.enabled") == "yes"
    assert config.get("server.missing", 1) == 1


def test_get_as_converts_and_reports_errors():
    config = parse_ini_text(SAMPLE)
    assert config.get_as("server.port", "int") == 8080
    with pytest.raises(ConversionError):
        config.get_as("server.host", "int")
    with pytest.raises(MissingKeyError):
        config.get_as("server.timeout", "duration")


def test_bad_line_names_its_number():
    with pytest.raises(ConfigError, match=":2:"):
        parse_ini_text("[a]\nnot a pair\n")


def test_merge_is_recursive():
    assert merge({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}}) == {"a": {"x": 1, "y": 3}}
