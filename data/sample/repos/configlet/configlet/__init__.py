"""configlet: small configuration loading with typed getters."""
from configlet.errors import ConfigError, ConversionError, MissingKeyError
from configlet.loader import Config, load_file, parse_ini_text

__version__ = "0.3.0"

__all__ = [
    "Config",
    "ConfigError",
    "ConversionError",
    "MissingKeyError",
    "load_file",
    "parse_ini_text",
]
