"""semkit: semantic versions, ranges and release notes."""
from semkit.changelog import bump_for, next_version, release_notes
from semkit.exceptions import InvalidRange, InvalidVersion, SemkitError
from semkit.lockfile import diff_locks, parse_lock
from semkit.parsing import coerce, parse_version
from semkit.ranges import Range
from semkit.version import Version

__version__ = "0.6.0"

__all__ = [
    "InvalidRange",
    "InvalidVersion",
    "Range",
    "SemkitError",
    "Version",
    "bump_for",
    "coerce",
    "diff_locks",
    "next_version",
    "parse_lock",
    "parse_version",
    "release_notes",
]
