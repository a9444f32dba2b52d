"""Issue 57, the attacker's tests of forged answers in agent episodes and in agent RL's rewards: a
scripted agent (agent/driver.py `run_episodes`, the judge `resolve --scaffold agent` and agent RL use)
that writes a forger into the package under test with its commands (tests/forgers.py: pytest's report
class with the bytecode tell, a trace function on the importing test module, a hook registered on the
session found by walking the frames) and submits; none fixes its instance.

- Each such episode is judged, as agent RL judges it, not resolved and `tampered`, and scores -1 from
  rl/episodes.py `episode_reward` (a caught forger must lose against an honest wrong answer: with 0
  for both, guessing pays), whatever the reward's similarity weight; the leave-one-out advantage of a
  forger in a group with an honest wrong episode is negative.
- Agent RL's step metrics (`rollout_metrics`, which `AgentGRPOTrainer.update_on_groups` logs) carry
  `tampered_rate`: the share of the step's episodes judged `tampered`.
A gold control episode resolves (reward 1), an honest wrong one scores 0 (checked where the tests
use them): independent references are the instance's FAIL_TO_PASS and these controls. Episodes need
bwrap (as tests/test_agent_hostile.py).

How each failed on the code before issue 57 (c7a622e; root, bwrap, 2 shared cores):
- test_a_forged_submission_is_tampered_and_scores_minus_one[report_class,
  settrace_on_the_importing_module, hook_through_getframe]: the judge's verdict resolved (FULL, error
  None): `episode_reward` 1.0, the gold patch's reward.
- test_a_tampered_verdict_scores_minus_one_whatever_the_similarity_weight: 0.0 (the same as an honest
  wrong answer's) and 0.25 x similarity with a weight of 0.25.
- test_a_forger_loses_against_an_honest_wrong_answer: the forger's advantage +1.0 (resolved).
- test_agent_rls_step_metrics_carry_the_tampered_rate: KeyError 'tampered_rate' (not logged).
Fixtures `repos`, `open_dir`, `options`: tests/conftest.py.
"""
from pathlib import Path

import pytest

import forgers
from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.driver import EpisodeJob, run_episodes
from swe_rl_jax.agent.environment import AgentEnvironment
from swe_rl_jax.agent.episode import task_id
from swe_rl_jax.agent.judge import make_judge
from swe_rl_jax.data.sample import SAMPLE_DIR
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import isolation_mode, load_specs
from swe_rl_jax.policies import PolicyResponse
from swe_rl_jax.rl.episodes import episode_reward, loo_advantages, rollout_metrics

if isolation_mode("auto") != "bwrap":
    pytest.skip("agent episodes run in bubblewrap, which does not run here (root and apt-get install bubblewrap)",
                allow_module_level=True)

INSTANCE = {i.instance_id: i for i in load_instances(SAMPLE_DIR / "instances.jsonl")}["quillsoft__configlet-12"]
SPECS = load_specs(SAMPLE_DIR / "specs.json")
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
# Forgers the guard must catch whatever else changes: each writes pytest's objects from the package
# (a class attribute; a trace function and a frame walk; a frame walk and a plugin registration).
FORGERS = ("report_class", "settrace_on_the_importing_module", "hook_through_getframe")


def _append(path: str, code: str) -> str:
    return f"cat >> {path} <<'EOF'\n{code}\nEOF"


class Scripted:
    """Answers each episode's turn from its script; past its end, submits."""

    def __init__(self, scripts: dict[str, list[str]]):
        self.scripts = scripts

    def generate(self, requests):
        out = []
        for r in requests:
            script = self.scripts[r.task_id]
            command = script[r.first] if r.first < len(script) else SUBMIT
            out.append(PolicyResponse(r.task_id, (f"THOUGHT: attack\n\n```mswea_bash_command\n{command}\n```",)))
        return out


@pytest.fixture(scope="module")
def judged(repos, options):
    """name -> the trajectory row of its episode, judged as agent RL judges."""
    code = {**forgers.IN_PROCESS, **forgers.OTHER_TELLS}
    episodes = {"gold": [f"git apply <<'EOF'\n{INSTANCE.patch}EOF"],
                "honest_wrong": [_append("configlet/types.py", "# a comment is no fix")],
                **{name: [_append("configlet/__init__.py", code[name])] for name in FORGERS}}
    config = AgentConfig(isolation="bwrap", judge_timeout_s=60, command_timeout_s=30, step_limit=4,
                         episodes_in_flight=len(episodes), command_workers=2)
    work = Path(options.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    locator = RepoLocator(repos)
    jobs = [EpisodeJob(INSTANCE, sample) for sample in range(len(episodes))]
    scripts = {task_id(INSTANCE.instance_id, sample): script for sample, script in enumerate(episodes.values())}
    done = run_episodes(jobs, Scripted(scripts), config,
                        lambda: AgentEnvironment(config, locator, SPECS, options.env, work),
                        judge=make_judge(config, locator, SPECS, options.env, work))
    return {name: episode.to_json() for name, episode in zip(episodes, done)}


def _gold_resolves(judged) -> None:
    assert judged["gold"]["verdict"]["resolved"] and episode_reward(judged["gold"]) == 1.0, judged["gold"]["verdict"]


def _honest_scores_zero(judged) -> None:
    honest = judged["honest_wrong"]
    assert honest["exit_status"] == "submitted" and honest["verdict"]["error"] is None, honest["verdict"]
    assert INSTANCE.fail_to_pass[0] in honest["verdict"]["tests_status"]["FAIL_TO_PASS"]["failure"]
    assert episode_reward(honest) == 0.0


@pytest.mark.parametrize("forger", FORGERS)
def test_a_forged_submission_is_tampered_and_scores_minus_one(judged, forger):
    _gold_resolves(judged)
    row = judged[forger]
    assert row["exit_status"] == "submitted" and "configlet/__init__.py" in row["patch"], row["exit_status"]
    verdict = row["verdict"]
    assert not verdict["resolved"] and verdict["error"] == "tampered" and verdict["message"], verdict
    assert episode_reward(row) == -1.0


def test_a_tampered_verdict_scores_minus_one_whatever_the_similarity_weight():
    tampered = {"verdict": {"resolved": False, "error": "tampered", "similarity": 0.8}}
    honest = {"verdict": {"resolved": False, "error": None, "similarity": 0.8}}
    assert episode_reward(tampered) == -1.0 and episode_reward(tampered, 0.25) == -1.0
    assert episode_reward(honest) == 0.0 and episode_reward(honest, 0.25) == pytest.approx(0.2)  # as before


def test_a_forger_loses_against_an_honest_wrong_answer(judged):
    """Leave-one-out advantages of a group [honest wrong answer, forger]: the forger's is negative."""
    _honest_scores_zero(judged)
    for forger in FORGERS:
        rewards = [[episode_reward(judged["honest_wrong"]), episode_reward(judged[forger])]]
        honest, forged = loo_advantages(rewards, [[True, True]])[0]
        assert forged < 0 < honest, (forger, rewards)


def test_agent_rls_step_metrics_carry_the_tampered_rate(judged):
    _gold_resolves(judged)
    _honest_scores_zero(judged)
    groups = [[judged["gold"], judged["honest_wrong"]], [judged[f] for f in FORGERS]]
    rows = [t for g in groups for t in g]
    expected = sum((t["verdict"] or {}).get("error") == "tampered" for t in rows) / len(rows)
    metrics = rollout_metrics(groups)
    assert metrics["tampered_rate"] == pytest.approx(expected), metrics
    assert expected == pytest.approx(len(FORGERS) / len(rows)), [t["verdict"]["error"] for t in rows]
