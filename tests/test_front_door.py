"""The front door says what the house holds: README.md stays short and keeps the two quickstart
commands; every command and flag README.md and docs/CLI.md name is one the CLI's own `--help`
lists (and every command is on both); every relative link in README.md, docs/ and tools/README.md
resolves; README's layout is the tree (git's list of tracked files, the package's directories);
no two modules share a concept's name; every tools/ script the front pages name runs `--help`,
and every script in tools/ is named in tools/README.md."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI_MD = ROOT / "docs" / "CLI.md"
TOOLS_README = ROOT / "tools" / "README.md"
FLAG = re.compile(r"(?<![\w=/.-])--[a-z][\w-]*")
SPAN = re.compile(r"`([^`]+)`")

# One process asks the entry point for its command list, then each command for its --help, as a
# user would (`python -m swe_rl_jax.cli [COMMAND] --help`); the commands are the ones the top-level
# help lists, not a list kept here.
_HELP_DRIVER = """
import contextlib, io, json, re, sys
from swe_rl_jax import cli

def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
    return {"code": code, "out": out.getvalue()}

top = run(["--help"])
names = re.findall(r"(?m)^  (\\S+)  ", top["out"].split("commands:", 1)[1])
print("HELP-JSON " + json.dumps({"": top, **{n: run([n, "--help"]) for n in names}}))
"""


def _option_strings(help_text: str) -> set[str]:
    """The flags argparse lists in a help text's option lines (`  -v, --verbose  ...`)."""
    flags = set()
    for line in help_text.splitlines():
        m = re.match(r"^  (-\S.*?)(?:  |$)", line)
        if m:
            flags.update(opt.split(" ")[0] for opt in m.group(1).split(", "))
    return flags


@pytest.fixture(scope="module")
def cli_help() -> dict[str, dict]:
    run = subprocess.run([sys.executable, "-c", _HELP_DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    line = next(l for l in run.stdout.splitlines() if l.startswith("HELP-JSON "))
    helps = json.loads(line[len("HELP-JSON "):])
    assert len(helps) > 10, helps.keys()
    for name, h in helps.items():
        assert h["code"] == 0 and "usage:" in h["out"], (name, h)
    return helps


def _script_help(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path), "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_the_readme_is_short_and_keeps_the_quickstart_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, len(lines)
    code = [l.split("#")[0].strip() for l in lines if l.startswith("bash tools/")]
    assert code == ["bash tools/run_main.sh", "bash tools/run_tests.sh"]
    # CI runs the README's test command and nothing else.
    ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert ci == ['exec bash "$(dirname "$0")/../tools/run_tests.sh"']


def test_every_command_and_flag_the_readme_and_cli_page_name_exists(cli_help):
    commands = set(cli_help) - {""}
    flags = {name: _option_strings(h["out"]) for name, h in cli_help.items()}
    everywhere = flags[""] | set(FLAG.findall(cli_help[""]["out"]))  # --verbose, --help
    any_command = set().union(*flags.values())
    scripts: dict[str, set[str]] = {}
    wrong = []
    for page in (README, CLI_MD):
        for line in page.read_text().splitlines():
            cells = line.split(" | ")
            first = cells[0].lstrip("| ").strip() if line.startswith("|") else ""
            row = re.match(r"`([a-z][\w-]*)[ `]", first) if first.startswith("`") and first.endswith("`") else None
            if row and row.group(1) in commands:
                scope_of_row = row.group(1)
            else:
                scope_of_row = None
            for span in SPAN.findall(line):
                for named in re.findall(r"(?:swe_rl_jax\.cli|swe-rl-jax)(?: --verbose)? ([a-z][\w-]*)", span):
                    if named not in commands:
                        wrong.append(f"{page.name}: unknown command {named!r} in `{span}`")
                script = re.search(r"tools/[\w/]+\.py", span)
                command = re.search(r"(?:swe_rl_jax\.cli|swe-rl-jax)(?: --verbose)? ([a-z][\w-]*)", span)
                lead = re.match(r"([a-z][\w-]*)(?: |$)", span)
                if script:
                    path = ROOT / script.group(0)
                    if script.group(0) not in scripts:
                        scripts[script.group(0)] = _option_strings(_script_help(path).stdout) if path.exists() else set()
                    allowed = scripts[script.group(0)]
                elif command and command.group(1) in commands:
                    allowed = flags[command.group(1)] | everywhere
                elif lead and lead.group(1) in commands:
                    allowed = flags[lead.group(1)] | everywhere
                elif scope_of_row:
                    allowed = flags[scope_of_row] | everywhere
                else:
                    allowed = any_command | everywhere
                wrong += [f"{page.name}: {f} in `{span}`" for f in FLAG.findall(span) if f not in allowed]
    assert wrong == []

    # Every command is on both pages: in README's command list and in docs/CLI.md's flag table.
    readme_list = set(re.findall(r"(?m)^- `([a-z][\w-]*)`:", README.read_text()))
    cli_md = CLI_MD.read_text()
    flag_table = set(re.findall(r"(?m)^\| `([a-z][\w-]*)` \|", cli_md[cli_md.index("## Flags"):]))
    assert readme_list == commands and flag_table == commands
    # docs/CLI.md's flag table lists each command's flags whole.
    rows = {m.group(1): m.group(2) for m in re.finditer(r"(?m)^\| `([a-z][\w-]*)` \| (.*) \|$",
                                                         cli_md[cli_md.index("## Flags"):])}
    missing = {c: sorted(f for f in flags[c] if f.startswith("--") and f != "--help" and f"`{f}`" not in rows[c])
               for c in commands}
    assert {c: m for c, m in missing.items() if m} == {}


def _pages() -> list[Path]:
    return [README, TOOLS_README, *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_resolves():
    broken = []
    for page in _pages():
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            path = target.split("#", 1)[0]
            if re.match(r"[a-z][a-z+.-]*:", target) or not path:
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: ({target})")
        # This repository's own files named in the text: scripts, docs pages, configs.
        for path in re.findall(r"(?<![\w./-])((?:tools/[\w/.-]+\.(?:py|sh|md|jsonl?))|(?:docs/[\w.-]+\.md)|"
                               r"(?:configs/[\w.-]+\.yaml))", text):
            if not (ROOT / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {path}")
    assert broken == []
    assert "](docs/CLI.md)" in README.read_text() and "](docs/README.md)" in README.read_text()


def test_the_readme_layout_is_the_tree():
    text = README.read_text()
    block = text[text.index("## Layout"):]
    block = block[block.index("```") + 3:]
    block = block[block.index("\n") + 1:block.index("```")]
    listed = [line.split()[0] for line in block.splitlines() if line.strip()]
    assert [p for p in listed if not (ROOT / p).exists()] == []
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    top_dirs = {p.split("/")[0] + "/" for p in tracked if "/" in p and not p.startswith(".")}
    assert {p for p in listed if p.count("/") == 1} | {"swe_rl_jax/"} == top_dirs
    packages = {f"swe_rl_jax/{d.name}/" for d in (ROOT / "swe_rl_jax").iterdir() if (d / "__init__.py").exists()}
    assert {p for p in listed if p.startswith("swe_rl_jax/")} == packages
    # The sentence after the block names every single module of the package.
    after = text[text.index("Single modules in `swe_rl_jax/`"):text.index("## Links")]
    modules = {p.name for p in (ROOT / "swe_rl_jax").glob("*.py") if p.name != "__init__.py"}
    assert set(re.findall(r"`(\w+\.py)`", after)) == modules


def test_no_two_modules_share_a_concept_name():
    """A module or package at the package's top is the one home of its word: no module elsewhere
    has that name (swe_rl_jax/policy.py beside policies/ was two), and no package holds a module
    and its plural (agent/environment.py beside environments.py). commands/ is named after the
    commands, and config/run/options are each package's own by convention."""
    pkg = ROOT / "swe_rl_jax"
    conventional = {"__init__", "__main__", "config", "run", "options"}

    def word(name: str) -> str:
        return name[:-3] + "y" if name.endswith("ies") else name[:-1] if name.endswith("s") else name

    top = [p for p in pkg.glob("*.py") if p.stem not in conventional | {"cli"}]
    top += [d for d in pkg.iterdir() if (d / "__init__.py").exists()]
    homes: dict[str, Path] = {}
    clashes = []
    for p in top:
        w = word(p.stem)
        if w in homes:
            clashes.append(f"{p.relative_to(pkg)} and {homes[w].relative_to(pkg)}")
        homes[w] = p
    clashes += [f"{p.relative_to(pkg)} and {homes[word(p.stem)].relative_to(pkg)}" for p in pkg.rglob("*.py")
               if p.parent != pkg and p.relative_to(pkg).parts[0] != "commands" and p.stem not in conventional
               and word(p.stem) in homes and homes[word(p.stem)] != p.parent]
    by_word: dict[tuple[Path, str], list[str]] = {}
    for p in pkg.rglob("*.py"):
        by_word.setdefault((p.parent, word(p.stem)), []).append(p.name)
    clashes += [f"{d.relative_to(pkg)}: {names}" for (d, _), names in by_word.items() if len(names) > 1]
    assert clashes == []


def test_every_tools_script_is_listed_and_the_named_ones_run_help():
    tools = ROOT / "tools"
    listing = TOOLS_README.read_text()
    listed = {tools / p for p in re.findall(r"`([\w/]+\.(?:py|sh))`", listing)}
    on_disk = {p for p in tools.rglob("*") if p.suffix in (".py", ".sh")}
    assert on_disk - listed == set() and listed - on_disk == set()
    named = set(listed)
    for page in (README, ROOT / "docs" / "README.md"):
        named |= {ROOT / p for p in re.findall(r"tools/[\w/]+\.py", page.read_text())}
    scripts = sorted(p for p in named if p.suffix == ".py" and 'if __name__ == "__main__"' in p.read_text())
    imported = sorted(p for p in named if p.suffix == ".py" and p not in scripts)
    # A module without a command line says so where it is listed.
    rows = {p: next(l for l in listing.splitlines() if f"`{p.relative_to(tools).as_posix()}`" in l) for p in imported}
    assert [p for p, row in rows.items() if "(imported)" not in row] == []
    assert ROOT / "tools" / "accelerator_check.py" in scripts and len(scripts) > 30
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(scripts, pool.map(_script_help, scripts)))
    failed = {str(p.relative_to(ROOT)): (r.returncode, r.stderr[-500:]) for p, r in runs.items()
              if r.returncode != 0 or "usage:" not in r.stdout}
    assert failed == {}
