"""Lock files of pinned dependencies ("name==1.2.3" per line, "#" comments) and what changed
between two of them."""
from semkit.parsing import coerce, is_valid, parse_version

_ORDER = ("added", "removed", "upgraded", "downgraded")


def normalize_name(name):
    """Package names compare case-insensitively, with "-", "_" and "." alike (PEP 503)."""
    return "-".join(name.lower().replace("_", "-").replace(".", "-").split("-"))


def parse_lock(text):
    """name -> Version, in file order."""
    pins = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip():
            raise ValueError(f"line {number}: expected name==version, got {raw!r}")
        key = normalize_name(name.strip())
        if key in pins:
            raise ValueError(f"line {number}: {name.strip()} is pinned twice")
        version = version.strip()
        # Lock files also pin two-part versions ("idna==3.6"): read those as 3.6.0.
        pins[key] = parse_version(version) if is_valid(version) else coerce(version)
    return pins


def diff_locks(old, new):
    """{"added": [...], "removed": [...], "upgraded": [...], "downgraded": [...]}: sorted names,
    with (name, old, new) for the changed ones."""
    changes = {kind: [] for kind in _ORDER}
    for name in sorted(set(old) | set(new)):
        if name not in old:
            changes["added"].append(name)
        elif name not in new:
            changes["removed"].append(name)
        elif new[name] > old[name]:
            changes["upgraded"].append((name, old[name], new[name]))
        elif new[name] < old[name]:
            changes["downgraded"].append((name, old[name], new[name]))
    return changes


def summary(changes):
    """One line per non-empty kind, e.g. "upgraded: attrs 22.1.0 -> 23.1.0"."""
    lines = []
    for kind in _ORDER:
        items = changes[kind]
        if not items:
            continue
        if kind in ("added", "removed"):
            text = ", ".join(items)
        else:
            text = ", ".join(f"{name} {old} -> {new}" for name, old, new in items)
        lines.append(f"{kind}: {text}")
    return "\n".join(lines)
