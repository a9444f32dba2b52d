"""Which reward scores which task record: the one bridge between data records and rewards.

Rejection sampling, RL and evaluation all score a decoded response against a record through
`reward_task(record, response)`, so a subtask is scored the same way everywhere. The default
reward of each subtask is in `swe_rl_jax/subtasks.py`.
"""
from __future__ import annotations

from typing import Any, Mapping

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.rewards import RewardTask
from swe_rl_jax.subtasks import DEFAULT_REWARDS, subtask


def reward_meta(record: TaskRecord) -> dict[str, Any]:
    """The keyword data every built-in reward reads (see rewards/registry.py)."""
    if subtask(record.subtask).answer == "edit":
        return {
            "code_context": record.context["code_context"],
            "oracle_new_content": record.ground_truth["oracle_new_content"],
            "instance_id": record.instance_id,
            "subtask": record.subtask,  # the answer format of the execution rewards
        }
    return {"ground_truth": record.ground_truth["items"], "candidates": record.candidates}


def reward_task(record: TaskRecord, response: str, rewards: Mapping[str, str] | None = None,
                extra_meta: Mapping[str, Any] | None = None) -> RewardTask:
    """`extra_meta`: run-level keys added to every record's metadata (e.g. the execution
    rewards' `execution` settings)."""
    name = (rewards or DEFAULT_REWARDS).get(record.subtask) or DEFAULT_REWARDS[record.subtask]
    return RewardTask(name, {**reward_meta(record), **(extra_meta or {})}, response)
