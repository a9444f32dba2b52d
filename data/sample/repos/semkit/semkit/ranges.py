"""Version ranges in the npm / cargo style.

A range is one or more comparator sets joined by "||"; a set is comparators joined by "," or
spaces, all of which must hold. Comparators: ">=1.2.0", ">1.2", "<2", "<=1.4.1", "=1.0.0",
"!=1.3.0", caret "^1.2.3" (compatible: same first non-zero part), tilde "~1.2.3" (same minor),
wildcards "1.x", "1.2.*", "*", and bare versions ("1.2.3" exactly, "1.2" meaning 1.2.x).

A prerelease only satisfies a set that names a prerelease of the same major.minor.patch
("^1.2.0-rc.1" admits 1.2.0-rc.2, not 1.3.0-beta), unless `include_prerelease` is set.
"""
import re

from semkit.exceptions import InvalidRange
from semkit.parsing import split_identifiers
from semkit.version import Version

_COMPARATOR = re.compile(
    r"^(?P<op>\^|~|>=|<=|>|<|=|!=)?\s*v?(?P<major>\d+|[xX*])(?:\.(?P<minor>\d+|[xX*]))?"
    r"(?:\.(?P<patch>\d+|[xX*]))?(?:-(?P<pre>[0-9A-Za-z.-]+))?$"
)
_WILDCARDS = ("x", "X", "*")


def _number(group):
    return None if group is None or group in _WILDCARDS else int(group)


class Comparator:
    def __init__(self, op, version):
        self.op = op
        self.version = version

    def test(self, version):
        if self.op == ">=":
            return version >= self.version
        if self.op == ">":
            return version > self.version
        if self.op == "<=":
            return version <= self.version
        if self.op == "<":
            return version < self.version
        if self.op == "!=":
            return version != self.version
        return version == self.version

    def __repr__(self):
        return f"{self.op}{self.version}"


def _expand(text, spec):
    """One comparator of the spec as a list of plain comparators."""
    match = _COMPARATOR.match(text)
    if match is None:
        raise InvalidRange(spec, f"cannot read {text!r}")
    op = match["op"] or ""
    major, minor, patch = _number(match["major"]), _number(match["minor"]), _number(match["patch"])
    pre = split_identifiers(match["pre"]) if match["pre"] else ()
    if major is None:
        if op in ("<", "!="):
            raise InvalidRange(spec, f"{text!r} excludes every version")
        return []
    low = Version(major, minor or 0, patch or 0, pre)
    if op == "^":
        if major > 0 or minor is None:
            high = Version(major + 1, 0, 0)
        elif minor > 0 or patch is None:
            high = Version(0, minor + 1, 0)
        else:
            high = Version(0, 0, patch + 1)
        return [Comparator(">=", low), Comparator("<", high)]
    if op == "~" or (op in ("", "=") and patch is None):
        if minor is None:
            high = Version(major + 1, 0, 0)
        else:
            high = Version(major, minor + 1, 0)
        return [Comparator(">=", low), Comparator("<", high)]
    if op in (">", "<=") and patch is None:
        # ">1.2" means above every 1.2.x, "<=1.2" up to every 1.2.x.
        bound = Version(major + 1, 0, 0) if minor is None else Version(major, minor + 1, 0)
        return [Comparator(">=" if op == ">" else "<", bound)]
    return [Comparator(op or "=", low)]


class Range:
    def __init__(self, spec, include_prerelease=False):
        self.spec = spec
        self.include_prerelease = include_prerelease
        self.sets = []
        for alternative in spec.split("||"):
            parts = [p for p in re.split(r"[,\s]+", alternative.strip()) if p]
            parts = _join_operators(parts)
            comparators = []
            for part in parts:
                comparators.extend(_expand(part, spec))
            self.sets.append(comparators)
        if not self.sets:
            raise InvalidRange(spec, "empty range")

    def __contains__(self, version):
        return any(self._set_allows(comparators, version) for comparators in self.sets)

    def _set_allows(self, comparators, version):
        if not all(c.test(version) for c in comparators):
            return False
        if not version.is_prerelease or self.include_prerelease:
            return True
        return any(c.version.is_prerelease and c.version.release == version.release for c in comparators)

    def filter(self, versions):
        return [v for v in versions if v in self]

    def max_satisfying(self, versions):
        allowed = self.filter(versions)
        return max(allowed) if allowed else None

    def min_satisfying(self, versions):
        allowed = self.filter(versions)
        return min(allowed) if allowed else None

    def __repr__(self):
        return f"Range({self.spec!r})"


def _join_operators(parts):
    """">= 1.2" written with a space is one comparator."""
    joined = []
    for part in parts:
        if joined and joined[-1] in ("^", "~", ">=", "<=", ">", "<", "=", "!="):
            joined[-1] += part
        else:
            joined.append(part)
    return joined
