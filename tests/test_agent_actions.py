"""The agent's action protocol: bash-only turns and the submission marker (expected values worked out
by hand from mini-swe-agent 2.4's regex and `_check_finished`), Qwen tool calls (the real chat
template renders them; the parser must read back the same call), and the editor's text semantics
(hand-computed files and observations)."""
import json

import pytest

from swe_rl_jax.agent.actions import (
    TOOLS,
    BashAction,
    EditorAction,
    FormatError,
    edit_file,
    is_submission,
    parse_bash_turn,
    parse_tool_turn,
)
from swe_rl_jax.tokenizer import load_tokenizer, qwen_tokenizer_dir

MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


# ---------------------------------------------------------------- bash-only turns


@pytest.mark.parametrize("text, command", [
    ("THOUGHT: list the files.\n\n```mswea_bash_command\nls -la\n```\n", "ls -la"),
    # whitespace after the language and around the command goes
    ("```mswea_bash_command   \n\n  pwd  \n\n```", "pwd"),
    # CRLF: the \r before each newline of the fences goes; the one inside the command stays
    ("THOUGHT\r\n```mswea_bash_command\r\ngit status\r\ngit diff\r\n```\r\n", "git status\r\ngit diff"),
    # backticks not at the start of a line are content
    ("```mswea_bash_command\necho '```' && echo ``x``\n```", "echo '```' && echo ``x``"),
    # a ``` at the start of a line closes the block: a nested block cuts the heredoc short, and what
    # follows the cut opens no new block
    ("```mswea_bash_command\ncat <<'EOF' > a.md\n```python\nx = 1\n```\nEOF\n```", "cat <<'EOF' > a.md"),
    # a four-backtick fence holds a three-backtick one
    ("````mswea_bash_command\nls\n````", "ls"),
    # an empty block is an (empty) command, as in mini-swe-agent
    ("```mswea_bash_command\n\n```", ""),
])
def test_one_bash_block_is_the_command(text, command):
    assert parse_bash_turn(text) == BashAction(command)


@pytest.mark.parametrize("text, found", [
    ("I will run ls.", 0),
    ("```bash\nls\n```", 0),  # another language
    ("```mswea_bash_commands\nls\n```", 0),  # the language must end at whitespace
    ("```mswea_bash_command ls```", 0),  # no newline after the language
    ("```mswea_bash_command\nls\n", 0),  # never closed
    ("First:\n```mswea_bash_command\nls\n```\nthen:\n```mswea_bash_command\npwd\n```", 2),
    ("```mswea_bash_command\nls\n``````mswea_bash_command\npwd\n```", 2),  # adjacent blocks
])
def test_zero_or_several_blocks_are_a_format_error(text, found):
    error = parse_bash_turn(text)
    assert isinstance(error, FormatError)
    assert f"Expected exactly 1 action, found {found}." in error.message
    assert "```mswea_bash_command\n<action>\n```" in error.message  # shows the model the format
    assert f"`echo {MARKER}`" in error.message  # and how to submit


def test_bash_turns_read_as_mini_swe_agents_regex_reads_them():
    """The reference is mini-swe-agent 2.4's own findall (models/litellm_textbased_model.py), on
    random texts built from fences, newlines and backticks."""
    import random
    import re

    rng = random.Random(0)
    pieces = ["```mswea_bash_command", "```bash", "\n", "```", " ", "ls", "\r\n", "`", "x\n```\n"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        found = [b.strip() for b in re.findall(r"```(?:mswea_bash_command)\s*\n(.*?)\n```", text, re.DOTALL)]
        got = parse_bash_turn(text)
        if len(found) == 1:
            assert got == BashAction(found[0]), text
        else:
            assert isinstance(got, FormatError) and f"found {len(found)}." in got.message, text


@pytest.mark.parametrize("closed", [False, True])
def test_a_turn_of_unclosed_fences_is_read_in_linear_time(closed):
    """A model can write a few hundred KB of openers none of which closes: the plain regex retries
    from each one to the end of the text (66 s for 432 KB, measured). The parser must answer within
    seconds, with the regex's answer: no block, or with a closing fence at the end, one."""
    import signal

    text = "```mswea_bash_command \nx`` " * 16000 + ("\n```" if closed else "")

    def too_slow(*_):
        raise TimeoutError("parse_bash_turn is not linear in the text")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(20)
    try:
        got = parse_bash_turn(text)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if closed:
        assert got == BashAction(text[len("```mswea_bash_command \n"):-len("\n```")].strip())
    else:
        assert isinstance(got, FormatError) and "found 0." in got.message


def test_fence_languages_are_a_parameter():
    both = ("mswea_bash_command", "bash")
    assert parse_bash_turn("```bash\nls\n```", languages=both) == BashAction("ls")
    two = parse_bash_turn("```bash\nls\n```\n```mswea_bash_command\npwd\n```", languages=both)
    assert isinstance(two, FormatError) and "found 2" in two.message
    error = parse_bash_turn("no block", languages=("bash",))
    assert "```bash\n<action>\n```" in error.message and "mswea" not in error.message
    with pytest.raises(ValueError):
        parse_bash_turn("```bash\nls\n```", languages=())


@pytest.mark.parametrize("output, returncode, submits", [
    (f"{MARKER}\ndiff --git a/x b/x\n", 0, True),
    (f"\n\n  {MARKER}  \npatch", 0, True),  # leading blank lines and spaces around the marker
    (f"{MARKER}\r\npatch", 0, True),
    (MARKER, 0, True),
    (f"{MARKER}\npatch", 1, False),  # `echo MARKER && cat missing.txt` fails: no submission
    (f"patch\n{MARKER}", 0, False),  # not the first line
    (f"{MARKER} and more", 0, False),
    (f"echo {MARKER}", 0, False),
    ("", 0, False),
])
def test_is_submission(output, returncode, submits):
    assert is_submission(output, returncode) is submits


# ---------------------------------------------------------------- tool calls through Qwen's template


@pytest.fixture(scope="module")
def qwen():
    return load_tokenizer(qwen_tokenizer_dir())


def _assistant_text(qwen, tool_calls, content=""):
    """The assistant turn as Qwen's chat template renders it (the text the model generates)."""
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix issue 7."},
                {"role": "assistant", "content": content,
                 "tool_calls": [{"type": "function", "function": call} for call in tool_calls]}]
    rendered = qwen.hf.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    return rendered.rsplit("<|im_start|>assistant\n", 1)[1].split("<|im_end|>")[0]


def test_the_template_lists_the_tools(qwen):
    rendered = qwen.hf.apply_chat_template([{"role": "user", "content": "hi"}], tools=TOOLS, tokenize=False)
    listed = rendered.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].split("\n")
    assert [json.loads(line) for line in listed] == TOOLS
    assert '"name": "bash"' in rendered and '"name": "str_replace_editor"' in rendered


OLD = 'def area(r):\n    return 3.14 * r ** 2\n'
NEW = 'def area(r):\n    """Circle area."""\n    return math.pi * r ** 2  # was "3.14"\n'


@pytest.mark.parametrize("call, action", [
    ({"name": "bash", "arguments": {"command": 'grep -rn "def area" src/ | head -5 && printf \'\\t%s\\n\' é✓'}},
     BashAction('grep -rn "def area" src/ | head -5 && printf \'\\t%s\\n\' é✓')),
    # OpenAI's wire format: arguments as a JSON string, which the template writes as it is
    ({"name": "bash", "arguments": '{"command": "python -m pytest -x tests/"}'},
     BashAction("python -m pytest -x tests/")),
    ({"name": "str_replace_editor", "arguments": {"command": "str_replace", "path": "src/geo.py",
                                                  "old_str": OLD, "new_str": NEW}},
     EditorAction("str_replace", "src/geo.py", old_str=OLD, new_str=NEW)),
    ({"name": "str_replace_editor", "arguments": {"command": "str_replace", "path": "a.py", "old_str": "x = 1\n"}},
     EditorAction("str_replace", "a.py", old_str="x = 1\n", new_str="")),  # no new_str: delete
    ({"name": "str_replace_editor", "arguments": {"command": "insert", "path": "a.py", "insert_line": 0,
                                                  "new_str": "import math"}},
     EditorAction("insert", "a.py", new_str="import math", insert_line=0)),
    ({"name": "str_replace_editor", "arguments": {"command": "view", "path": "src/geo.py", "view_range": [3, -1]}},
     EditorAction("view", "src/geo.py", view_range=(3, -1))),
    ({"name": "str_replace_editor", "arguments": {"command": "view", "path": "README.md"}},
     EditorAction("view", "README.md")),
    ({"name": "str_replace_editor", "arguments": {"command": "create", "path": "tests/test_geo.py",
                                                  "file_text": "from geo import area\n\n\ndef test():\n    pass\n"}},
     EditorAction("create", "tests/test_geo.py", file_text="from geo import area\n\n\ndef test():\n    pass\n")),
])
@pytest.mark.parametrize("content", ["", "The formula uses 3.14; switch to math.pi."])
def test_a_rendered_tool_call_parses_back(qwen, call, action, content):
    assert parse_tool_turn(_assistant_text(qwen, [call], content)) == action


def test_two_rendered_tool_calls_are_a_format_error(qwen):
    calls = [{"name": "bash", "arguments": {"command": "ls"}}, {"name": "bash", "arguments": {"command": "pwd"}}]
    error = parse_tool_turn(_assistant_text(qwen, calls))
    assert isinstance(error, FormatError) and "found 2" in error.message


# ---------------------------------------------------------------- tool-call format errors


def _call(name, arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


EDITOR = "str_replace_editor"


@pytest.mark.parametrize("text, problem", [
    ("I will look at the files first.", "expected exactly one <tool_call> block, found 0"),
    ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}', "not closed with </tool_call>"),
    ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>', "not valid JSON"),
    ("<tool_call>" + "[" * 100_000 + "</tool_call>", "nests too deeply"),
    # json.loads alone keeps the last of repeated keys (other readers the first) and raises a bare
    # ValueError on an integer of over 4,300 digits
    ('<tool_call>{"name": "bash", "arguments": {"command": "ls", "command": "rm -rf /"}}</tool_call>',
     'repeats the key "command"'),
    ('<tool_call>{"name": "bash", "name": "bash", "arguments": {"command": "ls"}}</tool_call>', 'repeats the key "name"'),
    (_call("str_replace_editor", {"command": "insert", "path": "a.py", "new_str": "x"}).replace(
        '"new_str"', '"insert_line": ' + "9" * 5000 + ', "new_str"'), "cannot be read"),
    ("<tool_call>\n[1, 2]\n</tool_call>", 'exactly the keys "name" and "arguments"'),
    ('<tool_call>\n{"name": "bash", "parameters": {"command": "ls"}}\n</tool_call>', 'exactly the keys'),
    (_call("python", {"code": "1"}), 'unknown tool "python"; the tools are bash, str_replace_editor'),
    (_call(["bash"], {"command": "ls"}), 'unknown tool ["bash"]'),
    (_call("bash", "ls"), 'the "arguments" of bash must be a JSON object'),
    (_call("bash", {}), "bash needs argument command"),
    (_call("bash", {"command": ["ls"]}), "argument command of bash must be a string"),
    (_call("bash", {"command": "ls", "timeout": 5}), "bash has no argument timeout"),
    (_call(EDITOR, {"command": "undo_edit", "path": "a.py"}),
     "argument command of str_replace_editor must be one of view, create, str_replace, insert"),
    (_call(EDITOR, {"path": "a.py"}), "str_replace_editor needs argument command"),
    (_call(EDITOR, {"command": "create", "path": "a.py"}), "str_replace_editor create needs argument file_text"),
    (_call(EDITOR, {"command": "insert", "path": "a.py", "new_str": "x"}),
     "str_replace_editor insert needs argument insert_line"),
    (_call(EDITOR, {"command": "insert", "path": "a.py", "insert_line": "3", "new_str": "x"}),
     "argument insert_line of str_replace_editor must be an integer"),
    (_call(EDITOR, {"command": "insert", "path": "a.py", "insert_line": True, "new_str": "x"}),
     "argument insert_line of str_replace_editor must be an integer"),
    (_call(EDITOR, {"command": "view", "path": "a.py", "view_range": [3]}),
     "argument view_range of str_replace_editor must be a list of 2 integers"),
    (_call(EDITOR, {"command": "view", "path": "a.py", "view_range": [1, "9"]}), "must be a list of 2 integers"),
    (_call(EDITOR, {"command": "view", "path": "a.py", "old_str": "x"}),
     "str_replace_editor view does not take argument old_str"),
    (_call(EDITOR, {"command": "create", "path": "a.py", "file_text": "", "insert_line": 1}),
     "str_replace_editor create does not take argument insert_line"),
])
def test_a_malformed_tool_call_is_a_one_line_format_error(text, problem):
    error = parse_tool_turn(text)
    assert isinstance(error, FormatError)
    assert error.message.startswith("Tool call error: ") and problem in error.message
    assert "\n" not in error.message


def test_two_tool_calls_are_a_format_error():
    error = parse_tool_turn(_call("bash", {"command": "ls"}) + "\n" + _call("bash", {"command": "pwd"}))
    assert "found 2" in error.message


# ---------------------------------------------------------------- editor semantics


SOURCE = "import os\n\ndef f(x):\n    return x\n"


def _numbered(*rows):
    return "".join(f"{number:6}\t{line}\n" for number, line in rows)


def _cat_n(what, *rows):
    return f"Here's the result of running `cat -n` on {what}:\n" + _numbered(*rows)


def _edited(path, *rows):
    return (f"The file {path} has been edited. " + _cat_n(f"a snippet of {path}", *rows)
            + "Review the changes and make sure they are as expected. Edit the file again if necessary.")


def test_view():
    view = EditorAction("view", "m.py")
    assert edit_file(view, SOURCE) == (None, _cat_n("m.py", (1, "import os"), (2, ""), (3, "def f(x):"),
                                                    (4, "    return x")))
    assert edit_file(EditorAction("view", "m.py", view_range=(2, 3)), SOURCE) == (
        None, _cat_n("m.py", (2, ""), (3, "def f(x):")))
    assert edit_file(EditorAction("view", "m.py", view_range=(3, -1)), SOURCE) == (
        None, _cat_n("m.py", (3, "def f(x):"), (4, "    return x")))
    assert edit_file(EditorAction("view", "m.py", view_range=(4, 4)), "a\nb\nc\nd") == (None, _cat_n("m.py", (4, "d")))
    assert edit_file(view, "") == (None, "Here's the result of running `cat -n` on m.py:\n\n")


@pytest.mark.parametrize("view_range, message", [
    ((0, 2), "Invalid `view_range`: [0, 2]. Its first element `0` should be within the range of lines of the "
             "file: [1, 4]"),
    ((5, -1), "Invalid `view_range`: [5, -1]. Its first element `5` should be within the range of lines of the "
              "file: [1, 4]"),
    ((3, 2), "Invalid `view_range`: [3, 2]. Its second element `2` should be -1 or within [3, 4]"),
    ((1, 5), "Invalid `view_range`: [1, 5]. Its second element `5` should be -1 or within [1, 4]"),
])
def test_view_range_out_of_the_file(view_range, message):
    assert edit_file(EditorAction("view", "m.py", view_range=view_range), SOURCE) == (None, message)


def test_create():
    action = EditorAction("create", "pkg/new.py", file_text="x = 1\n")
    assert edit_file(action, None) == ("x = 1\n", "File created successfully at: pkg/new.py")
    assert edit_file(action, "") == (None, "File already exists at: pkg/new.py. Cannot overwrite files using "
                                           "command `create`.")


def test_str_replace():
    action = EditorAction("str_replace", "m.py", old_str="    return x\n", new_str="    y = x + 1\n    return y\n")
    new = "import os\n\ndef f(x):\n    y = x + 1\n    return y\n"
    assert edit_file(action, SOURCE) == (new, _edited("m.py", (1, "import os"), (2, ""), (3, "def f(x):"),
                                                      (4, "    y = x + 1"), (5, "    return y")))
    deleted = edit_file(EditorAction("str_replace", "m.py", old_str="import os\n\n", new_str=""), SOURCE)
    assert deleted == ("def f(x):\n    return x\n", _edited("m.py", (1, "def f(x):"), (2, "    return x")))


def test_str_replace_shows_four_lines_around_the_edit():
    text = "".join(f"line {n}\n" for n in range(1, 21))
    new_text, observation = edit_file(EditorAction("str_replace", "t.txt", old_str="line 10\n", new_str="ten\nTEN\n"),
                                      text)
    assert new_text == text.replace("line 10\n", "ten\nTEN\n")
    assert observation == _edited("t.txt", *[(n, f"line {n}") for n in range(6, 10)], (10, "ten"), (11, "TEN"),
                                  *[(n + 1, f"line {n}") for n in range(11, 15)])


@pytest.mark.parametrize("old_str, new_str, message", [
    ("return y", "return z", "No replacement was performed, old_str `return y` did not appear verbatim in m.py."),
    ("x", "y", "No replacement was performed. old_str `x` occurs 2 times, starting at lines [3, 4]. Please "
               "ensure it is unique."),
    ("\n", "", "No replacement was performed. old_str `\n` occurs 4 times, starting at lines [1, 2, 3, 4]. Please "
               "ensure it is unique."),
    ("os", "os", "No replacement was performed, old_str `os` is the same as new_str `os`."),
    ("", "x", "No replacement was performed: old_str is empty."),
])
def test_str_replace_errors_leave_the_file(old_str, new_str, message):
    assert edit_file(EditorAction("str_replace", "m.py", old_str=old_str, new_str=new_str), SOURCE) == (None, message)


@pytest.mark.parametrize("current, insert_line, new_str, new_text, rows", [
    (SOURCE, 0, "import sys", "import sys\nimport os\n\ndef f(x):\n    return x\n",
     [(1, "import sys"), (2, "import os"), (3, ""), (4, "def f(x):"), (5, "    return x")]),
    (SOURCE, 3, '    """Identity."""\n    x = x',
     'import os\n\ndef f(x):\n    """Identity."""\n    x = x\n    return x\n',
     [(1, "import os"), (2, ""), (3, "def f(x):"), (4, '    """Identity."""'), (5, "    x = x"), (6, "    return x")]),
    (SOURCE, 4, "", SOURCE + "\n", [(1, "import os"), (2, ""), (3, "def f(x):"), (4, "    return x"), (5, "")]),
    ("a\nb", 2, "c", "a\nb\nc", [(1, "a"), (2, "b"), (3, "c")]),  # no final newline before, none after
    ("a\n", 1, "b\n", "a\nb\n\n", [(1, "a"), (2, "b"), (3, "")]),  # new_str's own final newline is a line break
    ("", 0, "x", "x", [(1, "x")]),
])
def test_insert(current, insert_line, new_str, new_text, rows):
    action = EditorAction("insert", "m.py", new_str=new_str, insert_line=insert_line)
    assert edit_file(action, current) == (new_text, _edited("m.py", *rows))


@pytest.mark.parametrize("insert_line", [-1, 5])
def test_insert_out_of_range(insert_line):
    action = EditorAction("insert", "m.py", new_str="x", insert_line=insert_line)
    assert edit_file(action, SOURCE) == (None, f"Invalid `insert_line` parameter: {insert_line}. It should be "
                                               "within the range of lines of the file: [0, 4]")


@pytest.mark.parametrize("path, reason", [
    ("/etc/passwd", "absolute path"), ("../secret.py", "'..' component"), ("src/../../x.py", "'..' component"),
])
def test_paths_outside_the_repository_are_refused(path, reason):
    for action in (EditorAction("view", path), EditorAction("create", path, file_text="x"),
                   EditorAction("insert", path, new_str="x", insert_line=0)):
        assert edit_file(action, "text\n") == (None, f"Invalid path {path}: {reason}. Give a path relative to the "
                                                     "repository root.")


def test_a_missing_file_can_only_be_created():
    for action in (EditorAction("view", "gone.py"), EditorAction("str_replace", "gone.py", old_str="a", new_str="b"),
                   EditorAction("insert", "gone.py", new_str="x", insert_line=0)):
        assert edit_file(action, None) == (None, "The path gone.py does not exist. Please provide a valid path.")
