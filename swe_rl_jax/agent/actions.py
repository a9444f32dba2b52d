"""The agent's action protocol: what one model turn asks for, and the file editor's text semantics.

Two modes (docs/AGENT.md, "Actions"):
- bash-only, the default: mini-swe-agent 2.4's text protocol, one fenced ```mswea_bash_command
  block per turn;
- tool calls in Qwen's format: one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` per
  turn, calling `bash` or `str_replace_editor` (the tools of `TOOLS`).
A turn without exactly one well-formed action is a `FormatError`: a value whose message goes back to
the model as the observation. Nothing here raises on model text, and nothing touches a file system.
The parsers read the text they are given: the caller passes the answer without its `<think>` part.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from swe_rl_jax.paths import unsafe_path_reason

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# mini-swe-agent 2.4's fence (models/litellm_textbased_model.py); v1 used ```bash.
DEFAULT_LANGUAGES: tuple[str, ...] = ("mswea_bash_command",)


@dataclass(frozen=True)
class BashAction:
    command: str


@dataclass(frozen=True)
class EditorAction:
    """A `str_replace_editor` call; the parser guarantees the fields its command needs."""

    command: str  # view | create | str_replace | insert
    path: str
    file_text: str | None = None
    old_str: str | None = None
    new_str: str | None = None
    insert_line: int | None = None
    view_range: tuple[int, int] | None = None


@dataclass(frozen=True)
class FormatError:
    message: str  # the observation the model gets instead of a command's output


Action = BashAction | EditorAction


# ---------------------------------------------------------------- bash-only mode


# mini-swe-agent 2.4's format_error_template (config/default.yaml, the branch for a complete response).
_BASH_FORMAT_ERROR = """Format error:

<error>
Expected exactly 1 action, found {found}.
</error>

Here is general guidance on how to format your response:

Please always provide EXACTLY ONE action in triple backticks, found {found} actions.
If you want to end the task, please issue the following command: `echo {marker}`
without any other command.
Else, please format your response exactly as follows:

<response_example>
Here are some thoughts about why you want to perform the action.

```{language}
<action>
```
</response_example>

Note: In rare cases, if you need to reference a similar format in your command, you might have
to proceed in two steps, first writing TRIPLEBACKTICKSBASH, then replacing them with ```{language}."""


def parse_bash_turn(text: str, languages: Sequence[str] = DEFAULT_LANGUAGES) -> BashAction | FormatError:
    """The command of a bash-only turn, or a FormatError unless the text holds exactly one block.

    mini-swe-agent 2.4's rule (models/utils/actions_text.py with the regex of
    models/litellm_textbased_model.py, `re.DOTALL`): a block opens with ``` and one of `languages`,
    then optional whitespace and a newline, and closes at the first later newline followed by ```
    (so a ``` at the start of a line inside the command ends it); the command is the body stripped
    of surrounding whitespace. `languages[0]` is the fence the error message shows.
    """
    if not languages:
        raise ValueError("languages must name at least one fence language")
    fence = "|".join(re.escape(language) for language in languages)
    # Every match ends at a "\n```"; past the last one each opener would scan to the end of the text
    # and fail, which makes the regex quadratic in the text (a model writing 400 KB of unclosed
    # openers held the driver for a minute). Cut there: the matches are the same, found in linear time.
    last_close = text.rfind("\n```")
    text = text[:last_close + 4] if last_close >= 0 else ""
    commands = [body.strip() for body in re.findall(rf"```(?:{fence})\s*\n(.*?)\n```", text, re.DOTALL)]
    if len(commands) != 1:
        return FormatError(_BASH_FORMAT_ERROR.format(found=len(commands), marker=SUBMIT_MARKER, language=languages[0]))
    return BashAction(commands[0])


def is_submission(output: str, returncode: int) -> bool:
    """Whether a command's output submits the task: mini-swe-agent 2.4's `_check_finished`
    (environments/local.py and every other environment): after leading whitespace, the first line,
    stripped, is the marker, and the command exited 0 (a failing `echo MARKER && cat patch.txt`
    does not submit). What follows the first line is the submission."""
    lines = output.lstrip().splitlines()
    return bool(lines) and lines[0].strip() == SUBMIT_MARKER and returncode == 0


# ---------------------------------------------------------------- tool-call mode


# The commands of SWE-agent's str_replace_editor (tools/edit_anthropic) without undo_edit, which needs
# an edit history; per command: (required, optional) arguments besides `command` and `path`.
_EDITOR_ARGUMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "view": ((), ("view_range",)),
    "create": (("file_text",), ()),
    "str_replace": (("old_str",), ("new_str",)),
    "insert": (("insert_line", "new_str"), ()),
}


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


# The tools in OpenAI's function format, for `apply_chat_template(..., tools=TOOLS)`; descriptions
# adapted from mini-swe-agent's BASH_TOOL and SWE-agent's tools/edit_anthropic/config.yaml.
TOOLS: list[dict[str, Any]] = [
    _function("bash", "Execute a bash command in the repository and return its output and exit status.",
              {"command": {"type": "string", "description": "The bash command to execute."}}, ["command"]),
    _function(
        "str_replace_editor",
        "Editing tool for viewing, creating and editing files.\n"
        "* `view` shows the file with line numbers, as `cat -n` does.\n"
        "* `create` writes a new file; it cannot overwrite an existing one.\n"
        "* `str_replace` replaces `old_str` with `new_str`. `old_str` must match EXACTLY one place in the file, "
        "whitespace included: give enough context to make it unique.\n"
        "* `insert` inserts `new_str` after line `insert_line`.\n"
        "Paths are relative to the repository root.",
        {
            "command": {"type": "string", "enum": list(_EDITOR_ARGUMENTS),
                        "description": "The command to run: `view`, `create`, `str_replace` or `insert`."},
            "path": {"type": "string", "description": "Path of the file, relative to the repository root."},
            "file_text": {"type": "string", "description": "Required for `create`: the content of the new file."},
            "old_str": {"type": "string", "description": "Required for `str_replace`: the text to replace."},
            "new_str": {"type": "string", "description": "For `str_replace`, the replacement (none: `old_str` is "
                        "deleted); required for `insert`, the text to insert."},
            "insert_line": {"type": "integer", "description": "Required for `insert`: `new_str` goes AFTER this "
                            "line (0: at the top of the file)."},
            "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                           "description": "Optional for `view`: [start, end], lines numbered from 1, both shown; "
                           "end -1 shows to the end of the file."},
        },
        ["command", "path"],
    ),
]
_PARAMETERS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
_JSON_TYPES = {"string": str, "integer": int}


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether `value` fits a property schema of TOOLS (the JSON-schema keywords TOOLS uses)."""
    if schema["type"] == "array":
        return (isinstance(value, list) and schema["minItems"] <= len(value) <= schema["maxItems"]
                and all(_fits(item, schema["items"]) for item in value))
    # bool is an int subclass, but JSON's true is no line number
    return (isinstance(value, _JSON_TYPES[schema["type"]]) and not isinstance(value, bool)
            and value in schema.get("enum", [value]))


def _describe(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(schema["enum"])
    if schema["type"] == "array":
        return f"a list of {schema['minItems']} {schema['items']['type']}s"
    return {"string": "a string", "integer": "an integer"}[schema["type"]]


def _arguments_problem(tool: str, arguments: dict[str, Any]) -> str | None:
    """What is wrong with a known tool's arguments, in a few words, or None."""
    parameters = _PARAMETERS[tool]
    properties = parameters["properties"]
    unknown = [name for name in arguments if name not in properties]
    if unknown:
        return f"{tool} has no argument {', '.join(unknown)}; its arguments are {', '.join(properties)}"
    wrong = next((name for name, value in arguments.items() if not _fits(value, properties[name])), None)
    if wrong is not None:
        return f"argument {wrong} of {tool} must be {_describe(properties[wrong])}"
    call, required, optional = tool, list(parameters["required"]), ()
    if tool == "str_replace_editor" and "command" in arguments:
        call = f"{tool} {arguments['command']}"
        command_required, optional = _EDITOR_ARGUMENTS[arguments["command"]]
        required += command_required
    missing = [name for name in required if name not in arguments]
    if missing:
        return f"{call} needs argument {', '.join(missing)}"
    extra = [name for name in arguments if name not in required and name not in optional]
    if extra:
        return f"{call} does not take argument {', '.join(extra)}"
    return None


class _RepeatedKey(Exception):
    pass


def _object_without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated is not None:
        raise _RepeatedKey(repeated)
    return dict(pairs)


def _tool_error(problem: str) -> FormatError:
    return FormatError(f"Tool call error: {problem}. Reply with exactly one tool call: "
                       '<tool_call>{"name": <tool name>, "arguments": <arguments object>}</tool_call>')


def parse_tool_turn(text: str) -> Action | FormatError:
    """The one tool call of a turn in Qwen2.5/Qwen3's format, or a one-line FormatError.

    The chat template renders an assistant call as `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`
    after the message's text. A turn must hold exactly one such block, like a bash-only turn; prose
    around it is allowed. `new_str` of a str_replace defaults to "" (SWE-agent: the match is deleted).
    """
    found = text.count("<tool_call>")
    if found != 1:
        return _tool_error(f"expected exactly one <tool_call> block, found {found}")
    block = re.search(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)
    if block is None:
        return _tool_error("the <tool_call> block is not closed with </tool_call>")
    try:
        call = json.loads(block.group(1), object_pairs_hook=_object_without_repeats)
    except _RepeatedKey as e:  # {"command": "ls", "command": "rm -rf /"}: readers differ on which counts
        return _tool_error(f"the tool call repeats the key {json.dumps(str(e))}")
    except json.JSONDecodeError as e:
        return _tool_error(f"the tool call is not valid JSON ({e})")
    except ValueError as e:  # an integer past Python's 4,300 digits
        return _tool_error(f"the tool call holds a value that cannot be read ({e})")
    except RecursionError:  # json's decoder gives up on deep nesting ("[[[[...")
        return _tool_error("the tool call nests too deeply to be read")
    if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
        return _tool_error('the tool call must be a JSON object with exactly the keys "name" and "arguments"')
    name, arguments = call["name"], call["arguments"]
    if not isinstance(name, str) or name not in _PARAMETERS:
        return _tool_error(f"unknown tool {json.dumps(name)}; the tools are {', '.join(_PARAMETERS)}")
    if not isinstance(arguments, dict):
        return _tool_error(f'the "arguments" of {name} must be a JSON object')
    problem = _arguments_problem(name, arguments)
    if problem is not None:
        return _tool_error(problem)
    if name == "bash":
        return BashAction(arguments["command"])
    view_range = arguments.get("view_range")
    return EditorAction(**{
        **({"new_str": ""} if arguments["command"] == "str_replace" else {}),
        **arguments,
        "view_range": None if view_range is None else tuple(view_range),
    })


# ---------------------------------------------------------------- editor semantics


SNIPPET_LINES = 4  # context lines around an edit in its observation, as SWE-agent's editor shows


def _lines(text: str) -> list[str]:
    """The lines `cat -n` numbers: a final newline ends the last line rather than starting one."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _cat_n(what: str, lines: list[str], first: int) -> str:
    numbered = "\n".join(f"{number:6}\t{line}" for number, line in enumerate(lines, first))
    return f"Here's the result of running `cat -n` on {what}:\n{numbered}\n"


def _edited(path: str, text: str, first: int, last: int) -> str:
    """The observation of a successful edit: the edited lines first..last with context."""
    lines = _lines(text)
    start, end = max(1, first - SNIPPET_LINES), min(len(lines), last + SNIPPET_LINES)
    return (f"The file {path} has been edited. " + _cat_n(f"a snippet of {path}", lines[start - 1:end], start)
            + "Review the changes and make sure they are as expected. Edit the file again if necessary.")


def _view(path: str, lines: list[str], view_range: tuple[int, int] | None) -> str:
    if view_range is None:
        return _cat_n(path, lines, 1)
    start, end = view_range
    if not 1 <= start <= len(lines):
        return (f"Invalid `view_range`: {list(view_range)}. Its first element `{start}` should be within "
                f"the range of lines of the file: {[1, len(lines)]}")
    if end != -1 and not start <= end <= len(lines):
        return (f"Invalid `view_range`: {list(view_range)}. Its second element `{end}` should be -1 or "
                f"within {[start, len(lines)]}")
    return _cat_n(path, lines[start - 1:len(lines) if end == -1 else end], start)


def _str_replace(path: str, current: str, old_str: str, new_str: str) -> tuple[str | None, str]:
    if not old_str:
        return None, "No replacement was performed: old_str is empty."
    # str.replace's occurrences: non-overlapping, left to right
    starts = [current.count("\n", 0, match.start()) + 1 for match in re.finditer(re.escape(old_str), current)]
    if not starts:
        return None, f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
    if len(starts) > 1:
        return None, (f"No replacement was performed. old_str `{old_str}` occurs {len(starts)} times, starting "
                      f"at lines {starts}. Please ensure it is unique.")
    if new_str == old_str:
        return None, f"No replacement was performed, old_str `{old_str}` is the same as new_str `{new_str}`."
    edited = current.replace(old_str, new_str)
    return edited, _edited(path, edited, starts[0], starts[0] + max(len(_lines(new_str)) - 1, 0))


def _insert(path: str, current: str, insert_line: int, new_str: str) -> tuple[str | None, str]:
    lines = _lines(current)
    if not 0 <= insert_line <= len(lines):
        return None, (f"Invalid `insert_line` parameter: {insert_line}. It should be within the range of "
                      f"lines of the file: {[0, len(lines)]}")
    inserted = new_str.split("\n")  # SWE-agent's: a trailing newline in new_str adds an empty line
    edited = "\n".join(lines[:insert_line] + inserted + lines[insert_line:]) + ("\n" if current.endswith("\n") else "")
    return edited, _edited(path, edited, insert_line + 1, insert_line + len(inserted))


def edit_file(action: EditorAction, current: str | None) -> tuple[str | None, str]:
    """(new text of the file or None when nothing is to be written, observation) of an editor call.

    `current` is the file's text, None when it does not exist. SWE-agent's str_replace_editor
    (tools/edit_anthropic), without its side effects: lines are numbered as `cat -n` does; create
    refuses an existing file; str_replace needs exactly one occurrence of old_str; insert puts
    new_str after line insert_line (0: at the top). Every error is an observation, and then the file
    is unchanged. Unlike SWE-agent, paths are relative to the repository root and tabs are kept.
    """
    path = action.path
    unsafe = unsafe_path_reason(path)
    if unsafe is not None:
        return None, f"Invalid path {path}: {unsafe}. Give a path relative to the repository root."
    if action.command == "create":
        if current is not None:
            return None, f"File already exists at: {path}. Cannot overwrite files using command `create`."
        return action.file_text, f"File created successfully at: {path}"
    if current is None:
        return None, f"The path {path} does not exist. Please provide a valid path."
    if action.command == "view":
        return None, _view(path, _lines(current), action.view_range)
    if action.command == "str_replace":
        return _str_replace(path, current, action.old_str, action.new_str)
    return _insert(path, current, action.insert_line, action.new_str)
