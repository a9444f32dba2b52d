"""The Version value: precedence as in semver 2.0.0 and the bumps release tools need."""
from functools import total_ordering

PARTS = ("major", "minor", "patch")


def _identifier_key(identifier):
    # Numeric identifiers sort numerically and before alphanumeric ones (semver 11.4).
    if identifier.isdigit():
        return (0, int(identifier), "")
    return (1, 0, identifier)


@total_ordering
class Version:
    """major.minor.patch[-prerelease][+build]; build metadata never affects precedence."""

    def __init__(self, major, minor=0, patch=0, prerelease=(), build=()):
        if min(major, minor, patch) < 0:
            raise ValueError("version numbers must not be negative")
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = tuple(str(p) for p in prerelease)
        self.build = tuple(str(b) for b in build)

    @property
    def release(self):
        return (self.major, self.minor, self.patch)

    @property
    def is_prerelease(self):
        return bool(self.prerelease)

    def precedence_key(self):
        if not self.prerelease:
            # A release sorts after every prerelease of the same numbers.
            return (self.release, 1, ())
        return (self.release, 0, tuple(_identifier_key(p) for p in self.prerelease))

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.precedence_key() == other.precedence_key()

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.precedence_key() < other.precedence_key()

    def __hash__(self):
        return hash(self.precedence_key())

    def __str__(self):
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self):
        return f"Version({str(self)!r})"

    def finalize(self):
        """The release this prerelease leads to (1.2.0-rc.1 -> 1.2.0)."""
        return Version(self.major, self.minor, self.patch)

    def bump(self, part):
        """The next version after raising `part` ("major", "minor", "patch" or "prerelease")."""
        if part == "prerelease":
            return self._bump_prerelease()
        if part not in PARTS:
            raise ValueError(f"unknown version part {part!r}")
        if self.prerelease and self._is_first_of(part):
            # 2.0.0-rc.1 bumped by "major" is 2.0.0: the prerelease already announced it.
            return self.finalize()
        if part == "major":
            return Version(self.major + 1, 0, 0)
        if part == "minor":
            return Version(self.major, self.minor + 1, 0)
        return Version(self.major, self.minor, self.patch + 1)

    def _is_first_of(self, part):
        if part == "major":
            return self.minor == 0 and self.patch == 0
        if part == "minor":
            return self.patch == 0
        return True

    def _bump_prerelease(self):
        if not self.prerelease:
            return Version(self.major, self.minor, self.patch + 1, ("rc", "1"))
        parts = list(self.prerelease)
        for i in range(len(parts) - 1, -1, -1):
            if parts[i].isdigit():
                parts[i] = str(int(parts[i]) + 1)
                return Version(self.major, self.minor, self.patch, parts)
        return Version(self.major, self.minor, self.patch, parts + ["1"])
