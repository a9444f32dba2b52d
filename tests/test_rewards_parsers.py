"""Answer parsers: every format, where the answer is found, and what is rejected."""
from swe_rl_jax.rewards import (
    FormatError,
    SearchReplaceBlock,
    answer_region,
    normalize_path,
    parse_file_list,
    parse_function_locations,
    parse_line_locations,
    parse_search_replace,
    parse_think_solution,
)


def test_normalize_path_strips_decorations():
    for raw in ["a/b.py", "./a/b.py", "/a/b.py", "  `a/b.py`  ", "- a/b.py", "* `./a/b.py`",
                "1. a/b.py", "12) a/b.py", "a/b.py:", "'a/b.py'", "• a/b.py", "`a/b.py`:"]:
        assert normalize_path(raw) == "a/b.py", raw
    assert normalize_path("1.py") == "1.py"  # a digit-leading file name is not numbering


def test_answer_region_prefers_last_fence_after_think():
    text = "<think>```\nx.py\n```</think>\nsee:\n```\na.py\n```\nthen\n```text\nb.py\n```\nbye"
    assert answer_region(text) == "b.py"
    # No fence after </think>: the text after it, not the fenced block inside the reasoning.
    assert answer_region("<think>```\nx.py\n```</think>\nc.py") == "\nc.py"
    # A fence with a language tag inside an open block is content, not a closing fence.
    assert answer_region("```\na.py\n```python\nb.py\n```") == "a.py\n```python\nb.py"


def test_file_list_fenced_and_bare():
    fenced = "I think these.\n```\n- ./a/b.py\n2. `c.py`\n\n/d/e.py\na/b.py\n```"
    assert parse_file_list(fenced).paths == ("a/b.py", "c.py", "d/e.py")
    bare = "The bug is in\na/b.py\nand maybe in the tests, also Makefile\nMakefile"
    # Prose lines are ignored; "Makefile" counts because it is a candidate.
    assert parse_file_list(bare, {"Makefile"}).paths == ("a/b.py", "Makefile")
    assert parse_file_list(bare).paths == ("a/b.py",)
    assert parse_file_list("file: x/y.py").paths == ("x/y.py",)


def test_file_list_empty_is_format_error():
    for text in ["", "no files here.", "```\n```", "<think>a.py</think>"]:
        result = parse_file_list(text)
        assert isinstance(result, FormatError) and result.kind == "empty_answer", text


def test_function_locations_all_entry_kinds():
    text = """reasoning first
```
a/models.py
class: Model
method: save
function: helper()
function: Other.run

b/util.py

c/conf.py
variable: SETTINGS
```"""
    result = parse_function_locations(text)
    assert result.items == (
        ("a/models.py", "Model"),
        ("a/models.py", "Model.save"),  # method after a class line belongs to that class
        ("a/models.py", "helper"),
        ("a/models.py", "Other.run"),
        ("b/util.py", ""),  # a path with no entries names its module level
        ("c/conf.py", ""),  # so does a variable
    )


def test_function_method_resolution_against_candidates():
    candidates = [("m.py", "A.run"), ("m.py", "B.stop"), ("m.py", "C.stop")]
    result = parse_function_locations("m.py\nmethod: run\nmethod: stop", candidates)
    # run: a unique candidate class has it; stop: ambiguous, left as written.
    assert result.items == (("m.py", "A.run"), ("m.py", "stop"))


def test_function_orphans_and_invalid_entries_counted():
    result = parse_function_locations("function: lost\nm.py\nfunction: has space\nclass: K")
    assert result.items == (("m.py", "K"),)
    assert (result.orphan_entries, result.invalid_entries) == (1, 1)


def test_line_locations_numbers_and_ranges():
    text = "```\na.py\nfunction: f\nline: 10\nline: 12-14\nlines: 20, 22–23\nline: x\nline: 9-3\nb.py\nline: 1\n```"
    result = parse_line_locations(text)
    assert result.ranges == (("a.py", 10, 10), ("a.py", 12, 14), ("a.py", 20, 20),
                             ("a.py", 22, 23), ("b.py", 1, 1))
    assert result.invalid_entries == 2
    assert isinstance(parse_line_locations("line: 5"), FormatError)  # no path before it
    # Unicode digits and absurd lengths are not line numbers.
    assert isinstance(parse_line_locations("a.py\nline: ²"), FormatError)
    assert isinstance(parse_line_locations("a.py\nline: " + "9" * 5000), FormatError)


def test_think_solution_envelope():
    ok = parse_think_solution("pre <think> plan \n</think>\n<solution>\nanswer\n</solution> post")
    assert (ok.thought, ok.answer) == ("plan", "answer")
    cases = {
        "<think>a</think>": "tag_count",
        "<think>a</think><solution>x</solution></solution>": "tag_count",
        "<think><think>a</think><solution>x</solution>": "tag_count",
        "<solution>x</solution><think>a</think>": "tag_order",
        "</think>a<think><solution>x</solution>": "tag_order",
        "<think> \n\t </think><solution>x</solution>": "empty_reasoning",
    }
    for text, kind in cases.items():
        result = parse_think_solution(text)
        assert isinstance(result, FormatError) and result.kind == kind, text
    assert parse_think_solution("x").details["tag_counts"] == {
        "<think>": 0, "</think>": 0, "<solution>": 0, "</solution>": 0}


BLOCK = "### {p}\n<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE"


def test_search_replace_fenced_unfenced_and_language():
    text = "\n".join([
        "```python", BLOCK.format(p="a.py", s="x = 1", r="x = 2"), "```",
        "text between",
        BLOCK.format(p="./b.py", s="y\nz", r="w"),
        "```", BLOCK.format(p="c.py", s="q", r=""), "```",
        # the fence may also come between the header and the marker
        "### d.py", "```", "<<<<<<< SEARCH", "old", "=======", "new", ">>>>>>> REPLACE", "```",
    ])
    result = parse_search_replace(text)
    assert result.blocks == (
        SearchReplaceBlock("a.py", "x = 1", "x = 2"),
        SearchReplaceBlock("b.py", "y\nz", "w"),
        SearchReplaceBlock("c.py", "q", ""),
        SearchReplaceBlock("d.py", "old", "new"),
    )
    assert result.malformed == 0


def test_search_replace_empty_search_and_divider_in_replace():
    text = "### n.py\n<<<<<<< SEARCH\n=======\nTitle\n=======\n>>>>>>> REPLACE"
    assert parse_search_replace(text).blocks == (SearchReplaceBlock("n.py", "", "Title\n======="),)
    # The SWE-RL reference writes an empty SEARCH as one empty line: same block.
    text2 = "### n.py\n<<<<<<< SEARCH\n\n=======\nx\n>>>>>>> REPLACE"
    assert parse_search_replace(text2).blocks == (SearchReplaceBlock("n.py", "", "x"),)


def test_search_replace_markers_must_be_exact_and_headed():
    bad = [
        "### a.py\n<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE",  # six '<'
        "### a.py\n<<<<<<< SEARCH \nx\n=======\ny\n>>>>>>> REPLACE",  # trailing space
        "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE",  # no header
        "### a.py\n<<<<<<< SEARCH\nx\n=======\ny",  # unterminated
        "### a.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE",  # no divider
        "### a.py\n <<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE",  # not on its own line
    ]
    for text in bad:
        result = parse_search_replace(text)
        assert isinstance(result, FormatError) and result.kind == "no_blocks", text


def test_search_replace_recovers_after_broken_block():
    text = "### a.py\n<<<<<<< SEARCH\nhalf\n" + BLOCK.format(p="b.py", s="s", r="r")
    result = parse_search_replace(text)
    assert result.blocks == (SearchReplaceBlock("b.py", "s", "r"),)
    assert result.malformed == 1
