"""SWE-RL's "related but unmodified" files of an instance: the import heuristic or a policy.

Heuristic (`related.rank_related`): files the modified files import, then files sharing the
longest directory path with them, then by path. Policy: the heuristic's first `shortlist`
candidates are listed under the issue and the modified files, and the policy names up to `k` of
them, one path per line (the prompt is `relevant_messages`, the parser `parse_relevant`); a
policy that names none of the listed files leaves the heuristic's choice, counted. The instance
keeps the files and which of the two chose them (`related_files`, `related_source`).
"""
from __future__ import annotations

import ast
import re
from typing import Sequence

from swe_rl_jax.data.pysource import PYTHON_SUFFIXES, SourceSyntaxError, parse_source
from swe_rl_jax.data.related import rank_related
from swe_rl_jax.data.skeleton import SourceFilter
from swe_rl_jax.data.sources import GitRepo, Snapshot

RELEVANT_SYSTEM = ("You are an expert software engineer. Given an issue and the files a fix changes, you "
                   "name the other files of the repository a developer should read to make that fix.")
Message = dict[str, str]  # {"role": ..., "content": ...}, as every policy takes them
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*`?([^`\s]+)`?\s*$")


def ranked_candidates(git: GitRepo, base: str, modified: Sequence[str], source_filter: SourceFilter) -> list[str]:
    """Unmodified source files at `base`, most related to `modified` first (the import heuristic)."""
    snapshot = Snapshot(git, base)
    trees: dict[str, ast.Module] = {}
    for path, text in snapshot.read_text([p for p in modified if p.endswith(PYTHON_SUFFIXES)]).items():
        if text is not None:
            try:
                trees[path] = parse_source(text, path)
            except SourceSyntaxError:
                pass
    return rank_related([p for p in snapshot.files if source_filter(p)], list(modified), trees)


def relevant_messages(problem: str, modified: Sequence[str], candidates: Sequence[str], k: int) -> tuple[Message, ...]:
    """The policy's prompt: the issue, the modified files, the candidate files; answer with paths."""
    user = (f"<issue>\n{problem}\n</issue>\n\n"
            "The fix changes these files:\n" + "\n".join(modified) + "\n\n"
            "Other files of the repository:\n" + "\n".join(candidates) + "\n\n"
            f"Name at most {k} of the other files that are most relevant to the fix but that it does not "
            "change (code it calls, classes it extends, configuration it reads). Answer with one path per "
            "line inside a ``` block, most relevant first, nothing else.")
    return ({"role": "system", "content": RELEVANT_SYSTEM}, {"role": "user", "content": user})


def parse_relevant(answer: str, candidates: Sequence[str], k: int) -> list[str]:
    """The first `k` distinct candidate paths the answer names, one per line (in the last ```
    block when there is one; bullets, numbers and backquotes are allowed)."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", answer, re.DOTALL)
    lines = (blocks[-1] if blocks else answer).splitlines()
    allowed, out = set(candidates), []
    for line in lines:
        m = _BULLET.match(line)
        if m and m.group(1) in allowed and m.group(1) not in out:
            out.append(m.group(1))
    return out[:k]
