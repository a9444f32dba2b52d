"""Reading versions from text: strict semver and a forgiving `coerce` for tags and loose input."""
import re

from semkit.exceptions import InvalidVersion
from semkit.version import Version

_NUMBER = r"0|[1-9]\d*"
_IDENT = r"[0-9A-Za-z-]+"
_STRICT = re.compile(
    rf"^v?(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<pre>{_IDENT}(?:\.{_IDENT})*))?(?:\+(?P<build>{_IDENT}(?:\.{_IDENT})*))?$"
)
_LOOSE = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def split_identifiers(text):
    """Dot-separated identifiers; numeric ones may not have leading zeros."""
    if not text:
        return ()
    parts = text.split(".")
    for part in parts:
        if part.isdigit() and len(part) > 1 and part[0] == "0":
            raise InvalidVersion(text)
    return tuple(parts)


def parse_version(text):
    """A strict semantic version; a leading "v" is allowed (tags are written v1.2.3)."""
    match = _STRICT.match(text.strip())
    if match is None:
        raise InvalidVersion(text)
    return Version(int(match["major"]), int(match["minor"]), int(match["patch"]),
                   split_identifiers(match["pre"]), tuple(match["build"].split(".")) if match["build"] else ())


def coerce(text):
    """The first version-like number group in `text`, missing parts filled with 0
    ("release-2.4" -> 2.4.0, "v3" -> 3.0.0); prerelease and build are dropped."""
    match = _LOOSE.search(text)
    if match is None:
        raise InvalidVersion(text)
    major, minor, patch = (int(group) if group is not None else 0 for group in match.groups())
    return Version(major, minor, patch)


def is_valid(text):
    try:
        parse_version(text)
    except InvalidVersion:
        return False
    return True
