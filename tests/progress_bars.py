"""tqdm's progress bars as they appear in captured stderr, found by tqdm's own status field: the
bracket it ends every bar line with, elapsed time, then a rate ("[00:00<?, ? splits/s]",
"[00:01, 7.20 examples/s]", "[00:03<00:00, 1.2s/it]"), whoever drew the bar (TFDS, this project)."""
from __future__ import annotations

import re

_STATUS = re.compile(r"\[\d+:\d\d(?::\d\d)?(?:<[^\],]*)?, [^\]]*(?:/s|s/\w+)(?:, [^\]]*)?\]")


def bars(stderr: str) -> list[str]:
    """The bar lines of `stderr` (tqdm redraws with carriage returns: each redraw is one)."""
    return [line for line in re.split(r"[\r\n]", stderr) if _STATUS.search(line)]
