"""Guards of a pytest run against the code under test (docs/HARNESS.md, "Threat model").

Plugins: the test command runs with `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`, so no plugin registers
itself through package metadata (a `*.dist-info/entry_points.txt` a patch adds to the import
path, or the overlay's install of a patched `setup.py`); the plugins of the cached environment,
which the harness built before any patch, are named on the command line instead
(`plugin_args`: `-p <module>` per `pytest11` entry point of its site-packages).

Sentinels: two tests the patch cannot know (random names), placed by the harness for the run in
a new directory beside the first test file (so the same conftest.py files and rootdir apply),
root-owned and read-only: one must pass, one must fail. The code under test runs in pytest's
process: a plugin it registers in memory, a report hook or a forged summary printed at exit
changes outcomes without knowing these names. A run in which a sentinel is missing, has the
wrong outcome, or which exits 0 although the failing sentinel failed, while the log names other
tests (node ids: a collection error that stopped the run names only files), is `tampered`: not
resolved, for `evaluate` and the rewards alike. The sentinels' ids are removed from the
statuses before grading.
"""
from __future__ import annotations

import configparser
import dataclasses
import posixpath
import secrets
from pathlib import Path
from typing import Mapping, Optional, Sequence

from swe_rl_jax.harness.testlog import FAILED, PASSED
from swe_rl_jax.paths import unsafe_path_reason

AUTOLOAD_OFF = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def runs_pytest(command: Sequence[str]) -> bool:
    """Whether a test command runs pytest (`python -m pytest ...`, `pytest ...`)."""
    return any(posixpath.basename(arg) in ("pytest", "py.test") for arg in command)


def plugin_args(site_packages: Path) -> list[str]:
    """`-p <module>` for every `pytest11` entry point installed in `site_packages`."""
    modules: list[str] = []
    for entry_points in sorted(site_packages.glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            parser.read_string(entry_points.read_text(encoding="utf-8"))
        except (configparser.Error, UnicodeDecodeError):
            continue
        if parser.has_section("pytest11"):
            modules += [value.split(":", 1)[0].strip() for value in parser["pytest11"].values()]
    return [arg for module in dict.fromkeys(modules) for arg in ("-p", module)]


@dataclasses.dataclass(frozen=True)
class Sentinels:
    path: str  # worktree-relative path of the sentinel test file
    passing: str  # the name of the test that must pass
    failing: str  # the name of the test that must fail

    def _find(self, statuses: Mapping[str, str], name: str) -> list[str]:
        suffix = f"{posixpath.basename(self.path)}::{name}"
        return [test_id for test_id in statuses if test_id.endswith(suffix)]

    def strip(self, statuses: Mapping[str, str]) -> dict[str, str]:
        """`statuses` without the sentinels' ids."""
        drop = {*self._find(statuses, self.passing), *self._find(statuses, self.failing)}
        return {k: v for k, v in statuses.items() if k not in drop}

    def tampering(self, statuses: Mapping[str, str], returncode: Optional[int]) -> Optional[str]:
        """Why the run's results cannot be trusted, or None. A log that names no test (a node id,
        `path::name`) besides the sentinels is not judged here: no test ran (a collection error
        names only its file), and nothing can pass."""
        if not any("::" in test_id for test_id in self.strip(statuses)):
            return None
        for name, expected in ((self.passing, PASSED), (self.failing, FAILED)):
            found = [statuses[i] for i in self._find(statuses, name)]
            if found != [expected]:
                return (f"the harness's sentinel test that must {'pass' if expected == PASSED else 'fail'} "
                        f"reported {found or 'nothing'}: the test process's results were changed")
        if returncode == 0:
            return "the test process exited 0 although the harness's failing sentinel test failed"
        return None


def place_sentinels(worktree: Path, directives: Sequence[str]) -> Optional[Sentinels]:
    """Writes the sentinel test file beside the first directive that is a Python file in the
    worktree; None when there is none (no test file to stand beside)."""
    first = next((d for d in directives if d.endswith(".py") and unsafe_path_reason(d, worktree) is None
                  and (worktree / d).is_file()), None)
    if first is None:
        return None
    token = secrets.token_hex(6)
    names = Sentinels(posixpath.join(posixpath.dirname(first), f"sentinel_{token}", f"test_{token}.py"),
                      f"test_{secrets.token_hex(6)}", f"test_{secrets.token_hex(6)}")
    target = worktree / names.path
    target.parent.mkdir(mode=0o755)
    target.write_text(f"def {names.passing}():\n    pass\n\n\ndef {names.failing}():\n"
                      f"    raise AssertionError({secrets.token_hex(6)!r})\n", encoding="utf-8")
    target.chmod(0o444)
    return names
