"""Release notes and the next version from conventional commit messages
("feat(parser): ...", "fix: ...", "refactor!: ..." with a "BREAKING CHANGE:" footer)."""
import re

_HEADER = re.compile(r"^(?P<type>[a-z]+)(?:\((?P<scope>[^)]*)\))?(?P<breaking>!)?: (?P<subject>.+)$")
_RANK = {None: 0, "patch": 1, "minor": 2, "major": 3}
SECTIONS = (("major", "Breaking changes"), ("minor", "Features"), ("patch", "Fixes"))


class Commit:
    def __init__(self, kind, scope, subject, breaking):
        self.kind = kind
        self.scope = scope
        self.subject = subject
        self.breaking = breaking


def parse_commit(message):
    """The conventional header of `message`, or None for a message that does not follow it."""
    lines = message.strip().splitlines()
    if not lines:
        return None
    match = _HEADER.match(lines[0].strip())
    if match is None:
        return None
    breaking = bool(match["breaking"]) or any(
        line.startswith(("BREAKING CHANGE:", "BREAKING-CHANGE:")) for line in lines[1:])
    return Commit(match["type"], match["scope"] or "", match["subject"].strip(), breaking)


def bump_for(message):
    """"major", "minor", "patch" or None: what the commit asks of the next release."""
    commit = parse_commit(message)
    if commit is None:
        return None
    if commit.breaking:
        return "major"
    if commit.kind == "feat":
        return "minor"
    if commit.kind in ("fix", "perf"):
        return "patch"
    return None


def next_version(current, messages):
    """The release after `current` given the commits since it; None when none asks for one.
    Before 1.0.0 a breaking change raises the minor version only."""
    bump = None
    for message in messages:
        candidate = bump_for(message)
        if _RANK[candidate] > _RANK[bump]:
            bump = candidate
    if bump is None:
        return None
    if current.major == 0 and bump == "major":
        bump = "minor"
    return current.bump(bump)


def release_notes(version, messages, date):
    """Markdown release notes: a heading, then the commits that ask for a release, by section."""
    lines = [f"## {version} ({date})"]
    for bump, title in SECTIONS:
        entries = []
        for message in messages:
            commit = parse_commit(message)
            if commit is not None and bump_for(message) == bump:
                prefix = f"**{commit.scope}:** " if commit.scope else ""
                entries.append(f"- {prefix}{commit.subject}")
        if entries:
            lines += ["", f"### {title}", ""] + entries
    return "\n".join(lines) + "\n"
