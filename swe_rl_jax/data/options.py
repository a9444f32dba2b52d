"""Typed options of the data builder (loaded with `swe_rl_jax.config.from_dict`)."""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

from swe_rl_jax.config import require
from swe_rl_jax.data.skeleton import SourceFilter
from swe_rl_jax.subtasks import SUBTASKS

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """A cheap, tokenizer-free estimate: about four characters per token for code and English."""
    return (len(text) + 3) // 4


def make_token_counter(tokenizer: str) -> TokenCounter:
    """"" → `approx_tokens`; "qwen" → the Qwen tokenizer shipped with the project; else a
    tokenizer directory. Real tokenizers make budgets exact but building much slower."""
    if not tokenizer:
        return approx_tokens
    from swe_rl_jax.tokenizer import load_tokenizer, qwen_tokenizer_dir  # loads transformers

    hf = load_tokenizer(qwen_tokenizer_dir() if tokenizer == "qwen" else tokenizer).hf
    return lambda text: len(hf.encode(text, add_special_tokens=False))


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    subtasks: tuple[str, ...] = SUBTASKS
    file_patterns: tuple[str, ...] = ("*.py",)  # source files: file-name patterns or path globs (`src/**/*.py`)
    exclude_patterns: tuple[str, ...] = ()  # never source files, e.g. `doc/**` (same pattern forms)
    include_tests: bool = False  # tests (test/, tests/, test_*.py, *_test.py, conftest.py) are not sources
    context_lines: int = 10  # around the relevant functions in line windows and edit segments
    skeleton_max_tokens: int = 8192  # repository tree of file localization
    # File localization's tree lists after each Python file the names it defines (skeleton.outline_note):
    # the model then sees what lexical and BM25 baselines read from the contents. Off: SoRFT's tree.
    tree_outline: bool = False
    # File localization lists under the tree the first `tree_retrieval` files of the BM25 ranking
    # for the issue (data/retrieval.py), as SWE-bench's BM25 setting hands a model retrieved
    # files; 0: SoRFT's prompt, the tree alone.
    tree_retrieval: int = 0
    max_prompt_tokens: int = 12288  # any user message; longer tasks are skipped (prompt_too_long)
    distractor_files: int = 2  # unmodified files shown besides the modified ones (function localization)
    related_files: int = 2  # unmodified files added to the SWE-RL context
    val_fraction: float = 0.1  # share of repositories in the validation split
    # Repositories that make the validation split, all others train (a repository cross-validation
    # holds each out in turn); empty: the split by hash and `val_fraction` (builder.py).
    held_out_repos: tuple[str, ...] = ()
    tokenizer: str = ""  # "" (chars/4), "qwen", or a tokenizer directory

    def __post_init__(self) -> None:
        require(bool(self.subtasks), "subtasks", "must name at least one subtask")
        for s in self.subtasks:
            require(s in SUBTASKS, "subtasks", f"unknown subtask {s!r}; expected some of {list(SUBTASKS)}")
        require(len(set(self.subtasks)) == len(self.subtasks), "subtasks", "lists a subtask twice")
        require(bool(self.file_patterns), "file_patterns", "must not be empty")
        for key in ("context_lines", "distractor_files", "related_files", "tree_retrieval"):
            require(getattr(self, key) >= 0, key, f"must be >= 0, got {getattr(self, key)}")
        for key in ("skeleton_max_tokens", "max_prompt_tokens"):
            require(getattr(self, key) > 0, key, f"must be > 0, got {getattr(self, key)}")
        require(0.0 <= self.val_fraction < 1.0, "val_fraction", f"must be in [0, 1), got {self.val_fraction}")

    def source_filter(self) -> SourceFilter:
        return SourceFilter(self.file_patterns, self.include_tests, self.exclude_patterns)


DEFAULT_BOT_PATTERNS = (
    "[bot]", "dependabot", "renovate", "github-actions", "pre-commit-ci", "greenkeeper",
    "snyk-bot", "mergify", "codecov", "imgbot", "allcontributors", "weblate",
)
# Lock files, generated code and other files whose changes say nothing about an issue.
DEFAULT_GENERATED_PATTERNS = (
    "*.lock", "package-lock.json", "pnpm-lock.yaml", "go.sum", "*_pb2.py", "*_pb2_grpc.py",
    "*.min.js", "*.min.css", "*.map",
)
DEFAULT_MESSAGE_PATTERN = (
    r"#\d+|\b(fix(es|ed)?|close[sd]?|resolve[sd]?|bug(fix)?|issue|crash(es|ed)?|regression|"
    r"broken|incorrect|wrong|error)\b"
)


@dataclasses.dataclass(frozen=True)
class MiningOptions:
    """Which commits of a repository's first-parent history become instances."""

    rev: str = "HEAD"
    max_commits: int = 1000  # newest first-parent commits examined
    max_files: int = 10  # non-test files changed
    max_changed_lines: int = 500  # added + removed lines in non-test files
    message_pattern: str = DEFAULT_MESSAGE_PATTERN  # case-insensitive; a commit must match it
    bot_patterns: tuple[str, ...] = DEFAULT_BOT_PATTERNS  # case-insensitive substrings of "name <email>"
    generated_patterns: tuple[str, ...] = DEFAULT_GENERATED_PATTERNS  # file-name patterns

    def __post_init__(self) -> None:
        for key in ("max_commits", "max_files", "max_changed_lines"):
            require(getattr(self, key) > 0, key, f"must be > 0, got {getattr(self, key)}")
        try:
            re.compile(self.message_pattern)
        except re.error as e:
            require(False, "message_pattern", f"is not a valid regular expression: {e}")
