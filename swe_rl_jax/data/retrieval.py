"""BM25 retrieval of a repository's files for an issue: the `bm25` baseline of file localization
(eval/baselines.py) and the ranked candidates a file-localization prompt may list under its tree
(`build-data --tree-retrieval`, docs/DATA.md). One definition, so the prompt's first candidate is
exactly the baseline's answer.

Each document is a file's path and its contents at the base commit, the query is the issue text,
both cut into `code_terms`; BM25 is the `bm25s` library's Lucene variant with k1 = 1.5, b = 0.75,
the retrieval of SWE-bench's BM25 setting and of Agentless.
"""
from __future__ import annotations

import logging
import re
import sys
from typing import Mapping, Optional, Sequence

BM25_K1, BM25_B = 1.5, 0.75

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def code_terms(text: str) -> list[str]:
    """BM25 terms of code or prose: each identifier in lower case, and when it is compound its
    `_` and CamelCase parts too (`get_as` → get_as, get, as; `TaskQueue` → taskqueue, task,
    queue); one-character terms are dropped. Repeats are kept (term frequency counts)."""
    terms = []
    for word in _IDENTIFIER.findall(text):
        parts = [p for chunk in word.split("_") for p in _CAMEL_PART.findall(chunk)]
        for term in [word] + (parts if len(parts) > 1 else []):
            if len(term) > 1:
                terms.append(term.lower())
    return terms


class Bm25Index:
    """A BM25 index of documents (`bm25s`, Lucene variant), built once and queried many times:
    a build ranks a commit's files for each of its instances with one index."""

    def __init__(self, documents: Sequence[str] = (), terms: Sequence[list[str]] | None = None):
        """Of `documents`, or of their `terms` (`code_terms` of each) when already computed."""
        import bm25s

        # bm25s sets its own logger to DEBUG at import: one line per index, hundreds per job.
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        terms = [code_terms(d) for d in documents] if terms is None else terms
        self.size = len(terms)
        self.retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        self.retriever.index(list(terms), show_progress=False)

    def scores(self, query: str) -> list[float]:
        """BM25 score of each document for `query`."""
        terms = code_terms(query)
        return [float(s) for s in self.retriever.get_scores(terms)] if terms else [0.0] * self.size


def bm25_scores(query: str, documents: Sequence[str]) -> list[float]:
    """BM25 score of each document for `query` (`bm25s`, Lucene variant)."""
    return Bm25Index(documents).scores(query)


def file_terms(path: str, text: Optional[str]) -> list[str]:
    """The BM25 terms of a file as a document: its path and its contents (none when None)."""
    return [sys.intern(t) for t in code_terms(f"{path}\n{text or ''}")]  # interned: terms repeat


class FileRanking:
    """BM25 over files: each document a file's path and its contents (see `bm25_ranking`);
    `terms`: each path's `file_terms`, when already computed."""

    def __init__(self, paths: Sequence[str], contents: Mapping[str, Optional[str]] | None = None,
                 terms: Mapping[str, list[str]] | None = None):
        self.paths = list(paths)
        if terms is None:
            terms = {p: file_terms(p, (contents or {}).get(p)) for p in self.paths}
        self.index = Bm25Index(terms=[terms[p] for p in self.paths])

    def rank(self, issue: str) -> list[str]:
        scores = self.index.scores(issue)
        return [self.paths[i] for i in sorted(range(len(self.paths)), key=lambda i: (-scores[i], i))]


def bm25_ranking(issue: str, paths: Sequence[str], contents: Mapping[str, Optional[str]]) -> list[str]:
    """`paths`, the best match for `issue` first; equal scores (a query sharing no term with a
    file) keep the order of `paths`. A path without contents is ranked by its path alone."""
    return FileRanking(paths, contents).rank(issue)


# Lexical matching of issue words with paths and definitions: the file fallback of `resolve`
# (resolve/localization.py) and the `lexical` baseline of file localization (eval/baselines.py).

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINED = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
# Words too common in issues and code to say anything about where the bug is.
_STOPWORDS = frozenset("""a an and are as at be but by can do does for from has have if in into is it its
not of on or self that the this to was when which while with none true false return def class import
init main test tests py get set new error issue bug fix""".split())


def issue_words(text: str) -> set[str]:
    """Identifier-like words of the issue (lower case, stop words and 1-2 letter words dropped),
    with their `_`-separated parts: `to_duration` also gives `duration`."""
    words = set()
    for w in _WORD.findall(text):
        for part in [w, *w.split("_")]:
            part = part.lower()
            if len(part) > 2 and part not in _STOPWORDS:
                words.add(part)
    return words


def lexical_file_ranking(issue: str, paths: Sequence[str], contents: Mapping[str, Optional[str]]) -> list[str]:
    """`paths` ranked by a lexical match with the issue, best first, ties in path order.

    Score of a file: 10 if its path or dotted module name appears in the issue; + 3 per path
    component (directory or file stem) that is an issue word; + 1 per distinct issue word that the
    file defines as a function or class name (`contents`, when given)."""
    words = issue_words(issue)
    low = issue.lower()

    def score(path: str) -> int:
        s = 0
        stem = path[:-3] if path.endswith(".py") else path
        if path.lower() in low or (stem.count("/") and stem.replace("/", ".").lower() in low):
            s += 10
        parts = [p.lower() for p in stem.split("/") if p]
        s += 3 * sum(p in words for p in parts)
        text = contents.get(path)
        if text:
            s += len({m.lower() for m in _DEFINED.findall(text)} & words)
        return s

    scores = {p: score(p) for p in paths}
    order = {p: i for i, p in enumerate(paths)}
    return sorted(paths, key=lambda p: (-scores[p], order[p]))
