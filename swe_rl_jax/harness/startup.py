"""Start-up files an install step may not leave where Python looks for them (docs/HARNESS.md, step 7).

Python runs code from two kinds of files before the program it was asked to run: `sitecustomize`
and `usercustomize` (a module, a package or an extension module on the path), and the lines of a
site directory's `.pth` files that start with `import` (site.py's rule; other lines are paths).
Code an install step leaves there would run in the test process before the guard loads
(harness/guard.py), with nothing watching it. So after the install steps the harness reads, without
following links, what changed in the run's overlay environment and HOME (the work tree has its own
rules: integrity.install_may_change refuses both kinds anywhere in it) and refuses:
- any `sitecustomize` / `usercustomize` module, package or extension module;
- a `.pth` file with a line that runs code, but for the two lines old setuptools' `easy-install.pth`
  always held (`LEGACY_EASY_INSTALL`), which only reorder `sys.path`.
A `.pth` of path lines stays: that is how editable installs point at the work tree, and the
install steps get `PIP_CONFIG_SETTINGS=editable_mode=compat` (runner.py) so that setuptools' PEP 660
editable installs write such a file instead of an import hook of their own.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from swe_rl_jax.harness.treestate import State, changed_paths, read_file

_STEMS = frozenset({"sitecustomize", "usercustomize"})
_MAX_PTH_BYTES = 1 << 20
# setuptools < 49's easy-install.pth: bookkeeping that moves the file's paths to the front of sys.path.
LEGACY_EASY_INSTALL = frozenset({
    "import sys; sys.__plen = len(sys.path)",
    "import sys; new = sys.path[sys.__plen:]; del sys.path[sys.__plen:]; p = getattr(sys, '__egginsert', 0); "
    "sys.path[p:p] = new; sys.__egginsert = p + len(new)",
})


def runs_code(pth_text: str) -> bool:
    """Whether site.py would run code from a `.pth` file's lines (it executes those starting with
    `import` followed by a space or a tab)."""
    return any(line.startswith(("import ", "import\t")) and line.rstrip() not in LEGACY_EASY_INSTALL
               for line in pth_text.splitlines())


def start_up_code(root: Path, before: Mapping[str, State], after: Mapping[str, State]) -> list[str]:
    """The paths under `root`, created or changed between the snapshots `before` and `after`
    (treestate.snapshot), that would run code when Python starts (module docstring)."""
    found = []
    for path in changed_paths(dict(before), dict(after)):
        kind = after.get(path, ("",))[0]
        if not kind:
            continue  # removed
        parts = path.split("/")
        if any(p.split(".", 1)[0] in _STEMS for p in parts):
            found.append(path)
        elif parts[-1].endswith(".pth") and (kind != "file" or runs_code(
                read_file(root, path, _MAX_PTH_BYTES).decode("utf-8", "replace"))):
            found.append(path)
    return found
