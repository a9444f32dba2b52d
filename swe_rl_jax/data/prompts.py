"""Every prompt text of the data builder. Each user prompt states the exact answer format the
parsers in `swe_rl_jax/rewards/` read (docs/METHODS.md §1 and §3), so a model that follows the prompt
is scored on its content and never on a formatting accident.
"""
from __future__ import annotations

from typing import Mapping, Sequence

SORFT_SYSTEM = (
    "You are a careful software engineer who diagnoses and fixes issues in Python repositories. "
    "Reason about the issue step by step first if that helps; only the final answer, written in "
    "the format the request asks for, is read."
)

SWE_RL_SYSTEM = (
    "You are a careful software engineer who fixes issues in Python repositories. Work through "
    "the problem inside <think> and </think>, then give your final answer inside <solution> and "
    "</solution>. Use each of the four tags exactly once, in that order, and do not leave the "
    "reasoning empty."
)

_ISSUE = "Here is an issue reported against the repository:\n\n<issue>\n{issue}\n</issue>\n\n"
_ISSUE_OPEN, _ISSUE_CLOSE = _ISSUE.split("{issue}")


def issue_of(user_prompt: str) -> str:
    """The issue text of a SoRFT user prompt (the inverse of its `_ISSUE` part): everything up to
    the last closing tag, which is the template's own, since nothing after it is issue text."""
    if not user_prompt.startswith(_ISSUE_OPEN) or _ISSUE_CLOSE not in user_prompt:
        raise ValueError("not a SoRFT prompt: no <issue> block at its start")
    return user_prompt[len(_ISSUE_OPEN):].rpartition(_ISSUE_CLOSE)[0]

_SEARCH_REPLACE_FORMAT = """Write each edit as a SEARCH/REPLACE block in a fence:

```python
### path/to/file.py
<<<<<<< SEARCH
existing lines of the file, copied exactly, indentation included
=======
the lines that replace them
>>>>>>> REPLACE
```

The `### path` line names the file from the repository root. The SEARCH lines must occur once in
the file: add unchanged lines around the change if needed. Use one block per edit; an empty
SEARCH part creates a new file."""


def _code_blocks(files: Mapping[str, str], numbered: bool = False) -> str:
    """Each text under its `### path` header in a fence, tagged `python` for Python code."""
    blocks = []
    for path, text in files.items():
        lang = "python" if path.endswith(".py") and not numbered else ""
        body = text.removesuffix("\n")  # the closing fence line already ends the last line
        blocks.append(f"### {path}\n```{lang}\n{body}\n```")
    return "\n\n".join(blocks)


def file_localization(issue: str, tree: str, retrieved: Sequence[str] = (), at_most: int = 0) -> str:
    """`retrieved`: files a retriever ranked for the issue, best first, listed under the tree
    (`data/retrieval.py`); none: SoRFT's prompt. `at_most`: ask for at most that many files
    (`resolve`'s files mode, as Agentless Mini asks for 2 to 5); 0: the training prompt."""
    ranked = ("These files of the tree share the most words with the issue (BM25 retrieval over "
              "their paths and contents), most similar first:\n\n" + "\n".join(retrieved) + "\n\n"
              if retrieved else "")
    return (
        _ISSUE.format(issue=issue)
        + "These are the source files of the repository, one per line; each level of nesting is "
        "indented by four more spaces and directory names end with `/`:\n\n"
        f"<tree>\n{tree}\n</tree>\n\n"
        + ranked
        + "Which files must be edited to resolve the issue? Answer with their full paths relative "
        "to the repository root (directory names joined with `/`, e.g. `pkg/sub/module.py`), one "
        "path per line, most likely first, inside one fenced code block:\n\n"
        "```\npkg/first_file.py\npkg/sub/second_file.py\n```\n\n"
        + (f"Name only files listed above, at most {at_most}." if at_most else
           "Name only files listed above; usually one to three files are enough.")
    )


def function_localization(issue: str, skeletons: Mapping[str, str]) -> str:
    files = _code_blocks(skeletons)
    return (
        _ISSUE.format(issue=issue)
        + "Below is an outline of some files of the repository: classes, functions and methods "
        "with their signatures; bodies are replaced by `...`.\n\n"
        f"{files}\n\n"
        "Which classes, functions or methods must be edited to resolve the issue? Answer inside "
        "one fenced code block. Write each file's path on its own line, followed by one line per "
        "location in that file:\n"
        "- `function: name` for a top-level function;\n"
        "- `function: ClassName.method_name` for a method;\n"
        "- `class: ClassName` for code in a class body outside its methods.\n"
        "A path with no location lines under it means code at module level (outside every class "
        "and function) of that file. Leave a blank line between files. For example:\n\n"
        "```\npkg/models.py\nclass: Order\nfunction: Order.total\nfunction: load_orders\n\n"
        "pkg/settings.py\n```\n\n"
        "Use only files and names that appear in the outline above."
    )


def line_localization(issue: str, windows: Mapping[str, str]) -> str:
    files = _code_blocks(windows, numbered=True)
    return (
        _ISSUE.format(issue=issue)
        + "Below is the relevant code. Every line is shown as `number|code`, where the number is "
        "its line number in the file; `...` marks code that is left out.\n\n"
        f"{files}\n\n"
        "Which lines must be edited to resolve the issue? To add new code, name the existing "
        "line after which it goes (line 1 for the top of a file). Answer inside one fenced code "
        "block: each file's path on its own line, followed by `line: N` for a single line or "
        "`line: N-M` for lines N to M. You may add `function: name` or `class: Name` lines to say "
        "where the lines are. For example:\n\n"
        "```\npkg/models.py\nline: 42\nline: 57-59\n```\n\n"
        "Use only line numbers that are shown above."
    )


def edit_generation(issue: str, segments: Mapping[str, str]) -> str:
    files = _code_blocks(segments)
    return (
        _ISSUE.format(issue=issue)
        + "Below are the relevant code segments, each under the path of its file; `...` marks "
        "code that is left out.\n\n"
        f"{files}\n\n"
        "Edit the code to resolve the issue. " + _SEARCH_REPLACE_FORMAT
    )


def reproduction_test(issue: str) -> str:
    """`resolve`'s reproduction stage (docs/EVAL.md): one standalone script whose printed outcome
    says whether the issue is present, as Agentless's reproduction-test prompt asks; the outcome
    strings are `resolve.reproduction.MARKERS`."""
    return (
        _ISSUE.format(issue=issue)
        + "Write one standalone Python script that reproduces this issue against the installed "
        "repository: it imports what it needs, runs the code the issue describes, and checks the "
        "behaviour the issue asks for. It must print exactly one of these lines:\n\n"
        "- `Issue reproduced` when the behaviour the issue reports is still there;\n"
        "- `Issue resolved` when the code behaves as the issue asks;\n"
        "- `Other issues` when something else goes wrong (an unexpected exception, say).\n\n"
        "The same script is run before and after a fix, so it must tell these cases apart. It must "
        "finish in a few seconds, need no network and write no files outside a temporary "
        "directory. Answer with the whole script inside one fenced block:\n\n"
        "```python\nimport pkg\n\ntry:\n    result = pkg.function_named_in_the_issue()\n"
        "except Exception:\n    print(\"Other issues\")\nelse:\n"
        "    print(\"Issue resolved\" if result == \"what the issue expects\" else \"Issue reproduced\")\n```"
    )


def regression_selection(issue: str, tests: Sequence[str]) -> str:
    """`resolve`'s regression-test selection (docs/EVAL.md, "Verification"): which of the tests that
    pass at the base commit a fix of the issue may rightly change, as Agentless's
    select_regression_tests asks; `resolve.regression.excluded_tests` reads the answer."""
    listed = "\n".join(tests)
    return (
        _ISSUE.format(issue=issue)
        + "These existing tests of the repository pass before any fix:\n\n"
        f"```\n{listed}\n```\n\n"
        "A fix of the issue may change behaviour that some of them check, on purpose. Name the tests "
        "that should not be run after the fix for that reason; the others must keep passing. Answer "
        "with the names exactly as listed, one per line, in one fenced block (an empty block when "
        "every test should still pass):\n\n"
        "```\ntests/test_module.py::test_old_behaviour\n```"
    )


def swe_rl(issue: str, files: Mapping[str, str]) -> str:
    shown = _code_blocks(files)
    return (
        _ISSUE.format(issue=issue)
        + "Below are the full contents of files that may be relevant; some of them may not need "
        "any change.\n\n"
        f"{shown}\n\n"
        "Resolve the issue by editing these files (or creating new ones). After your reasoning, "
        "the <solution> section must contain only SEARCH/REPLACE edits. "
        + _SEARCH_REPLACE_FORMAT
    )
