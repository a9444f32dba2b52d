"""Totality: any string gets a score in range with JSON-serialisable info, quickly; pathological
inputs finish within the time limit, and hitting the limit is a reported outcome.

The limit is wall-clock (`limits.time_limit`), so on a starved host any input can hit it: CI once
saw the 10^4-block case, 0.08 s of work, pass 2 s. Where a test claims an input is cheap it
therefore gives the reward a wall limit no scheduling stall reaches and measures the CPU time the
process spent, which the host's load does not inflate."""
import json
import random
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from swe_rl_jax.rewards import (
    MAX_RESPONSE_CHARS,
    edit_reward,
    localization_reward,
    swe_rl_discrete_reward,
    swe_rl_reward,
)

LIMIT_S = 2.0  # CPU seconds any reward may spend on any input below
SLACK_S = 1.0
STALL_PROOF_LIMIT_S = 120.0
CTX = {"a.py": "".join(f"line{i}\n" for i in range(1, 201)), "b.py": "x = 1\n"}
ORACLE = {"a.py": CTX["a.py"].replace("line5\n", "LINE5\n")}
FILES = ["a.py", "b.py"]
FUNCS = [("a.py", ""), ("a.py", "f"), ("a.py", "C.m"), ("b.py", "")]
LINES = [("a.py", n) for n in range(1, 201)]


def all_rewards(response: str, limit_s: float):
    """(name, score, info, allowed minimum) for every reward on one response."""
    yield "swe_rl", *swe_rl_reward(CTX, ORACLE, response, time_limit_s=limit_s), -1.0
    yield "swe_rl_discrete", *swe_rl_discrete_reward(CTX, ORACLE, response, time_limit_s=limit_s), -1.0
    for mode in ("lines", "similarity"):
        yield f"edit_{mode}", *edit_reward(CTX, ORACLE, response, mode=mode, time_limit_s=limit_s), 0.0
    for subtask, gold, cands in [("file", ["a.py"], FILES), ("function", [("a.py", "f")], FUNCS),
                                 ("line", [("a.py", 5)], LINES)]:
        yield subtask, *localization_reward(subtask, response, gold, cands, time_limit_s=limit_s), 0.0


def check_total(response: str, limit_s: float) -> None:
    """Every reward's answer is in range and serialisable; each reward spends under LIMIT_S of CPU."""
    cpu = time.process_time()
    for name, score, info, minimum in all_rewards(response, limit_s):  # each reward runs as it is drawn
        assert time.process_time() - cpu < LIMIT_S, name
        assert isinstance(score, float), name
        assert score == minimum or 0.0 <= score <= 1.0, (name, score, info)
        assert isinstance(info["kind"], str), name
        json.dumps(info)  # ASCII-escaped JSON handles lone surrogates too
        # Only a genuinely slow input may time out, and none below is that slow.
        assert info["kind"] not in ("internal_error", "timeout"), (name, info)
        cpu = time.process_time()


PIECES = [
    "<think>", "</think>", "<solution>", "</solution>", "```", "```python", "### a.py", "### b.py",
    "### ./a.py", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "line5", "LINE5", "x = 1",
    "a.py", "b.py", "line: 5", "line: 1-9", "line: 3-", "function: f", "class: C", "method: m",
    "variable: v", "- ", "1. ", "`", "\n", "\n", "\n", " ", "\x00", "\ud800", "\udfff", "\r\n",
    "é", "…", "9" * 30,
]
adversarial = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


@settings(max_examples=120, deadline=None)
@given(st.one_of(st.text(max_size=300), adversarial))
def test_any_string_gets_a_score(response):
    check_total(response, STALL_PROOF_LIMIT_S)


def test_pathological_inputs_finish_fast():
    rng = random.Random(0)
    toggles = "".join(
        "### a.py\n<<<<<<< SEARCH\nline7\n=======\nLINE7\n>>>>>>> REPLACE\n"
        "### a.py\n<<<<<<< SEARCH\nLINE7\n=======\nline7\n>>>>>>> REPLACE\n" for _ in range(5000))
    cases = {
        "megabyte of noise": "".join(rng.choice("ab\n<=>#`:") for _ in range(MAX_RESPONSE_CHARS - 100)),
        "over the cap": "x" * (3 * MAX_RESPONSE_CHARS),
        "10^4 blocks": "<think>t</think><solution>" + toggles + "</solution>",
        "nested markers": "<think>t</think><solution>### a.py\n" + "<<<<<<< SEARCH\n" * 30000
                          + "=======\n" * 20000 + ">>>>>>> REPLACE\n" * 20000 + "</solution>",
        "deep fences": "```\n" * 100000 + "a.py\n",
        "NUL and surrogates": "<think>\x00\ud800</think><solution>\n### a\ud800.py\n<<<<<<< SEARCH\n"
                              "\x00\n=======\n\udfff\n>>>>>>> REPLACE\n</solution>\na\x00.py\nline: 5",
        "huge line numbers": "a.py\n" + "line: 1-999999999, 5-3, 7\n" * 20000,
        "many tags": "<think>" * 100000 + "</solution>" * 100000,
    }
    for name, response in cases.items():
        try:
            check_total(response, STALL_PROOF_LIMIT_S)
        except AssertionError as e:
            raise AssertionError(name) from e


def test_ten_thousand_blocks_really_apply():
    toggles = "".join(
        "### a.py\n<<<<<<< SEARCH\nline7\n=======\nLINE7\n>>>>>>> REPLACE\n"
        "### a.py\n<<<<<<< SEARCH\nLINE7\n=======\nline7\n>>>>>>> REPLACE\n" for _ in range(5000))
    cpu = time.process_time()
    score, info = swe_rl_reward(CTX, ORACLE, "<think>t</think><solution>```\n" + toggles + "```</solution>",
                                time_limit_s=STALL_PROOF_LIMIT_S)
    # 10^4 blocks that cancel out: the prediction changes nothing, the oracle one file.
    assert (score, info["n_blocks"]) == (0.0, 10000)
    assert time.process_time() - cpu < LIMIT_S


def test_slow_input_hits_the_limit_and_is_reported():
    # Two ~60 kB hunks over a 4-letter alphabet: SequenceMatcher's longest-match search is
    # quadratic on such text (every character matches ~1/4 of the other side), far beyond 0.5 s.
    rng = random.Random(1)

    def text(n):
        return "".join("".join(rng.choice("abcd") for _ in range(30)) + "\n" for _ in range(n))

    old, oracle, pred = text(2000), text(2000), text(2000)
    response = ("<think>t</think><solution>\n```\n### big.py\n<<<<<<< SEARCH\n" + old.rstrip("\n")
                + "\n=======\n" + pred.rstrip("\n") + "\n>>>>>>> REPLACE\n```\n</solution>")
    for reward, minimum in [(swe_rl_reward, -1.0), (edit_reward, 0.0)]:
        cpu = time.process_time()
        kwargs = {"mode": "similarity"} if reward is edit_reward else {}
        score, info = reward({"big.py": old}, {"big.py": oracle}, response, time_limit_s=0.5, **kwargs)
        assert (score, info["kind"]) == (minimum, "timeout")
        # Stopped at the alarm: the work it did is under the wall limit plus slack, where running
        # on would take over ten seconds of CPU.
        assert time.process_time() - cpu < 0.5 + SLACK_S
