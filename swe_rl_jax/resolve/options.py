"""`AgentlessOptions`: what each stage of `resolve` shows and keeps (docs/EVAL.md)."""
from __future__ import annotations

import dataclasses
from typing import Literal

from swe_rl_jax.config import require


@dataclasses.dataclass(frozen=True)
class AgentlessOptions:
    top_files: int = 3  # files kept from file localization (and from the lexical fallback)
    context_lines: int = 10  # ±lines around located items (line prompt) and lines (edit prompt)
    num_samples: int = 4  # repair samples per instance (Agentless: 40)
    tree_max_tokens: int = 8192  # budget of the repository tree (chars/4 estimate)
    tree_outline: bool = False  # the tree lists the names each file defines, as `build-data --tree-outline`
    tree_retrieval: int = 0  # BM25's best files listed under the tree, as `build-data --tree-retrieval`
    max_shown_lines: int = 800  # code lines per line/edit prompt
    semantics: Literal["agentless", "swe_rl"] = "agentless"  # how SEARCH/REPLACE blocks are applied
    file_patterns: tuple[str, ...] = ("*.py",)  # source files: file-name patterns or path globs
    exclude_patterns: tuple[str, ...] = ()  # e.g. `doc/**`
    include_tests: bool = False
    lexical_max_files: int = 5000  # files whose contents the lexical fallback and BM25 retrieval read
    reproduction_samples: int = 0  # reproduction scripts asked per instance (Agentless: 40); 0: no such stage
    # hierarchical (Agentless): files → functions → lines → repair on windows; files (Agentless
    # Mini): file lists only → repair on whole files.
    mode: Literal["hierarchical", "files"] = "hierarchical"
    # hierarchical: line-localization answers, each a location set; the repair samples are split
    # over the sets (Agentless: 4 sets at temperature 0.8, 10 repairs each).
    location_samples: int = 1
    # files: file-localization answers, each over a differently shuffled tree, keeping 2 to 5 paths
    # (Agentless Mini: as many as the repair samples); the repairs cycle over the distinct lists.
    file_samples: int = 1
    max_file_tokens: int = 60000  # files mode: the whole files shown per repair prompt (Agentless Mini: 60,000)
    # A SEARCH must match in the code the repair prompt showed (Agentless's --loc_interval; the
    # files mode: anywhere in the shown files); off: anywhere in the repository.
    search_in_shown: bool = False

    def __post_init__(self) -> None:
        require(self.top_files >= 1, "top_files", "must be >= 1")
        require(self.tree_retrieval >= 0, "tree_retrieval", "must be >= 0")
        require(self.context_lines >= 0, "context_lines", "must be >= 0")
        require(self.num_samples >= 1, "num_samples", "must be >= 1")
        require(self.reproduction_samples >= 0, "reproduction_samples", "must be >= 0")
        require(self.mode in ("hierarchical", "files"), "mode", f"must be hierarchical or files, got {self.mode!r}")
        require(self.location_samples >= 1, "location_samples", "must be >= 1")
        require(self.file_samples >= 1, "file_samples", "must be >= 1")
        require(self.max_file_tokens >= 1, "max_file_tokens", "must be >= 1")
        require(self.tree_max_tokens >= 1, "tree_max_tokens", "must be >= 1")
        require(self.max_shown_lines >= 1, "max_shown_lines", "must be >= 1")
        require(bool(self.file_patterns), "file_patterns", "must not be empty")
