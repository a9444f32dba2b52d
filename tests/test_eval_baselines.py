"""The main job's trivial baselines, rate intervals and paired differences, and the ground-truth
SFT answers, against hand-computed values and independent references."""
import math

import numpy as np
import pytest

from swe_rl_jax.data import prompts
from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.data.retrieval import bm25_ranking, bm25_scores, code_terms
from swe_rl_jax.eval.baselines import (baseline_outcomes, bm25_answer,
                                       failing_test_file_answer, frequent_file_answerer, largest_file_answer,
                                       lexical_outcomes, random_file_outcomes)
from swe_rl_jax.eval.stats import paired_difference, wilson_interval
from swe_rl_jax.rewards import score_batch
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.sft.ground_truth import ground_truth_examples, render_localization

TREE = ["shop/__init__.py", "shop/basket.py", "shop/money.py", "shop/tax.py"]


def _record(issue: str, truth: list[str], subtask: str = "file_localization", items=None) -> TaskRecord:
    user = prompts.file_localization(issue, "shop/\n    __init__.py\n    basket.py\n    money.py\n    tax.py")
    return TaskRecord(task_id=f"x/{subtask}", subtask=subtask, instance_id="x", repo="acme/shop",
                      messages=[{"role": "system", "content": prompts.SORFT_SYSTEM}, {"role": "user", "content": user}],
                      ground_truth={"items": items if items is not None else truth}, candidates=list(TREE),
                      context={}, meta={"base_commit": "0" * 40})


def test_issue_of_inverts_the_prompt_template():
    issue = "total() is wrong\n\n```\nE   assert 3 == 4\n```\n<issue>nested</issue>"
    record = _record(issue, ["shop/basket.py"])
    assert prompts.issue_of(record.messages[-1]["content"]) == issue


def test_random_file_is_the_exact_expectation_over_the_tree():
    records = [_record("a", ["shop/basket.py"]), _record("b", ["shop/basket.py", "shop/tax.py"])]
    outcomes = random_file_outcomes(records)
    assert [o.hit for o in outcomes] == [0.25, 0.5]  # 1 and 2 of the 4 files hit


def test_lexical_baseline_picks_the_file_the_issue_points_to():
    issue = "test_tax_rounding fails\n\n- `tests/test_tax.py::test_tax_rounding`\nassert net_price(10) == 11"
    contents = {"shop/__init__.py": "", "shop/basket.py": "def total(items): ...\n",
                "shop/money.py": "def net_price(x): ...\n", "shop/tax.py": "RATE = 0.1\n"}
    records = [_record(issue, ["shop/tax.py"]), _record(issue, ["shop/money.py"])]
    outcomes = lexical_outcomes(records, RepoLocator(None), read=lambda r: contents)
    # `tax` is a path component named by the issue (+3); money.py only defines one issue word (+1)
    assert [o.hit for o in outcomes] == [True, False]
    assert outcomes[0].score == 1.0 and outcomes[0].format_ok


def test_failing_test_file_rule_maps_the_first_named_test_file_to_its_module():
    answer = lambda issue: failing_test_file_answer(_record(issue, ["shop/tax.py"]))  # noqa: E731
    assert answer("fails:\n- `tests/test_tax.py::test_round`\n- `tests/test_basket.py::test_total`") == "shop/tax.py"
    assert answer("see tests/unit/test_basket.py and tests/test_tax.py") == "shop/basket.py"
    assert answer("money_test.py::test_add fails") == "shop/money.py"
    assert answer("tests/test_package.py::test_imports fails") is None  # the tree has no package.py
    assert answer("total() returns 3, expected 4") is None  # no test file named
    outcomes = baseline_outcomes([_record("tests/test_package.py fails", ["shop/tax.py"])], RepoLocator(None),
                                 read=lambda r: {})
    assert not outcomes["failing_test_file"][0].format_ok and outcomes["failing_test_file"][0].hit == 0


def test_code_terms_split_identifiers():
    assert code_terms("x get_as(TaskQueue) HTTPError 42") == [
        "get_as", "get", "as", "taskqueue", "task", "queue", "httperror", "http", "error", "42"]


def test_bm25_matches_the_lucene_formula():
    docs = ["a/tax.py\ndef net_price(x): return round_tax(x)", "a/basket.py\ndef total(items): return sum(items)",
            "a/money.py\nclass Money: net net net"]
    query = "net_price returns the wrong total"
    terms = [code_terms(d) for d in docs]
    avgdl = sum(map(len, terms)) / len(terms)
    expected = []
    for doc in terms:  # Lucene BM25: idf ln(1 + (N - df + 0.5) / (df + 0.5)), tf / (tf + k1 (1 - b + b dl / avgdl))
        score = 0.0
        for term in set(code_terms(query)):
            df = sum(term in d for d in terms)
            tf = doc.count(term)
            if tf:
                idf = math.log(1 + (len(terms) - df + 0.5) / (df + 0.5))
                score += idf * tf / (tf + 1.5 * (1 - 0.75 + 0.75 * len(doc) / avgdl))
        expected.append(score)
    assert bm25_scores(query, docs) == pytest.approx(expected, rel=1e-5)
    assert expected.index(max(expected)) == 0
    contents = {"shop/__init__.py": "", "shop/basket.py": "def total(items): ...\n",
                "shop/money.py": "def net_price(x): ...\n", "shop/tax.py": "RATE = 0.1\n"}
    assert bm25_answer(_record("net_price(10) is wrong", ["shop/money.py"]), contents) == "shop/money.py"
    assert bm25_answer(_record("nothing in common", ["shop/money.py"]), contents) == "shop/__init__.py"  # tie: first
    # The ranking a prompt lists is the scores' order, ties in the given order.
    paths = ["a/tax.py", "a/basket.py", "a/money.py"]
    texts = {p: d.partition("\n")[2] for p, d in zip(paths, docs)}
    assert bm25_ranking(query, paths, texts) == sorted(paths, key=lambda p: -expected[paths.index(p)])
    assert bm25_ranking("nothing in common", paths, texts) == paths


def test_largest_file_counts_non_blank_lines():
    contents = {"shop/__init__.py": "", "shop/basket.py": "a\n\n\n\nb\n", "shop/money.py": "a\nb\nc\n",
                "shop/tax.py": "a\nb\nc\n"}
    assert largest_file_answer(_record("x", ["shop/tax.py"]), contents) == "shop/money.py"  # 3 lines, first in tree


def test_frequent_file_prefers_the_path_then_the_file_name_seen_in_training():
    train = [_record("t", [p]) for p in ["other/tax.py", "other/tax.py", "other/basket.py", "shop/basket.py"]]
    answer = frequent_file_answerer(train)
    # shop/basket.py is itself a training answer (once); tax.py is the most frequent name (twice)
    assert answer(_record("x", ["shop/tax.py"])) == "shop/basket.py"
    answer = frequent_file_answerer(train[:3])
    assert answer(_record("x", ["shop/tax.py"])) == "shop/tax.py"
    unseen = frequent_file_answerer([_record("t", ["lib/engine.py"])])
    record = _record("x", ["shop/tax.py"])
    assert unseen(record) == "lib/engine.py"  # no file of the tree was ever an answer: a miss outside the tree
    outcome = baseline_outcomes([record], RepoLocator(None), [_record("t", ["lib/engine.py"])],
                                read=lambda r: {})["frequent_file"][0]
    assert outcome.format_ok and not outcome.in_tree and outcome.hit == 0


def test_wilson_interval_matches_the_hand_computed_value():
    low, high = wilson_interval(8, 10)
    # p = 0.8, z = 1.96: centre (0.8 + z²/20) / (1 + z²/10), half z·sqrt(0.016 + z²/400) / (1 + z²/10)
    z2 = 1.959963984540054 ** 2
    centre, half = (0.8 + z2 / 20) / (1 + z2 / 10), math.sqrt(z2) * math.sqrt(0.016 + z2 / 400) / (1 + z2 / 10)
    assert (low, high) == pytest.approx((centre - half, centre + half))
    assert (low, high) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert wilson_interval(0, 50)[0] == pytest.approx(0.0) and wilson_interval(50, 50)[1] == pytest.approx(1.0)


def test_paired_difference_agrees_with_the_normal_approximation_on_many_records():
    rng = np.random.default_rng(3)
    a = (rng.random(2000) < 0.6).astype(float)
    b = np.where(rng.random(2000) < 0.8, a, 1 - a)  # agrees with a on ~80 % of records
    diff, (low, high) = paired_difference(a, b)
    d = a - b
    se = d.std(ddof=1) / math.sqrt(d.size)  # the paired (McNemar-type) standard error
    assert diff == pytest.approx(d.mean())
    assert low == pytest.approx(d.mean() - 1.96 * se, abs=0.006)
    assert high == pytest.approx(d.mean() + 1.96 * se, abs=0.006)
    assert paired_difference([1, 0, 1], [1, 0, 1]) == (0.0, (0.0, 0.0))


def test_ground_truth_answers_score_full_reward_in_each_localization_format():
    records = [
        _record("i", ["shop/tax.py"]),
        _record("i", [], "function_localization", [["shop/tax.py", "Tax.rate"], ["shop/tax.py", "Tax"],
                                                   ["shop/money.py", "net_price"], ["shop/money.py", ""]]),
        _record("i", [], "line_localization", [["shop/tax.py", 3], ["shop/money.py", 7]]),
    ]
    records[1] = TaskRecord(**{**records[1].to_dict(), "candidates": [
        ["shop/tax.py", ""], ["shop/tax.py", "Tax"], ["shop/tax.py", "Tax.rate"], ["shop/money.py", ""],
        ["shop/money.py", "net_price"]]})
    records[2] = TaskRecord(**{**records[2].to_dict(), "candidates": [["shop/tax.py", 3], ["shop/money.py", 7]]})
    assert render_localization("function_localization", records[1].ground_truth["items"]) == (
        "```\nshop/tax.py\nfunction: Tax.rate\nclass: Tax\nshop/money.py\nshop/money.py\nfunction: net_price\n```")
    rows, skipped = ground_truth_examples(records)
    assert skipped == 0 and len(rows) == 3
    results = score_batch([reward_task(r, row["response"]) for r, row in zip(records, rows)], num_workers=1)
    assert [score for score, _ in results] == [1.0, 1.0, 1.0]
