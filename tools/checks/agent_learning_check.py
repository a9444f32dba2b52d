"""The learning check of multi-turn agent RL (docs/AGENT.md, "The learning check"): does
`agent-rl` teach SmolLM2-135M, on 2 CPU cores, a task it can only solve over several turns?

The task ("secret word"): a repository whose `notes/` directory holds a few files with random names;
one says "The secret word is W." The agent must write W, alone, to `answer.txt` and submit. W is a
random made-up word, a new one per instance, so the answer is only in the file: the agent has to list
or read the notes (one turn), then write what it saw (another), and nothing learned about other
instances helps. The harness judges each submission with a hidden test (`tests/test_answer.py`),
as any instance; the held-out instances are whole repositories never trained on.

Stages (each skipped when its output is there, so the tool resumes):
 1. tasks: `--repos` repositories of `--per-repo` instances each, the last `--heldout` held out;
 2. warm start: SmolLM2-135M never writes the action format on its own (0 of 36 answers in a probe),
    so GRPO has no signal from it. A scripted teacher (three strategies: `cat notes/*`; `ls` then
    `cat` the file; `grep`) runs its episodes in the sandbox on the training repositories, judged;
    `--sft-steps` SFT updates on them (sft/episodes.py) give the RL's starting point;
 3. `probe` (run by hand when choosing `--sft-steps`): the warm start on 16 training instances;
 4. baselines on the held-out instances: the guess (a policy that submits without reading, the
    most frequent training answer: the strongest that does not look), the base model, the warm start;
 5. `agent-rl` from the warm start on the training repositories, once per `--seeds`, its exported
    policy then evaluated on the held-out instances with the baselines' episode keys. Compact
    filtering is off unless `--compact-filtering`: with it, an episode that never submits escapes the
    penalty of a wrong submission, and the warm start learned to stop submitting (docs/AGENT.md).
Everything lands in `report.json` (held-out resolved rate and the episodes' other metrics per policy).

    python tools/checks/agent_learning_check.py --out outputs/agent_learning_check
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from scripted_agent import ScriptedTokens  # noqa: E402
from swe_rl_jax.agent.actions import SUBMIT_MARKER  # noqa: E402
from swe_rl_jax.agent.config import AgentConfig  # noqa: E402
from swe_rl_jax.agent.driver import judged_groups  # noqa: E402
from swe_rl_jax.agent.environment import AgentEnvironment  # noqa: E402
from swe_rl_jax.agent.judge import make_judge  # noqa: E402
from swe_rl_jax.config import load_config  # noqa: E402
from swe_rl_jax.data.sample import commit_all, init_repo, write_files  # noqa: E402
from swe_rl_jax.data.sources import Instance, RepoLocator, load_instances  # noqa: E402
from swe_rl_jax.harness.evaluation import harness_places  # noqa: E402
from swe_rl_jax.policies.config import PolicyConfig, make_policy  # noqa: E402
from swe_rl_jax.model_source import ModelSource, tokenizer_source  # noqa: E402
from swe_rl_jax.rl.agent_run import AgentHeldoutConfig, AgentRLConfig, heldout_seed, run_agent_rl  # noqa: E402
from swe_rl_jax.rl.episodes import episode_metrics  # noqa: E402
from swe_rl_jax.sampling import SamplingParams  # noqa: E402
from swe_rl_jax.sft.episodes import sft_on_episodes  # noqa: E402
from swe_rl_jax.tokenizer import load_tokenizer  # noqa: E402
from swe_rl_jax.train import OptimizerConfig  # noqa: E402

SYSTEM = ("You work in a Linux shell. Answer with exactly one shell command in a ```bash block, nothing else.\n"
          "Example answer:\n```bash\nls\n```")
TASK = ("The secret word is written in one of the files in the notes directory. Write the word, and nothing "
        "else, to answer.txt. Then submit with: echo " + SUBMIT_MARKER)
OBSERVATION = "<returncode>{{output.returncode}}</returncode>\n<output>\n{{output.output[-2000:]}}</output>"
# The sample's pytest pins: the environment cache already holds them where the demo ran.
REQUIREMENTS = ["pytest==8.4.2", "pluggy==1.6.0", "iniconfig==2.3.0", "packaging==26.3", "pygments==2.21.0"]
TEST_CMD = "python -m pytest -rA -p no:cacheprovider --tb=short"
NOTE_NAMES = ("todo", "meeting", "ideas", "draft", "log", "memo", "plan", "scratch", "journal", "misc")
DISTRACTORS = ("Meeting moved to Tuesday.", "Buy more coffee filters.", "Call the landlord about the heater.",
               "The build is green again.", "Remember to water the plants.", "Lunch with Sam on Friday.")


def made_up_word(rng: random.Random) -> str:
    return "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))


def _new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines))


def make_tasks(root: Path, repos: int, per_repo: int, seed: int) -> tuple[Path, Path]:
    """The repositories (`root/repos/lc__notesN`) and their instances (`root/instances.jsonl`), and the
    environment specs (`root/specs.json`)."""
    rng, words, rows = random.Random(seed), set(), []
    for r in range(repos):
        repo = f"lc/notes{r}"
        path = init_repo(root / "repos" / repo.replace("/", "__"))
        write_files(path, {"README.md": "Notes.\n", "tests/test_notes.py":
                           "from pathlib import Path\n\n\ndef test_notes_exist():\n    assert Path('notes').is_dir()\n"})
        commit_all(path, "start")
        old: list[str] = []
        for k in range(per_repo):
            word = made_up_word(rng)
            while word in words:
                word = made_up_word(rng)
            words.add(word)
            names = [f"notes/{n}_{rng.randrange(100, 1000)}.txt" for n in rng.sample(NOTE_NAMES, 3)]
            secret = rng.randrange(3)
            files = {n: (f"The secret word is {word}.\n" if i == secret else rng.choice(DISTRACTORS) + "\n")
                     for i, n in enumerate(names)}
            write_files(path, {**{o: None for o in old}, **files})
            base = commit_all(path, f"notes {k}")
            old = names
            test = f"from pathlib import Path\n\n\ndef test_answer():\n    assert Path('answer.txt').read_text().strip() == '{word}'\n"
            rows.append({"instance_id": f"lc__notes{r}-{k}", "repo": repo, "base_commit": base,
                         "problem_statement": TASK, "patch": _new_file("answer.txt", word + "\n"),
                         "test_patch": _new_file("tests/test_answer.py", test),
                         "FAIL_TO_PASS": json.dumps(["tests/test_answer.py::test_answer"]),
                         "PASS_TO_PASS": json.dumps(["tests/test_notes.py::test_notes_exist"]),
                         "secret_file": names[secret], "word": word})
    instances = root / "instances.jsonl"
    instances.write_text("".join(json.dumps(r) + "\n" for r in rows))
    specs = root / "specs.json"
    specs.write_text(json.dumps({f"lc/notes{r}": {"requirements": REQUIREMENTS, "test_cmd": TEST_CMD}
                                 for r in range(repos)}, indent=1))
    return instances, specs


def bash(command: str) -> str:
    return f"```bash\n{command}\n```"


def teacher_turns(row: dict[str, Any], strategy: int) -> list[str]:
    """The scripted teacher's episode of an instance: read the notes one of three ways, then write the
    word and submit in one command."""
    write = bash(f"echo {row['word']} > answer.txt && echo {SUBMIT_MARKER}")
    look = [[bash("cat notes/*")], [bash("ls notes"), bash(f"cat {row['secret_file']}")],
            [bash("grep -r secret notes")]][strategy]
    return [*look, write]


def agent_config(specs: Path, work_dir: Path, temperature: float, max_new_tokens: int) -> AgentConfig:
    return AgentConfig(system_template=SYSTEM, instance_template="{{task}}", observation_template=OBSERVATION,
                       languages=("bash",), step_limit=4, max_consecutive_format_errors=2, max_context_tokens=2048,
                       command_timeout_s=10, judge_timeout_s=60, episode_command_s=30, command_workers=2,
                       sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature),
                       specs=str(specs), work_dir=str(work_dir), judge=True)


class Harness:
    """The episodes' environment and judge on the task repositories."""

    def __init__(self, agent: AgentConfig, repos: Path):
        self.agent, self.locator = agent, RepoLocator(repos)
        self.places = harness_places("agent", agent.specs, agent.env_cache, agent.work_dir, agent.isolation)
        self.judge = make_judge(agent, self.locator, self.places.specs, self.places.env_options, self.places.work_dir)

    def make_env(self) -> AgentEnvironment:
        return AgentEnvironment(self.agent, self.locator, self.places.specs, self.places.env_options,
                                self.places.work_dir)

    def episodes(self, instances: Sequence[Instance], samples: int, policy: Any, tokenizer: Any,
                 seed: int) -> list[list[dict[str, Any]]]:
        return judged_groups(instances, samples, policy, self.agent, self.make_env, self.judge, tokenizer, seed)


def heldout_metrics(harness: Harness, heldout: Sequence[Instance], samples: int, checkpoint: str) -> dict[str, float]:
    policy = make_policy(PolicyConfig(kind="sampler", model=ModelSource(checkpoint=checkpoint)))
    # agent-rl's held-out seed: every policy here, baselines included, meets the same episode keys.
    groups = harness.episodes(heldout, samples, policy, policy.tokenizer, heldout_seed(AgentHeldoutConfig()))
    return episode_metrics(groups, "heldout/")


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/agent_learning_check")
    p.add_argument("--repos", type=int, default=8)
    p.add_argument("--per-repo", type=int, default=8)
    p.add_argument("--heldout", type=int, default=2, help="repositories held out (the last ones)")
    p.add_argument("--samples", type=int, default=4, help="held-out episodes per instance")
    p.add_argument("--sft-steps", type=int, default=3)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--rl-steps", type=int, default=5)
    p.add_argument("--rl-lr", type=float, default=2e-5)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--compact-filtering", action="store_true",
                   help="DeepSWE's: episodes cut by a limit out of the loss (off: they count as failures)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--stages", default="sft,baselines,rl", help="comma-separated stages to run")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stages = set(args.stages.split(","))
    report_path = out / "report.json"
    report: dict[str, Any] = json.loads(report_path.read_text()) if report_path.is_file() else {}

    def save() -> None:
        report_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")

    tasks = out / "tasks"
    if not (tasks / "instances.jsonl").is_file():
        make_tasks(tasks, args.repos, args.per_repo, seed=0)
    instances = load_instances(tasks / "instances.jsonl")
    rows = {json.loads(line)["instance_id"]: json.loads(line) for line in (tasks / "instances.jsonl").open()}
    heldout_repos = sorted({i.repo for i in instances})[-args.heldout:]
    train = [i for i in instances if i.repo not in heldout_repos]
    heldout = [i for i in instances if i.repo in heldout_repos]
    work = out / "work"
    work.mkdir(exist_ok=True)
    agent = agent_config(tasks / "specs.json", work, args.temperature, args.max_new_tokens)
    harness = Harness(agent, tasks / "repos")
    tokenizer = load_tokenizer(tokenizer_source(ModelSource()))
    sft_dir = out / f"sft{args.sft_steps}"

    teacher = out / "teacher.jsonl"  # the teacher's resolved episodes, token ids and all
    if "sft" in stages and not teacher.is_file():
        script = {(i.instance_id, 0): teacher_turns(rows[i.instance_id], n % 3) for n, i in enumerate(train)}
        groups = harness.episodes(train, 1, ScriptedTokens(tokenizer, script), tokenizer, seed=0)
        episodes = [g[0] for g in groups]
        resolved = [e for e in episodes if e.get("verdict", {}).get("resolved")]
        report["teacher"] = {"episodes": len(episodes), "resolved": len(resolved)}
        print(f"teacher: {len(resolved)}/{len(episodes)} resolved", flush=True)
        teacher.write_text("".join(json.dumps(e["tokens"]) + "\n" for e in resolved))
        save()
    if "sft" in stages and not (sft_dir / "hf").is_dir():
        resolved = [json.loads(line) for line in teacher.open()]
        summary = sft_on_episodes(ModelSource(), resolved, sft_dir, steps=args.sft_steps,
                                  batch_size=8, optimizer=OptimizerConfig(lr=args.sft_lr, schedule="constant"))
        report[f"sft{args.sft_steps}"] = {k: v for k, v in summary.items() if k != "export_dir"}
        save()

    if "probe" in stages:  # the warm start on training instances: what --sft-steps was chosen by
        probe = train[::3][:16]
        key = f"sft{args.sft_steps}_train"
        report[key] = heldout_metrics(harness, probe, 2, str(sft_dir / "hf"))
        print(key, report[key], flush=True)
        save()

    if "baselines" in stages:
        counts = collections.Counter(rows[i.instance_id]["word"] for i in train)
        guess = counts.most_common(1)[0][0]
        script = {(i.instance_id, s): [bash(f"echo {guess} > answer.txt && echo {SUBMIT_MARKER}")]
                  for i in heldout for s in range(args.samples)}
        if "guess" not in report:
            groups = harness.episodes(heldout, args.samples, ScriptedTokens(tokenizer, script), tokenizer, seed=0)
            report["guess"] = episode_metrics(groups, "heldout/")
            save()
        for name, checkpoint in (("base", "smollm2"), (f"sft{args.sft_steps}_heldout", str(sft_dir / "hf"))):
            if name not in report:
                report[name] = heldout_metrics(harness, heldout, args.samples, checkpoint)
                print(name, report[name], flush=True)
                save()

    if "rl" in stages:
        # agent-rl on the training repositories alone; the held-out evaluation of its exported policy is
        # the baselines' (same episodes' keys), so the warm start is evaluated once, not once per seed.
        train_file = out / "train.jsonl"
        train_file.write_text("".join(json.dumps(rows[i.instance_id]) + "\n" for i in train))
        for seed in args.seeds:
            # A setting of its own: another LR or filtering is another run.
            key = f"rl_lr{args.rl_lr:g}{'_filtered' if args.compact_filtering else ''}_seed{seed}"
            if key in report:
                continue
            overrides = [f"instances=[{train_file}]", f"repos={tasks / 'repos'}", f"out_dir={out / key}",
                         f"model.checkpoint={sft_dir / 'hf'}", f"seed={seed}", f"num_steps={args.rl_steps}",
                         "instances_per_step=4", "grpo.group_size=4", f"optimizer.lr={args.rl_lr}", "save_every=2",
                         "rollout.slots=0", "update.micro_batches=2", "update.remat=none",
                         f"compact_filtering={str(args.compact_filtering).lower()}"]
            config = dataclasses.replace(load_config(AgentRLConfig, None, overrides), agent=agent)
            summary = run_agent_rl(config)
            report[key] = {**heldout_metrics(harness, heldout, args.samples, summary["export_dir"]),
                           "train/resolved_first": summary["resolved_first"],
                           "train/resolved_last": summary["resolved_last"]}
            print(key, report[key], flush=True)
            save()

    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
