"""The `swe_rl` reward against an independently written reference of the published reward
(`swe_rl_paper_reward.py`): bit-identical on answers in the paper's format, and for every
deliberate difference (docs/REWARDS.md, "Differences from the published SWE-RL reward") the
documented outcome on both sides, one example each."""
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swe_rl_jax.rewards import MAX_EDITED_FILE_CHARS, MAX_RESPONSE_CHARS, get_reward, swe_rl_reward
from swe_rl_paper_reward import NothingChanged, paper_reward

REWARDS_DOC = Path(__file__).resolve().parents[1] / "docs" / "REWARDS.md"
CTX = {"a.py": "x = 1\ny = 2\n", "b.py": "z = 3\n"}


def fenced(path: str, search: str, replace: str, opener: str = "```python", header: str = "### ") -> str:
    return f"{opener}\n{header}{path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"


def bare(path: str, search: str, replace: str) -> str:
    return f"### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"


def wrap(answer: str, thought: str = "reasoning") -> str:
    return f"<think>\n{thought}\n</think>\n<solution>\n{answer}\n</solution>"


def lenient(ctx, oracle, response):
    return get_reward("swe_rl_lenient")({"code_context": ctx, "oracle_new_content": oracle}, response)


def slow_case():
    """Patches over a 2-letter alphabet, where the similarity is slowest: ~10 ms for us, more
    than the 0.1 ms limit the test gives."""
    rng = random.Random(3)
    text = lambda n: "".join("".join(rng.choice("ab") for _ in range(30)) + "\n" for _ in range(n))  # noqa: E731
    old, new, gold = text(20), text(20), text(20)
    return {"s.py": old}, {"s.py": gold}, wrap(fenced("s.py", old.rstrip("\n"), new.rstrip("\n")))


# name -> (ctx, oracle, response); the expectations are in EXPECTED.
CASES = {
    # Lenient-only differences: the default `swe_rl` agrees with the paper (-1), `swe_rl_lenient` scores.
    "unfenced_block": (CTX, {"a.py": "x = 2\ny = 2\n"}, wrap(bare("a.py", "x = 1", "x = 2"))),
    "tilde_fence": (CTX, {"a.py": "x = 2\ny = 2\n"}, wrap("~~~python\n" + bare("a.py", "x = 1", "x = 2") + "\n~~~")),
    "loose_header": (CTX, {"a.py": "x = 2\ny = 2\n"},
                     wrap("```python\n###a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```")),
    # Differences of the default reward.
    "empty_replace_without_line": (CTX, {"a.py": "\ny = 2\n"},
                                   wrap("```python\n### a.py\n<<<<<<< SEARCH\nx = 1\n=======\n>>>>>>> REPLACE\n```")),
    "empty_search_without_line": (CTX, {"c.py": "new = 1\n"},
                                  wrap("```python\n### c.py\n<<<<<<< SEARCH\n=======\nnew = 1\n>>>>>>> REPLACE\n```")),
    "several_blocks_in_one_fence": (CTX, {"a.py": "x = 2\ny = 2\n", "b.py": "z = 4\n"},
                                    wrap("```python\n" + bare("a.py", "x = 1", "x = 2") + "\n"
                                         + bare("b.py", "z = 3", "z = 4") + "\n```")),
    "normalized_header_path": (CTX, {"a.py": "x = 2\ny = 2\n"}, wrap(fenced("./a.py", "x = 1", "x = 2"))),
    "tags_out_of_order": (CTX, {"a.py": "x = 2\ny = 2\n"},
                          "<solution>\n" + fenced("a.py", "x = 1", "x = 2") + "\n</solution>\n<think>t</think>"),
    "empty_search_on_existing_file": (CTX, {"a.py": "x = 2\ny = 2\n"}, wrap(fenced("a.py", "", "# note"))),
    "malformed_block_skipped": (CTX, {"a.py": "x = 2\ny = 2\n"},
                                wrap("```python\n### a.py\n<<<<<<< SEARCH\nx = 1\n>>>>>>> REPLACE\n```\n"
                                     + fenced("a.py", "x = 1", "x = 2"))),
    "nothing_changes": ({"a.py": "x = 1"}, {}, wrap(fenced("a.py", "x = 1", "x = 1\n"))),
    "response_too_long": (CTX, {"a.py": "x = 2\ny = 2\n"},
                          wrap(fenced("a.py", "x = 1", "x = 2"), thought="t" * MAX_RESPONSE_CHARS)),
    # A file already at the size cap, edited far from its long line: small patches on both sides.
    "edit_too_large": ({"a.py": "x\n" + "\n" * 5 + "p" * MAX_EDITED_FILE_CHARS + "\n"},
                       {"a.py": "xy\n" + "\n" * 5 + "p" * MAX_EDITED_FILE_CHARS + "\n"},
                       wrap(fenced("a.py", "x", "xy"))),
    "time_limit": slow_case(),
}

# name -> (our score or kind, the paper's score, "<", ">" or an exception)
EXPECTED = {
    "unfenced_block": ("no_blocks", -1.0),
    "tilde_fence": ("no_blocks", -1.0),
    "loose_header": ("no_blocks", -1.0),
    "empty_replace_without_line": (1.0, -1.0),
    "empty_search_without_line": (1.0, -1.0),
    "several_blocks_in_one_fence": (1.0, "<"),
    "normalized_header_path": (1.0, -1.0),
    "tags_out_of_order": ("tag_order", 1.0),
    "empty_search_on_existing_file": ("empty_search_existing_file", ">"),
    "malformed_block_skipped": (1.0, -1.0),
    "nothing_changes": (1.0, NothingChanged),
    "response_too_long": ("response_too_long", 1.0),
    "edit_too_large": ("edit_too_large", 1.0),
    "time_limit": ("timeout", ">"),
}


def test_every_difference_is_documented_with_its_example():
    doc = REWARDS_DOC.read_text(encoding="utf-8")
    section = doc.split("## Differences from the published SWE-RL reward", 1)[1].split("\n## ", 1)[0]
    for name in CASES:
        assert f"`{name}`" in section, name


@pytest.mark.parametrize("name", list(CASES))
def test_documented_difference(name):
    ctx, oracle, response = CASES[name]
    ours_expected, paper_expected = EXPECTED[name]
    limit = 1e-4 if name == "time_limit" else 5.0
    score, info = swe_rl_reward(ctx, oracle, response, time_limit_s=limit)
    if isinstance(ours_expected, str):
        assert (score, info["kind"]) == (-1.0, ours_expected), info
    else:
        assert (score, info["kind"]) == (ours_expected, "ok"), info
    if paper_expected is NothingChanged:
        with pytest.raises(NothingChanged):
            paper_reward(ctx, oracle, response)
        return
    paper = paper_reward(ctx, oracle, response)
    if paper_expected == "<":
        assert -1.0 <= paper < score
    elif paper_expected == ">":
        assert paper > score
    else:
        assert paper == paper_expected
    if name in ("unfenced_block", "tilde_fence", "loose_header"):  # what the lenient option gives
        assert lenient(ctx, oracle, response)[0] == 1.0


# ------------------------------------------------------------------ generated corpus

PATHS = ("a.py", "b.py", "c.py")  # c.py is not in the context: only an empty SEARCH creates it
_LINES = st.sampled_from(["a", "b = 1", "    c()", "", "def f():", "return x", "# d", "x = 1"])
FEATURES = ("shared_fence", "dot_header", "tight_empty", "unfenced")


def render(blocks, features=frozenset(), opener="```python"):
    """The answer text for `blocks` [(path, search lines, replace lines)]: the paper's format, or
    with the given deliberate-difference features."""
    def text(lines):
        if not lines and "tight_empty" in features:
            return None  # no line at all between the markers
        return "\n".join(lines)

    parts = []
    for path, search, replace in blocks:
        header = f"### ./{path}" if "dot_header" in features else f"### {path}"
        s, r = text(search), text(replace)
        body = [header, "<<<<<<< SEARCH"] + ([] if s is None else [s]) + ["======="] + ([] if r is None else [r])
        parts.append("\n".join(body + [">>>>>>> REPLACE"]))
    if "unfenced" in features:
        return "\n\n".join(parts)
    if "shared_fence" in features:
        return opener + "\n" + "\n".join(parts) + "\n```"
    return "\n".join(f"{opener}\n{p}\n```" for p in parts)


@st.composite
def corpus_case(draw):
    ctx = {p: "\n".join(draw(st.lists(_LINES, min_size=1, max_size=6))) + draw(st.sampled_from(["\n", ""]))
           for p in draw(st.lists(st.sampled_from(PATHS[:2]), min_size=1, unique=True))}
    oracle = {p: "\n".join(draw(st.lists(_LINES, max_size=6))) + "\n"
              for p in draw(st.lists(st.sampled_from(PATHS), unique=True))}
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        lines = ctx.get(path, "").split("\n")
        if lines != [""] and draw(st.integers(0, 4)) > 0:  # mostly text that is in the file
            i = draw(st.integers(0, len(lines) - 1))
            search = lines[i:draw(st.integers(i + 1, len(lines)))]
        else:
            search = draw(st.lists(_LINES, max_size=2))
        replace = draw(st.lists(_LINES, max_size=3))
        if "\n".join(replace) == "\n".join(search) and draw(st.integers(0, 3)) > 0:  # keep identical blocks rare
            replace = replace + ["# new"]
        blocks.append((path, search, replace))
    # Half the cases in the paper's format, the rest with some deliberate-difference features.
    features = frozenset(f for f in FEATURES if draw(st.booleans())) if draw(st.booleans()) else frozenset()
    opener = draw(st.sampled_from(["```", "```python", "Here is the fix: ```python"]))
    return ctx, oracle, blocks, features, opener


def empty_search_on_content(ctx, blocks):
    """Whether some block has an empty SEARCH for a file that has content when it applies (from
    the context, or written by an earlier block)."""
    written = set()
    for path, search, _ in blocks:
        if not "\n".join(search) and (ctx.get(path) or path in written):
            return True
        written.add(path)
    return False


def reference_or_one(ctx, oracle, response):
    """The reference score, with the documented 1.0 where it asserts (`nothing_changes`)."""
    try:
        return paper_reward(ctx, oracle, response)
    except NothingChanged:
        return 1.0


@settings(max_examples=int(os.environ.get("SWE_RL_REFERENCE_CASES", "400")), deadline=None)
@given(corpus_case())
def test_generated_corpus_matches_the_reference(case):
    ctx, oracle, blocks, features, opener = case
    response = wrap(render(blocks, features, opener))
    canonical = wrap(render(blocks, opener=opener))  # the same edits in the paper's format
    score, info = swe_rl_reward(ctx, oracle, response)
    if "unfenced" in features:  # `unfenced_block`: no block for the paper nor for us; the lenient option reads it
        assert (score, info["kind"]) == (-1.0, "no_blocks") and paper_reward(ctx, oracle, response) == -1.0
        score, info = lenient(ctx, oracle, response)
    if info["kind"] == "empty_search_existing_file":  # `empty_search_on_existing_file`
        assert empty_search_on_content(ctx, blocks)
        return
    # Without features `canonical == response`: bit-identical to the reference. With them, equal
    # to the reference on the same edits written in the paper's format.
    assert score == reference_or_one(ctx, oracle, canonical), (info, features)
