"""The execution rewards on the shipped sample: `tests_pass` is 1 for the oracle edit, 0 for an
edit that breaks the tests, -1 for malformed answers; results are cached; the mix with the
similarity reward; and a short GRPO run whose reward runs the tests in the reward pool."""
import dataclasses
import glob
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import unguarded

from swe_rl_jax.cli import main as cli
from swe_rl_jax.data.records import read_records, records_file
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.rewards import score_batch, swe_rl_reward
from swe_rl_jax.rewards import execution
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.sft.ground_truth import render_answer
from toy_rewards import breaking_answer, whole_file_answer


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("exec")
    assert cli(["build-data", "--sample", "--out", str(root / "records")]) == 0
    make_sample_repos(root / "repos")
    work = Path(tempfile.mkdtemp(prefix="swe-exec-test-"))  # reachable by the sandbox user
    work.chmod(0o755)
    config = execution.ExecutionConfig(instances=str(SAMPLE_DIR / "instances.jsonl"), repos=str(root / "repos"),
                                       specs=str(SAMPLE_DIR / "specs.json"), env_cache=str(root / "envs"),
                                       work_dir=str(work), timeout_s=30)
    yield root, config
    shutil.rmtree(work, ignore_errors=True)


def _swe_rl_records(root, split):
    return list(read_records(records_file(root / "records", split, "swe_rl")))


def test_tests_pass_scores_oracle_broken_and_malformed(setup, monkeypatch):
    root, config = setup
    meta = {"execution": dataclasses.asdict(config)}
    records = {r.instance_id: r for r in _swe_rl_records(root, "validation")}
    record = records["quillsoft__configlet-12"]
    context, oracle = record.context["code_context"], record.ground_truth["oracle_new_content"]
    tasks = [reward_task(record, answer, {"swe_rl": "tests_pass"}, meta)
             for answer in (whole_file_answer(context, oracle), breaking_answer(context, oracle), "no answer", "")]
    results = score_batch(tasks, num_workers=1, timeout_s=60)
    assert [s for s, _ in results] == [1.0, 0.0, -1.0, -1.0]
    assert results[0][1]["resolved"] and results[0][1]["passed"] == results[0][1]["total"] == 3
    assert not results[1][1]["resolved"] and results[2][1]["kind"] == "tag_count"
    # Cached by (instance, patch): the same edit is not run again.
    monkeypatch.setattr(execution, "run_tests", lambda *a, **k: pytest.fail("ran the tests again"))
    assert score_batch(tasks[:2], num_workers=1, timeout_s=60) == results[:2]
    assert len(glob.glob(str(root / "envs" / "results" / "*" / "*.json"))) >= 2


def test_tests_pass_reads_each_subtask_in_its_own_format(setup):
    """An `edit_generation` answer is SoRFT's blocks, no envelope; the same text for a `swe_rl`
    record lacks SWE-RL's envelope and is malformed."""
    root, config = setup
    meta = {"execution": dataclasses.asdict(config)}
    edit = {r.instance_id: r for r in read_records(records_file(root / "records", "validation", "edit_generation"))}
    record = edit["quillsoft__configlet-12"]
    context, oracle = record.context["code_context"], record.ground_truth["oracle_new_content"]
    broken = breaking_answer(context, oracle).split("<solution>\n")[1].split("\n</solution>")[0]
    answers = (render_answer(record), broken, "```python\nno blocks\n```")
    tasks = [reward_task(record, answer, {"edit_generation": "tests_pass"}, meta) for answer in answers]
    swe_rl_record = {r.instance_id: r for r in _swe_rl_records(root, "validation")}["quillsoft__configlet-12"]
    tasks.append(reward_task(swe_rl_record, answers[0], {"swe_rl": "tests_pass"}, meta))
    results = score_batch(tasks, num_workers=1, timeout_s=60)
    assert [s for s, _ in results] == [1.0, 0.0, -1.0, -1.0]
    assert results[0][1]["resolved"] and results[3][1]["kind"] == "tag_count"


def test_tests_pass_similarity_mixes_both_rewards(setup):
    root, config = setup
    record = {r.instance_id: r for r in _swe_rl_records(root, "validation")}["quillsoft__configlet-17"]
    context, oracle = record.context["code_context"], record.ground_truth["oracle_new_content"]
    meta = {"execution": {**dataclasses.asdict(config), "tests_weight": 0.25}}
    broken = breaking_answer(context, oracle)
    tasks = [reward_task(record, answer, {"swe_rl": "tests_pass_similarity"}, meta)
             for answer in (whole_file_answer(context, oracle), broken, "<think>x</think>")]
    scores = [s for s, _ in score_batch(tasks, num_workers=1, timeout_s=60)]
    similarity, _ = swe_rl_reward(context, oracle, broken)  # the independent SWE-RL reward
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] == pytest.approx(0.75 * similarity) and 0.0 < scores[1] < 0.75
    assert scores[2] == -1.0


# A pytest hook that reports every test as passed: an answer that games the tests instead of fixing the bug.
_FORCE_PASS = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def test_an_answer_adding_a_conftest_that_forces_passes_scores_nothing(setup, tmp_path):
    """Reward integrity (the harness resets conftest.py before the tests run): the answer is well
    formed and its file lands in the checkout, yet it scores 0; without the reset it would score 1."""
    from swe_rl_jax.harness import runner

    root, config = setup
    record = {r.instance_id: r for r in _swe_rl_records(root, "validation")}["quillsoft__configlet-12"]
    context = record.context["code_context"]
    assert "conftest.py" not in context
    task = reward_task(record, whole_file_answer(context, {"conftest.py": _FORCE_PASS}), {"swe_rl": "tests_pass"},
                       {"execution": dataclasses.asdict(config)})
    [(score, info)] = score_batch([task], num_workers=1, timeout_s=60)
    assert score == 0.0 and info["reset_files"] == ["conftest.py"] and not info["resolved"]
    # Counterfactual (in this process, with its own result cache): without the reset, the sentinels and
    # the in-process guard, the hook alone makes every test pass.
    unprotected = dataclasses.replace(config, result_cache=str(tmp_path / "results"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "reset_test_infrastructure", lambda *a, **k: [])
        mp.setattr(runner, "place_sentinels", lambda *a, **k: None)
        mp.setattr(runner, "start_guard", unguarded)
        hacked_score, hacked = execution.compute_execution(
            {**task.meta, "execution": dataclasses.asdict(unprotected)}, task.response, False)
    assert hacked_score == 1.0 and hacked["resolved"] and hacked["reset_files"] == []


def test_attacks_from_the_package_under_test_score_nothing(setup, tmp_path):
    """Through the reward: library code that calls `pytest.xfail()` where it raised (−1: the guard
    sees pytest's outcome raised by code that is not the repository's own, `tampered`, also under
    the official XFAIL rule, `xfail_passes`), library code that registers a forcing plugin in pytest's
    memory (−1, `tampered`: a forger caught loses), and an edit of a path no file system takes (−1,
    `invalid_path`)."""
    from test_harness_attacks import REGISTER_IN_MEMORY

    root, config = setup
    record = {r.instance_id: r for r in _swe_rl_records(root, "validation")}["quillsoft__configlet-12"]
    context = record.context["code_context"]
    types = context["configlet/types.py"]
    raise_line = '        raise ValueError(f"not a duration: {value!r}")\n'
    answers = {
        "xfail": whole_file_answer(context, {"configlet/types.py": types.replace(
            raise_line, '        import pytest\n        pytest.xfail("not a duration")\n')}),
        "in_memory": whole_file_answer(context, {"configlet/types.py": types + REGISTER_IN_MEMORY}),
        "long_path": whole_file_answer(context, {f"configlet/{'x' * 300}.py": "X = 1\n"}),
    }
    meta = {"execution": dataclasses.asdict(config)}
    official = {"execution": {**dataclasses.asdict(config), "xfail_passes": True}}
    tasks = [reward_task(record, answer, {"swe_rl": "tests_pass"}, meta) for answer in answers.values()]
    tasks.append(reward_task(record, answers["xfail"], {"swe_rl": "tests_pass"}, official))
    results = score_batch(tasks, num_workers=2, timeout_s=60)
    assert [s for s, _ in results] == [-1.0, -1.0, -1.0, -1.0], results
    assert results[0][1]["kind"] == results[3][1]["kind"] == results[1][1]["kind"] == "tampered"
    assert results[2][1]["kind"] == "invalid_path" and results[2][1]["error"] == "invalid_path"


def test_setup_problems_are_internal_errors_not_scores(setup):
    root, config = setup
    record = _swe_rl_records(root, "validation")[0]
    answer = whole_file_answer(record.context["code_context"], record.ground_truth["oracle_new_content"])
    meta = {"execution": {**dataclasses.asdict(config), "repos": str(root / "nowhere")}}
    score, info = score_batch([reward_task(record, answer, {"swe_rl": "tests_pass"}, meta)], num_workers=1)[0]
    assert score == -1.0 and info["kind"] == "internal_error" and "no clone of" in info["reason"]


def test_grpo_with_the_execution_reward(setup, tiny_llama):
    """A GRPO step on the sample's SWE-RL train prompts; every response is scored by the real
    tests_pass reward in a pool worker (through toy_rewards.oracle_or_broken_tests_pass, since a
    random tiny model never writes a well-formed answer)."""
    root, config = setup
    out = root / "rl"
    args = ["rl", f"records_dir={root / 'records'}", f"out_dir={out}", f"model.checkpoint={tiny_llama}",
            "model.tokenizer=smollm2", "subtasks=[swe_rl]",
            "rewards={swe_rl: 'toy_rewards:oracle_or_broken_tests_pass'}", "grpo.group_size=3",
            "update.prompts_per_step=2", "update.overlong=none", "sampling.max_new_tokens=6", "num_steps=1",
            "optimizer.lr=1e-2", "max_prompt_tokens=1450", "reward_workers=2", "reward_timeout_s=60", "progress=false", "save_every=100",
            "export=false", f"execution.result_cache={root / 'grpo_results'}"]
    args += [f"execution.{k}={v}" for k, v in dataclasses.asdict(config).items() if v != "" and k != "tests_weight"]
    assert cli(args) == 0
    metrics = [json.loads(line) for line in (out / "metrics" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1] and -1.0 <= metrics[0]["reward/swe_rl"] <= 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prompts_without_tests"] == 2  # the two mined commits of taskq have no tests
    cached = [json.loads(Path(p).read_text()) for p in glob.glob(str(root / "grpo_results" / "*" / "*.json"))]
    assert cached and all(c["total"] > 0 and c["error"] is None for c in cached)  # the workers ran the tests
