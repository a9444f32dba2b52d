"""The `eval` run: answer every task record of a split (greedy by default; `sampling.n` samples
each at a temperature), score, and report subtask metrics (`eval/metrics.py`, docs/EVAL.md).

`run_eval` prints a table per subtask, per repository and overall and writes `out_dir/eval.json`
with the config, the summary and, per record, its outcome and response. The answers come from the
in-process sampler on `model`, or from any policy (policies/): an OpenAI-compatible `endpoint` or
recorded `answers` keyed by task id; an answer the policy did not give scores as an empty one.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from swe_rl_jax.config import require, to_dict
from swe_rl_jax.data.records import SPLITS, TaskRecord, read_split_records, records_file
from swe_rl_jax.eval.metrics import outcomes_to_json, table
from swe_rl_jax.parallel import MeshConfig
from swe_rl_jax.policies.http import HttpPolicyConfig
from swe_rl_jax.model_source import ModelSource
from swe_rl_jax.rewards import check_reward_names
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.subtasks import SUBTASKS


@dataclass(frozen=True)
class EvalConfig:
    records_dir: str = ""  # build-data output: <split>/<subtask>.jsonl (required at run time)
    model: ModelSource = field(default_factory=ModelSource)
    endpoint: Optional[HttpPolicyConfig] = None  # answers from an OpenAI-compatible server instead
    answers: str = ""  # or from a JSONL file of recorded answers keyed by task id
    split: str = "validation"
    subtasks: tuple[str, ...] = ()  # default: every subtask with a records file
    max_examples: int = 0  # per subtask, the first ones in file order; 0 = all
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024, temperature=0.0))
    rewards: dict[str, str] = field(default_factory=dict)  # subtask -> registered reward (default: subtasks.py)
    out_dir: str = "outputs/eval"
    batch_size: int = 16  # prompts per generate call
    reward_workers: int = 1  # 1: score in-process; 0: all cores
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rules: str = "fsdp"
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.split in SPLITS, "split", f"must be one of {SPLITS}")
        require(all(s in SUBTASKS for s in self.subtasks), "subtasks", f"each must be one of {SUBTASKS}")
        check_reward_names(self.rewards, SUBTASKS)
        require(self.max_examples >= 0, "max_examples", "must be >= 0")
        require(self.sampling.n == 1 or self.sampling.temperature > 0, "sampling.n",
                "greedy evaluation gives one response per record: n must be 1 at temperature 0")
        require(self.batch_size > 0, "batch_size", "must be > 0")
        require(self.reward_workers >= 0, "reward_workers", "must be >= 0")
        require(not (self.endpoint and self.answers), "answers", "give an endpoint or recorded answers, not both")


def load_eval_records(config: EvalConfig) -> list[TaskRecord]:
    require(bool(config.records_dir), "records_dir", "is required")
    for subtask in config.subtasks:  # a subtask asked for by name must have its file
        path = records_file(config.records_dir, config.split, subtask)
        if not path.is_file():
            raise FileNotFoundError(f"no records file {path}")
    records = read_split_records(config.records_dir, config.split, config.subtasks, config.max_examples)
    if not records:
        raise FileNotFoundError(f"no task records under {Path(config.records_dir) / config.split}")
    return records


def _policy_result(config: EvalConfig, records: list[TaskRecord]) -> Any:
    """Answers from the configured endpoint or recorded answers, scored (a missing answer is "")."""
    from swe_rl_jax.eval.on_records import score_answers
    from swe_rl_jax.policies import PolicyRequest, check_any_answered, derive_seed
    from swe_rl_jax.policies.config import PolicyConfig, make_policy

    policy_config = PolicyConfig(kind="http", http=config.endpoint) if config.endpoint is not None else \
        PolicyConfig(kind="jsonl", path=config.answers)
    sp = config.sampling
    requests = [PolicyRequest(r.task_id, tuple(r.messages), sp.n, sp.temperature, sp.max_new_tokens, sp.top_p,
                              tuple(sp.stop), derive_seed(config.seed, r.task_id), sp.top_k) for r in records]
    responses = make_policy(policy_config).generate(requests)
    check_any_answered(responses, "eval")
    answers = [(list(r.completions) + [""] * sp.n)[: sp.n] for r in responses]
    return score_answers(records, answers, rewards=config.rewards or None, num_workers=config.reward_workers)


def run_eval(config: EvalConfig) -> dict[str, Any]:
    """Generates, scores, prints the table and writes `out_dir/eval.json`; returns its content."""
    from swe_rl_jax.eval.on_records import evaluate
    from swe_rl_jax.parallel import get_rules, make_mesh
    from swe_rl_jax.model_source import load_policy, sampling_config

    records = load_eval_records(config)
    start = time.perf_counter()
    if config.endpoint is not None or config.answers:
        result = _policy_result(config, records)
    else:
        mesh, rules = make_mesh(config.mesh), get_rules(config.rules)
        model_config, params, tokenizer = load_policy(config.model, mesh, rules)
        sampling = dataclasses.replace(config.sampling, eos_ids=config.sampling.eos_ids or tokenizer.eos_ids)
        start = time.perf_counter()
        result = evaluate(sampling_config(model_config, config.model), params, tokenizer, records, sampling,
                          config.seed, rewards=config.rewards or None,
                          batch_size=config.batch_size, num_workers=config.reward_workers)
    seconds = time.perf_counter() - start
    report = {
        "config": to_dict(config),
        "num_records": len(records),
        "samples_per_record": config.sampling.n,
        "seconds": seconds,
        "summary": result.summary,
        "records": [
            {"task_id": r.task_id, "subtask": r.subtask, "instance_id": r.instance_id, "repo": r.repo,
             "outcome": o, "response": text}
            for r, o, text in zip(result.records, outcomes_to_json(result.outcomes), result.responses)
        ],
    }
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(table(result.summary, f"eval: {len(records)} records of {config.records_dir} ({config.split}), "
                                f"{seconds:.1f}s"))
    print(f"wrote {out / 'eval.json'}")
    return report
