"""F-beta and the SoRFT localization rewards, against hand-computed fractions."""
from fractions import Fraction

import pytest

from swe_rl_jax.rewards import fbeta, get_reward, localization_reward


def frac(x: float, limit: int = 1000) -> Fraction:
    return Fraction(x).limit_denominator(limit)


def test_fbeta_hand_computed():
    pred, gold = {"a", "b", "c"}, {"a", "b", "d", "e"}
    # P = 2/3, R = 1/2.  F1 = 2PR/(P+R) = (2/3)/(7/6) = 4/7.
    assert frac(fbeta(pred, gold, beta=1.0)) == Fraction(4, 7)
    # F3 = 10PR/(9P+R) = (10/3)/(6 + 1/2) = 20/39.
    assert frac(fbeta(pred, gold, beta=3.0)) == Fraction(20, 39)
    assert fbeta(pred, gold) == fbeta(pred, gold, beta=3.0)  # β = 3 is the default
    # P = 1, R = 1/4: F1 = 2/5; F3 = 10*(1/4)/(9 + 1/4) = 10/37 (recall-weighted: far below P).
    assert frac(fbeta({"a"}, gold, beta=1.0)) == Fraction(2, 5)
    assert frac(fbeta({"a"}, gold, beta=3.0)) == Fraction(10, 37)
    # P = 1/4, R = 1: F3 = 10*(1/4)/(9/4 + 1) = 10/13: recall-weighting forgives over-prediction.
    assert frac(fbeta(gold, {"a"}, beta=3.0)) == Fraction(10, 13)


def test_fbeta_edge_cases():
    assert fbeta({"a"}, {"a"}) == 1.0
    assert fbeta({"x"}, {"a"}) == 0.0
    assert fbeta(set(), {"a"}) == 0.0
    assert fbeta({"a"}, set()) == 0.0
    assert fbeta(set(), set()) == 1.0
    assert fbeta(["a", "a", "b"], ["a"], beta=1.0) == pytest.approx(2 / 3)  # sets, not multisets
    with pytest.raises(ValueError):
        fbeta({"a"}, {"a"}, beta=-1)


FILES = ["pkg/a.py", "pkg/b.py", "pkg/c.py", "setup.py"]


def test_file_reward():
    gold = ["pkg/a.py", "pkg/b.py"]
    answer = "Let me think.\n```\npkg/a.py\n./pkg/c.py\n```"
    score, info = localization_reward("file", answer, gold, FILES)
    # P = 1/2, R = 1/2 -> F3 = 10/4 / (9/2 + 1/2) = 1/2.
    assert score == pytest.approx(0.5)
    assert (info["tp"], info["n_pred"], info["n_gold"]) == (1, 2, 2)
    assert localization_reward("file", "```\npkg/b.py\npkg/a.py\n```", gold, FILES)[0] == 1.0


def test_localization_zero_rules():
    gold = ["pkg/a.py"]
    for answer, kind in [
        ("", "empty_answer"),
        ("I am not sure.", "empty_answer"),
        ("```\npkg/a.py\npkg/zzz.py\n```", "absent_items"),  # one hallucinated path zeroes it
    ]:
        score, info = localization_reward("file", answer, gold, FILES)
        assert (score, info["kind"]) == (0.0, kind)
    assert localization_reward("file", "```\npkg/a.py\npkg/zzz.py\n```", gold, FILES)[1]["absent"] == ["pkg/zzz.py"]


def test_function_reward():
    candidates = [("m.py", ""), ("m.py", "Model"), ("m.py", "Model.save"), ("m.py", "helper"),
                  "u.py"]  # a bare path is the module level of u.py
    gold = [("m.py", "Model.save"), ("./u.py", None)]
    answer = "```\nm.py\nclass: Model\nmethod: save\nu.py\n```"
    score, info = localization_reward("function", answer, gold, candidates)
    # O = {Model, Model.save, u.py module}, A = {Model.save, u.py module}: P = 2/3, R = 1.
    # F3 = 10*(2/3) / (9*(2/3) + 1) = (20/3)/7 = 20/21.
    assert frac(score) == Fraction(20, 21)
    score, info = localization_reward("function", "m.py\nfunction: nope", gold, candidates)
    assert (score, info["kind"], info["absent"]) == (0.0, "absent_items", [["m.py", "nope"]])


def test_line_reward_ranges_and_absent_lines():
    shown = [("a.py", n) for n in range(10, 21)] + [("b.py", n) for n in range(1, 6)]
    gold = [("a.py", 12), ("a.py", 13), ("b.py", 2)]
    answer = "<think>line: 99</think>\n```\na.py\nfunction: f\nline: 12-14\nb.py\nline: 2\n```"
    score, info = localization_reward("line", answer, gold, shown)
    # O = {a12, a13, a14, b2}: P = 3/4, R = 1 -> F3 = 10*(3/4) / (27/4 + 1) = 30/31.
    assert frac(score) == Fraction(30, 31)
    for answer in ["a.py\nline: 19-21", "a.py\nline: 9", "c.py\nline: 1", "a.py\nline: 1-999999999"]:
        score, info = localization_reward("line", answer, gold, shown)
        assert (score, info["kind"]) == (0.0, "absent_items"), answer


def test_beta_is_configurable_and_registry_names():
    gold = ["pkg/a.py", "pkg/b.py"]
    answer = "```\npkg/a.py\npkg/c.py\npkg/b.py\n```"
    # P = 2/3, R = 1: F1 = 4/5.
    assert frac(localization_reward("file", answer, gold, FILES, beta=1.0)[0]) == Fraction(4, 5)
    meta = {"ground_truth": gold, "candidates": FILES, "beta": 1.0, "unused_key": 1}
    assert get_reward("sorft_file")(meta, answer) == localization_reward("file", answer, gold, FILES, beta=1.0)


def test_strict_variants_score_malformed_answers_minus_one_and_agree_otherwise():
    gold = ["pkg/a.py"]
    meta = {"ground_truth": gold, "candidates": FILES}
    for level in ("file", "function", "line"):
        assert get_reward(f"sorft_{level}_strict").spec.min_score == -1.0
    strict, sorft = get_reward("sorft_file_strict"), get_reward("sorft_file")
    # A wrong file of the tree: F-beta 0 in both; a file the tree lacks, or no answer: -1 vs 0.
    assert strict(meta, "```\npkg/b.py\n```")[0] == sorft(meta, "```\npkg/b.py\n```")[0] == 0.0
    for answer in ["```\npkg/zzz.py\n```", "", "```\npkg/a.py\npkg/zzz.py\n```"]:
        (s, s_info), (z, z_info) = strict(meta, answer), sorft(meta, answer)
        assert (s, z) == (-1.0, 0.0) and s_info["kind"] == z_info["kind"] != "ok", answer
    # Well-formed answers score the same F-beta: P = 1/2, R = 1 -> F3 = 10 * (1/2) / (9/2 + 1) = 10/11.
    answer = "```\npkg/a.py\npkg/b.py\n```"
    assert frac(strict(meta, answer)[0]) == frac(sorft(meta, answer)[0]) == Fraction(10, 11)


def test_unknown_subtask_is_a_caller_error():
    with pytest.raises(ValueError):
        localization_reward("module", "a.py", [], [])
