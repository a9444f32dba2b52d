"""Issue references in a pull request's title and body.

Three forms name an issue, as GitHub links them: `#N` (this repository), `owner/name#N`, and the
issue's URL `https://github.com/owner/name/issues/N`. A reference right after one of GitHub's
closing keywords (close, closes, closed, fix, fixes, fixed, resolve, resolves, resolved; any case,
an optional colon) is a *closing* link; GitHub wants one keyword per issue ("fixes #1, fixes #2"),
and so does this. `#N` inside a word (`abc#1`, `&#39;`) is no reference.
"""
from __future__ import annotations

import dataclasses
import re

_KEYWORD = r"(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)"
_REF = (r"(?:https?://github\.com/(?P<url_repo>[\w.-]+/[\w.-]+)/issues/(?P<url_num>\d+)"
        r"|(?P<repo>[\w.-]+/[\w.-]+)?#(?P<num>\d+))")
_PATTERN = re.compile(rf"(?P<kw>\b{_KEYWORD}:?\s+)?(?<![\w&]){_REF}\b", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class IssueLink:
    repo: str  # owner/name
    number: int
    closing: bool  # named after a closing keyword


def issue_links(text: str, repo: str, own_number: int = 0) -> list[IssueLink]:
    """The issues `text` references, in order of first appearance; a reference to the pull
    request itself (`own_number` in `repo`) is left out. An issue referenced twice is closing if
    any of its references is."""
    found: dict[tuple[str, int], bool] = {}
    for m in _PATTERN.finditer(text or ""):
        target = m.group("url_repo") or m.group("repo") or repo
        number = int(m.group("url_num") or m.group("num"))
        key = (target, number)
        if key == (repo, own_number) or number == 0:
            continue
        found[key] = found.get(key, False) or bool(m.group("kw"))
    return [IssueLink(r, n, closing) for (r, n), closing in found.items()]
