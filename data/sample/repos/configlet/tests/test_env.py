from configlet import Config
from configlet.env import environ_overrides, overlay_environ


def test_overrides_use_double_underscore_nesting():
    environ = {"APP_SERVER__PORT": "9000", "OTHER": "x"}
    assert environ_overrides("APP_", environ) == {"server.port": "9000"}


def test_overlay_sets_values():
    config = overlay_environ(Config({"server": {"port": "80"}}), "APP_", {"APP_SERVER__PORT": "81"})
    assert config.get("server.port") == "81"
