"""What `resolve` asks of the policy beyond localize → repair (docs/EVAL.md): the reproduction
stage and its script extraction, driven by a recorded-answers file on the sample repositories."""
import json
import subprocess

import pytest

from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.data.sources import load_instances
from swe_rl_jax.policies.recorded import RecordedPolicy
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.reproduction import extract_script
from swe_rl_jax.resolve.run import run_resolve
from swe_rl_jax.sampling import SamplingParams

INSTANCES = SAMPLE_DIR / "instances.jsonl"
ID = "quillsoft__configlet-12"  # its fix edits configlet/types.py


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    return next(iter(make_sample_repos(tmp_path_factory.mktemp("repos")).values())).parent


def _instance(iid):
    return next(i for i in load_instances(INSTANCES, require_patch=False) if i.instance_id == iid)


def _first_line(repos, inst, path):
    text = subprocess.run(["git", "-C", str(repos / inst.repo.replace("/", "__")), "show",
                           f"{inst.base_commit}:{path}"], capture_output=True, text=True, check=True).stdout
    return text.split("\n", 1)[0]


def _edit(path, search, replace):
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


class Recording(RecordedPolicy):
    """The recorded-answers policy, remembering every request."""

    def __init__(self, path):
        super().__init__(path)
        self.requests = []

    def generate(self, requests):
        self.requests.extend(requests)
        return super().generate(requests)


def _answers(tmp_path, rows):
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps({"task_id": t, "responses": r}) + "\n" for t, r in rows.items()))
    return path


def _config(repos, tmp_path, answers, **kw):
    return ResolveConfig(instances=str(INSTANCES), repos=str(repos), out=str(tmp_path / "preds.jsonl"),
                         answers=str(answers), instance_ids=(ID,), progress=False, **kw)


def _traces(tmp_path):
    return [json.loads(line) for line in (tmp_path / "preds.trace.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------------- the reproduction stage


SCRIPT = 'import configlet\n\nprint("Issue reproduced")\n'


@pytest.mark.parametrize("answer, script", [
    (f"```python\n{SCRIPT}```", SCRIPT),
    # the last python block after </think>; blocks inside the reasoning or in another language are not scripts
    (f"<think>```python\nprint('draft')\n```</think>First:\n```python\nprint(1)\n```\nFinal:\n```python\n{SCRIPT}```\n"
     "Run it:\n```bash\npython reproduce.py\n```", SCRIPT),
    ("```py\nprint('Issue resolved')\n```", "print('Issue resolved')\n"),
    ("```python\n  \n```", None),  # blank
    (f"```python\n{SCRIPT}", None),  # never closed
    ("```\nprint('Issue reproduced')\n```", None),  # no language tag
    (f"```python\n{SCRIPT}```\n<think>rethinking</think>no code after the reasoning", None),
    ("", None),
])
def test_extract_script(answer, script):
    assert extract_script(answer) == script


def test_reproduction_stage_asks_n_scripts_and_keeps_them_in_sample_order(repos, tmp_path):
    inst = _instance(ID)
    first = _first_line(repos, inst, "configlet/types.py")
    answers = _answers(tmp_path, {
        f"{ID}/file": ["```\nconfiglet/types.py\n```"],
        f"{ID}/function": ["no idea"], f"{ID}/line": ["no idea"],
        f"{ID}/repair": [_edit("configlet/types.py", first, first + "\n_TOUCHED = True")],
        f"{ID}/reproduction": [f"```python\n{SCRIPT}```", "I cannot write one.", "```python\nprint('Other issues')\n```"],
    })
    policy = Recording(answers)
    config = _config(repos, tmp_path, answers, agentless=AgentlessOptions(num_samples=1, reproduction_samples=3),
                     reproduction=SamplingParams(max_new_tokens=77, temperature=0.6))
    summary = run_resolve(config, policy)
    [trace] = _traces(tmp_path)
    assert trace["status"] == "patch"
    assert trace["reproduction_scripts"] == [SCRIPT, None, "print('Other issues')\n"]
    assert len(trace["responses"]["reproduction"]) == 3
    [asked] = [r for r in policy.requests if r.task_id == f"{ID}/reproduction"]
    assert (asked.n, asked.max_tokens, asked.temperature) == (3, 77, 0.6)
    assert inst.problem_statement in asked.messages[-1]["content"]
    assert all(m in asked.messages[-1]["content"] for m in ("Issue reproduced", "Issue resolved", "Other issues"))
    assert summary["requests"]["reproduction"] == 1


@pytest.mark.parametrize("samples, good_repair", [(0, True), (2, False)])
def test_no_reproduction_stage_by_default_or_without_a_kept_candidate(repos, tmp_path, samples, good_repair):
    first = _first_line(repos, _instance(ID), "configlet/types.py")
    repair = _edit("configlet/types.py", first, first + "\n_TOUCHED = True") if good_repair else "no edit"
    answers = _answers(tmp_path, {f"{ID}/file": ["```\nconfiglet/types.py\n```"], f"{ID}/function": ["?"],
                                  f"{ID}/line": ["?"], f"{ID}/repair": [repair],
                                  f"{ID}/reproduction": [f"```python\n{SCRIPT}```"] * 2})
    policy = Recording(answers)
    run_resolve(_config(repos, tmp_path, answers, agentless=AgentlessOptions(num_samples=1,
                                                                             reproduction_samples=samples)), policy)
    [trace] = _traces(tmp_path)
    assert trace["status"] == ("patch" if good_repair else "no_candidate")
    assert not any(r.task_id.endswith("/reproduction") for r in policy.requests)
    assert trace["reproduction_scripts"] == [] and "reproduction" not in trace["responses"]
