"""The main job's trivial baselines, rate intervals and paired differences, and the ground-truth
SFT answers, against hand-computed values and independent references."""
import math

import numpy as np
import pytest

from swe_rl_jax.data import prompts
from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.eval.baselines import lexical_outcomes, random_file_outcomes
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
