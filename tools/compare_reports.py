"""Two `evaluate` reports of the same instances side by side, id by id (docs/HARNESS.md, "Real
repositories with the guard"): for checking that a change of the harness changes no verdict and no
test's status on real repositories.

    python tools/compare_reports.py BEFORE/report.json AFTER/report.json

One line per instance of AFTER: its resolution, error, `guarded`, reset files and seconds in both
reports, how many test ids both name, how many of those have the same status, and the first that
differ; then the totals. Exit status 1 when a status or a resolution differs (a line per difference
names it), 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load_records(path: Path) -> dict[str, dict]:
    """instance_id -> record of an `evaluate` report (OUT/report.json)."""
    records = json.loads(path.read_text(encoding="utf-8"))["records"]
    return {r["instance_id"]: r for r in records}


def compare(before: dict[str, dict], after: dict[str, dict]) -> tuple[list[str], int, int, bool]:
    """The report's lines, the test ids both runs name, how many of them have the same status, and
    whether any status or resolution differs."""
    lines, common_total, equal_total, differs = [], 0, 0, False
    for iid in sorted(after):
        new, old = after[iid], before.get(iid, {})
        now, then = new.get("test_statuses") or {}, old.get("test_statuses") or {}
        common = sorted(set(now) & set(then))
        changed = [t for t in common if now[t] != then[t]]
        common_total += len(common)
        equal_total += len(common) - len(changed)
        resolution_changed = old and old.get("resolution_status") != new.get("resolution_status")
        differs = differs or bool(changed) or bool(resolution_changed)
        lines.append(f"{iid}: {old.get('resolution_status', '-')} -> {new['resolution_status']}"
                     f" (error {old.get('error')} -> {new.get('error')}; guarded {new.get('guarded')};"
                     f" reset {len(new.get('reset_files') or [])}; {old.get('seconds', 0):.1f} s -> {new['seconds']:.1f} s);"
                     f" ids {len(then)} / {len(now)}, {len(common) - len(changed)} of {len(common)} equal")
        if new.get("error"):
            lines.append(f"    {new['error']}: {new.get('message', '')[:300]}")
        lines += [f"    {t}: {then[t]} -> {now[t]}" for t in changed[:5]]
    lines.append(f"statuses equal: {equal_total} of {common_total} ids both runs name")
    return lines, common_total, equal_total, differs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    args = p.parse_args()
    try:
        before, after = load_records(args.before), load_records(args.after)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"error: not an evaluate report: {error}", file=sys.stderr)
        return 2
    lines, _, _, differs = compare(before, after)
    print("\n".join(lines))
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
