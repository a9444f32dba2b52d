"""Bad input and long silences of `resolve`, `rerank`, `generate`, `plan-memory` and
tools/accelerator_check.py (issue 49): each class of mistake is one `error:` line and exit 2 before
a model loads or anything is written, no good output is lost, every long step says what it does,
and the docs and `--help` say what the code does. Every test runs in-process on tiny inputs."""
from __future__ import annotations

import json
import pathlib
import re
import sys
from pathlib import Path

import pytest

from swe_rl_jax import cli
from swe_rl_jax.data.sample import SAMPLE_DIR
from swe_rl_jax.data.sources import REPOS_LAYOUT, InputError
from swe_rl_jax.policies import PolicyResponse
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.run import run_resolve

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = SAMPLE_DIR / "instances.jsonl"
ID = "quillsoft__configlet-12"
STAGES = ("file", "function", "line", "repair")


def _run(capsys, *argv: str) -> tuple[int, str]:
    """Exit status and stderr of one in-process command."""
    code = cli.main(list(argv))
    return code, capsys.readouterr().err.strip()


def _one_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    for needle in needles:
        assert needle in err, (needle, err)


def _trace(path: Path) -> Path:
    """A one-row resolve trace rerank can vote on."""
    cand = {"sample": 0, "dropped": "", "patch": "diff --git a/x b/x\n", "key_sha": "ab"}
    path.write_text(json.dumps({"instance_id": "a", "candidates": [cand]}) + "\n")
    return path


class Junk:
    """A policy answering every request with text no stage can parse (each stage falls back);
    it notes what the progress bar showed at each call."""

    def __init__(self, bars: list | None = None):
        self.calls, self.bars, self.bar_at_call = 0, bars, []

    def generate(self, requests):
        self.calls += 1
        if self.bars:
            self.bar_at_call.append(self.bars[-1].n)
        return [PolicyResponse(r.task_id, ("I cannot say.",) * r.n) for r in requests]


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    from swe_rl_jax.data.sample import make_sample_repos

    return next(iter(make_sample_repos(tmp_path_factory.mktemp("repos")).values())).parent


def _config(clones, tmp_path, **kw) -> ResolveConfig:
    base = dict(instances=str(INSTANCES), repos=str(clones), out=str(tmp_path / "preds.jsonl"), instance_ids=(ID,),
                agentless=AgentlessOptions(num_samples=1), progress=False)
    return ResolveConfig(**{**base, **kw})


def test_an_output_that_is_an_input_is_refused_and_the_input_is_kept(tmp_path, capsys):
    """`--out` naming a file the run reads (rerank's own trace; resolve's recorded answers or
    instances) is one line, exit 2, and the input is byte for byte as it was."""
    trace = _trace(tmp_path / "run.trace.jsonl")
    before = trace.read_bytes()
    code, err = _run(capsys, "rerank", "--trace", str(trace), "--rule", "majority", "--out", str(trace))
    _one_error(code, err, "--out", "also an input")
    assert trace.read_bytes() == before

    # rerank reads the model name from the run's predictions beside the trace: not an --out either
    preds = tmp_path / "run.jsonl"
    preds.write_text(json.dumps({"instance_id": "a", "model_name_or_path": "m", "model_patch": ""}) + "\n")
    code, err = _run(capsys, "rerank", "--trace", str(trace), "--rule", "majority", "--out", str(preds))
    _one_error(code, err, "also an input")

    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"task_id": f"{ID}/file", "response": "x"}) + "\n")
    kept = answers.read_bytes()
    for out in (answers, INSTANCES):
        code, err = _run(capsys, "resolve", "--instances", str(INSTANCES), "--repos", str(tmp_path), "--out", str(out),
                         f"answers={answers}")
        _one_error(code, err, "--out", "also an input")
    assert answers.read_bytes() == kept
    # the verification stage's test cache is written as well: never over the predictions or an input
    for cache in (tmp_path / "preds.jsonl", answers):
        code, err = _run(capsys, "resolve", "--instances", str(INSTANCES), "--repos", str(tmp_path), "--out",
                         str(tmp_path / "preds.jsonl"), f"answers={answers}", "verification.regression=true",
                         f"verification.cache={cache}")
        _one_error(code, err, "verification.cache", "also an input")
    assert answers.read_bytes() == kept


def test_a_path_of_the_wrong_kind_is_named_before_any_sampling(repos, tmp_path, capsys):
    """A directory where a file is meant (or the reverse), as input or output, is "is a
    directory" / "is a file", never "not found" or a traceback after the whole run."""
    trace = _trace(tmp_path / "t.trace.jsonl")
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    for argv, needle in ((["--trace", str(a_dir), "--out", str(tmp_path / "p.jsonl")], "--trace"),
                         (["--trace", str(trace), "--out", str(a_dir)], "--out")):
        code, err = _run(capsys, "rerank", "--rule", "majority", *argv)
        _one_error(code, err, needle, "is a directory")

    cases = [({"instances": str(SAMPLE_DIR)}, "--instances", "is a directory"),
             ({"repos": str(INSTANCES)}, "--repos", "is a file"),
             ({"answers": str(a_dir)}, "answers", "is a directory"),
             ({"trace_out": str(a_dir)}, "trace_out", "is a directory"),
             ({"out": str(a_dir)}, "--out", "is a directory")]
    for overrides, flag, kind in cases:
        policy = Junk()
        with pytest.raises(InputError, match=f"{flag}: .*{kind}"):
            run_resolve(_config(repos, tmp_path, **overrides), policy)
        assert policy.calls == 0, flag  # nothing was sampled first
    assert list(a_dir.iterdir()) == []


def test_an_unwritable_out_is_named_before_the_model_loads(tmp_path, capsys):
    """An --out that cannot be created (under a regular file) is said before the model loads:
    the error names --out, never the (absent) checkpoint the run would have loaded."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    (tmp_path / "empty").mkdir()
    code, err = _run(capsys, "resolve", "--instances", str(INSTANCES), "--repos", str(tmp_path / "empty"),
                     "--out", str(blocker / "preds.jsonl"), "model.checkpoint=/no/such/model")
    _one_error(code, err, "--out", "cannot be made")
    assert "/no/such/model" not in err


def test_sampling_settings_are_checked_before_a_model_loads(tmp_path, capsys):
    """--n 0, --top-p 5, a negative temperature or token budget: one line naming the setting,
    before the checkpoint is even opened (here an empty directory, whose load would fail naming
    the checkpoint). The same SamplingParams checks serve resolve's and rl's configs."""
    empty = tmp_path / "empty_checkpoint"
    empty.mkdir()
    for flag, value, name in (("--n", "0", "n:"), ("--top-p", "5", "top_p"), ("--temperature", "-1", "temperature"),
                              ("--max-new-tokens", "-3", "max_new_tokens")):
        code, err = _run(capsys, "generate", "--checkpoint", str(empty), "--prompt", "hi", flag, value)
        _one_error(code, err, name)
        assert "checkpoint" not in err
    code, err = _run(capsys, "resolve", "--instances", str(INSTANCES), "--repos", str(tmp_path), "repair.top_p=5")
    _one_error(code, err, "repair.top_p")
    code, err = _run(capsys, "rl", "records_dir=x", "sampling.temperature=-1")
    _one_error(code, err, "sampling.temperature")


def test_a_missing_tokenizer_is_named_before_the_weights_load(repos, tmp_path, capsys):
    """A --tokenizer / model.tokenizer that does not exist is one line naming the setting, said
    before the weights load: with a checkpoint that would fail to load, the tokenizer's error
    comes first."""
    empty = tmp_path / "empty_checkpoint"
    empty.mkdir()
    nowhere = tmp_path / "nowhere"
    code, err = _run(capsys, "generate", "--checkpoint", str(empty), "--tokenizer", str(nowhere), "--prompt", "hi")
    _one_error(code, err, "--tokenizer", str(nowhere))
    code, err = _run(capsys, "resolve", "--instances", str(INSTANCES), "--repos", str(repos),
                     "--out", str(tmp_path / "p.jsonl"), f"model.checkpoint={empty}", f"model.tokenizer={nowhere}",
                     f"instance_ids=[{ID}]", "progress=false")
    _one_error(code, err, "model.tokenizer", str(nowhere))


def test_an_interrupted_rerank_leaves_the_earlier_predictions(tmp_path, capsys, monkeypatch):
    """Predictions are written whole: a rerank stopped while writing (Ctrl-C half way through the
    file) leaves the earlier run's predictions as they were, not a truncated file."""
    trace = _trace(tmp_path / "t.trace.jsonl")
    out = tmp_path / "p.jsonl"
    assert _run(capsys, "rerank", "--trace", str(trace), "--rule", "majority", "--out", str(out))[0] == 0
    earlier = out.read_bytes()
    real = pathlib.Path.write_text

    def half_then_interrupt(self, data, *args, **kwargs):
        real(self, data[: len(data) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pathlib.Path, "write_text", half_then_interrupt)
    code, err = _run(capsys, "rerank", "--trace", str(trace), "--rule", "majority", "--out", str(out),
                     "--model-name", "other")
    monkeypatch.undo()
    assert code == 130 and err.startswith("interrupted:")
    assert out.read_bytes() == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl", "t.trace.jsonl"]  # no temporary left


def test_the_resolve_bar_advances_as_each_instance_finishes(repos, tmp_path, monkeypatch):
    """In one chunk, an instance that finishes early (its repository is missing) moves the bar
    before the policy is asked anything for the others; the bar ends at the instance count."""
    import tqdm

    bars = []

    class Bar(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    rows = [json.loads(line) for line in INSTANCES.read_text().splitlines()][:2]
    rows[1] = {**rows[1], "repo": "nobody/nothing"}
    instances = tmp_path / "instances.jsonl"
    instances.write_text("".join(json.dumps(r) + "\n" for r in rows))
    policy = Junk(bars)
    summary = run_resolve(_config(repos, tmp_path, instances=str(instances), instance_ids=(), chunk=32,
                                  progress=True), policy)
    assert summary["status"].get("missing_repository") == 1
    assert policy.bar_at_call and policy.bar_at_call[0] == 1  # the missing repository's instance, at once
    assert bars[-1].n == 2


def test_long_steps_say_what_they_do(tmp_path, capsys, monkeypatch):
    """plan-memory says on stderr when it starts tracing and compiling and when the compile is
    done (a large model's compile is minutes); tools/accelerator_check.py says when each part
    starts and ends and each check's outcome as it is decided, not only in the final report."""
    from swe_rl_jax.commands import plan_memory
    from swe_rl_jax.models import ModelConfig
    from swe_rl_jax.plan import report as plan_report
    from swe_rl_jax.plan.programs import PlanSpec

    tiny = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=1,
                       num_heads=2, num_kv_heads=1)
    said = []
    plan_report.plan(PlanSpec(program="sft", model="llama3.1-8b", seq=16, batch=1, target="cpu:1"), tiny,
                     say=said.append)
    assert [s.split()[0] for s in said] == ["tracing", "traced;", "traced"] and "compiling" in said[1], said

    # the command passes its stage lines to stderr, the report alone to stdout
    monkeypatch.setenv(plan_memory._CHILD_ENV, "1")
    monkeypatch.setattr(plan_report, "plan", lambda spec, say: say("compiling it") or {"fits": True})
    assert cli.main(["plan-memory", "--model", "smollm2-135m", "--seq", "8", "--batch", "8", "--json"]) == 0
    captured = capsys.readouterr()
    assert "plan-memory: compiling it" in captured.err and json.loads(captured.out) == {"fits": True}

    sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tools" / "checks")]
    import accelerator_check as ac
    from accelerator_common import Part

    seen_while_running = []

    def part_body():
        seen_while_running.append(capsys.readouterr().err)
        part.check("loss finite", True, True, ok=True)

    part = Part("speed")
    ac.run_part(part, part_body, "speed: sampler")
    assert "accelerator_check: speed: sampler: started" in seen_while_running[0]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("accelerator_check: speed: loss finite: ok")
    assert err[1].startswith("accelerator_check: speed: sampler: finished") and "(pass)" in err[1]


def test_summary_and_prediction_names_say_what_they_are(repos, tmp_path):
    """The summary counts instances finished by this run as `instances_done_this_run` (not
    `resolved_now`, which reads as a score), and recorded answers are no model: the predictions
    name them `recorded:<file name>`."""
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"task_id": f"{ID}/{stage}", "responses": ["no idea"] * 4}) + "\n"
                               for stage in STAGES))
    summary = run_resolve(_config(repos, tmp_path, answers=str(answers)))
    assert summary["instances_done_this_run"] == 1 and "resolved_now" not in summary
    rows = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert [r["model_name_or_path"] for r in rows] == ["recorded:answers.jsonl"]
    assert run_resolve(_config(repos, tmp_path, answers=str(answers)))["instances_done_this_run"] == 0  # resumed


LAYOUTS = {"<owner>__<name>", "<owner>/<name>", "<name>"}  # what RepoLocator.candidates looks up


def _layouts(text: str) -> set[str]:
    """The clone layouts `text` names (`<name>` alone, not as the tail of the other two)."""
    bare = re.search(r"(?<![_/])<name>", text.replace("DIR/<name>", "DIR <name>"))
    return {layout for layout in LAYOUTS if layout in text and (layout != "<name>" or bare)}


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_docs_and_help_say_what_the_code_does(tmp_path, capsys):
    """The clone layouts resolve and evaluate accept (the lookup's own list) in their --help and
    docs; generate's --checkpoint optional (default smollm2) in docs/CLI.md as in --help; `limit=0`
    documented as all (and running all); plan-memory's usage line runnable and every flag of it in
    docs/TRAINING.md's table."""
    from swe_rl_jax.commands import plan_memory
    from swe_rl_jax.data.sources import RepoLocator
    from swe_rl_jax.resolve.run import select_instances

    looked_up = [str(p.relative_to("D")) for p in RepoLocator("D").candidates("o/n")]
    assert looked_up == ["o__n", "o__n.git", "o/n", "o/n.git", "n", "n.git"]
    assert _layouts(REPOS_LAYOUT) == LAYOUTS and ".git" in REPOS_LAYOUT
    assert REPOS_LAYOUT in _help(capsys, "resolve")
    assert _layouts(_help(capsys, "evaluate")) == LAYOUTS
    eval_md = (ROOT / "docs" / "EVAL.md").read_text()
    assert _layouts(eval_md[eval_md.index("## `resolve`"):eval_md.index("Config (`resolve/config.py")]) == LAYOUTS

    cli_row = next(line for line in (ROOT / "docs" / "CLI.md").read_text().splitlines() if line.startswith("| `generate"))
    assert "[--checkpoint" in cli_row and "smollm2" in cli_row
    assert "(default: smollm2" in _help(capsys, "generate")

    limit_row = next(line for line in eval_md.splitlines() if line.startswith("| `instance_ids`, `limit`"))
    assert "`limit=0`" in limit_row and "all" in limit_row
    config = ResolveConfig(instances=str(INSTANCES), repos=str(tmp_path), limit=0)
    assert len(select_instances(config)) == len(INSTANCES.read_text().splitlines())

    usage = _help(capsys, "plan-memory")
    assert usage.startswith("usage: python -m swe_rl_jax.cli plan-memory")
    flags = [o for a in plan_memory.parser()._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
    training = (ROOT / "docs" / "TRAINING.md").read_text()
    table = training[training.index("## Memory planning"):training.index("TPU targets compile")]
    assert len(flags) > 20 and [f for f in flags if f"`{f}`" not in table and f"`{f} " not in table] == []


def test_no_command_is_an_error_not_a_success(capsys):
    """The entry point without a command did nothing and said so with exit 0; it is bad input."""
    from swe_rl_jax.cli import main as cli

    assert cli([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: no command given") and "commands:" in captured.err
    assert cli(["--help"]) == 0 and "commands:" in capsys.readouterr().out


def test_a_signal_during_training_ends_the_main_job_not_its_training_stage_alone():
    """Class: a stage that stops early and returns normally. SIGTERM reaches the training loop's
    own handler, which saves a checkpoint and returns ("preempted"); the main job went on to
    evaluate a model trained part of the way (seen: SFT stopped at step 4 of 24, then "evaluate
    sft"). Now the job ends as interrupted (cli: one line, exit 130), and any other early stop is
    an error; only a finished stage lets the job go on."""
    import inspect

    from swe_rl_jax.cli import INTERRUPTED
    from swe_rl_jax.pipeline import main_job

    with pytest.raises(KeyboardInterrupt, match="SFT was stopped by a signal"):
        main_job.require_finished("SFT", "preempted")
    with pytest.raises(RuntimeError, match=r"RL stopped before its last step \(diverged\)"):
        main_job.require_finished("RL", "diverged")
    assert main_job.require_finished("SFT", "done") is None
    source = inspect.getsource(main_job.run_main)
    # each training stage's result is checked before anything reads its export
    assert source.index('require_finished("SFT"') < source.index('evaluate("sft"')
    assert source.index('require_finished("RL"') < source.index('evaluate("sft_rl"')
    assert "resum" in INTERRUPTED["main"]
