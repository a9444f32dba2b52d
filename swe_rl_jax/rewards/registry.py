"""Rewards by name, so configs choose them with a string.

Every registered reward has the uniform signature `fn(meta, response) -> (score, info)`, where
`meta` is the example's metadata mapping (keys a reward does not use are ignored) and may raise:
callers go through `get_reward` (or `batch.score_batch`), which add the time limit and the
catch-all. A name may be qualified as "package.module:name": the module is imported first, so a
reward registered at import time of any importable module is reachable from a config and from
pool workers (which do not share the parent's in-memory registry under spawn/forkserver).

Built-in rewards and the `meta` keys they read:
  swe_rl, swe_rl_lenient, swe_rl_discrete  code_context, oracle_new_content
  sorft_edit, sorft_edit_similarity  code_context, oracle_new_content, beta (optional, 3.0)
  sorft_file, sorft_function, sorft_line  ground_truth, candidates, beta (optional, 3.0)
  sorft_file_strict, ...         the same; malformed answers score -1, not 0
  tests_pass                     code_context, instance_id, execution (rewards/execution.py)
  tests_pass_similarity          the same and oracle_new_content
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Collection, Mapping

from swe_rl_jax.rewards import edit, localization, swe_rl
from swe_rl_jax.rewards.fbeta import DEFAULT_BETA
from swe_rl_jax.rewards.limits import DEFAULT_TIME_LIMIT_S, RewardResult, run_guarded

RewardFn = Callable[[Mapping[str, Any], str], RewardResult]


@dataclasses.dataclass(frozen=True)
class RewardSpec:
    name: str
    fn: RewardFn
    min_score: float  # what timeouts and internal errors score


_REGISTRY: dict[str, RewardSpec] = {}


def register_reward(name: str, fn: RewardFn, min_score: float) -> None:
    """Adds a reward; re-registering a name replaces it (module reloads stay harmless)."""
    _REGISTRY[name] = RewardSpec(name, fn, float(min_score))


def get_reward_spec(name: str) -> RewardSpec:
    """The spec for `name` or "module:name"; KeyError listing the known names otherwise (also when
    the module of a "module:name" cannot be imported)."""
    module, sep, short = name.rpartition(":")
    if sep and short not in _REGISTRY:
        try:
            importlib.import_module(module)
        except (ImportError, ValueError) as e:  # ValueError: an empty module name
            raise KeyError(f"unknown reward {name!r}: cannot import module {module!r} ({e}); "
                           f"registered: {sorted(_REGISTRY)}") from None
    key = short if sep else name
    if key not in _REGISTRY:
        raise KeyError(f"unknown reward {name!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[key]


def reward_names() -> list[str]:
    return sorted(_REGISTRY)


def check_reward_names(rewards: Mapping[str, str], subtasks: Collection[str]) -> None:
    """Config-load check of a `subtask -> reward name` section: every key a subtask, every name
    registered (a "module:name" imports its module now). A misspelled name fails here, before
    any model loads, as a ConfigError naming the key."""
    from swe_rl_jax.config import require

    for subtask, name in rewards.items():
        require(subtask in subtasks, "rewards", f"keys must be subtasks {tuple(subtasks)}, got {subtask!r}")
        try:
            get_reward_spec(name)
        except (KeyError, ImportError) as e:
            require(False, f"rewards.{subtask}", str(e.args[0] if isinstance(e, KeyError) else e))


@dataclasses.dataclass(frozen=True)
class GuardedReward:
    """A registered reward made total: `(meta, response) -> (score, info)`, never raising."""

    spec: RewardSpec
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S

    def __call__(self, meta: Mapping[str, Any], response: str) -> RewardResult:
        return run_guarded(self.spec.min_score, self.time_limit_s, self.spec.fn, meta, response)


def get_reward(name: str, time_limit_s: float | None = DEFAULT_TIME_LIMIT_S) -> GuardedReward:
    return GuardedReward(get_reward_spec(name), time_limit_s)


# ------------------------------------------------------------------ built-ins


def _swe_rl(meta: Mapping[str, Any], response: str) -> RewardResult:
    return swe_rl.compute_swe_rl(meta["code_context"], meta["oracle_new_content"], response, False)


def _swe_rl_lenient(meta: Mapping[str, Any], response: str) -> RewardResult:
    return swe_rl.compute_swe_rl(meta["code_context"], meta["oracle_new_content"], response, False, fenced=False)


def _swe_rl_discrete(meta: Mapping[str, Any], response: str) -> RewardResult:
    return swe_rl.compute_swe_rl(meta["code_context"], meta["oracle_new_content"], response, True)


def _edit_reward(mode: str) -> RewardFn:
    def fn(meta: Mapping[str, Any], response: str) -> RewardResult:
        return edit.compute_edit(meta["code_context"], meta["oracle_new_content"], response, mode,
                          meta.get("beta", DEFAULT_BETA))
    return fn


def _localization_reward(subtask: str, malformed_score: float) -> RewardFn:
    def fn(meta: Mapping[str, Any], response: str) -> RewardResult:
        return localization.compute_localization(subtask, response, meta["ground_truth"],
                                          meta["candidates"], meta.get("beta", DEFAULT_BETA), malformed_score)
    return fn


register_reward("swe_rl", _swe_rl, swe_rl.SWE_RL_MIN_SCORE)
register_reward("swe_rl_lenient", _swe_rl_lenient, swe_rl.SWE_RL_MIN_SCORE)
register_reward("swe_rl_discrete", _swe_rl_discrete, swe_rl.SWE_RL_MIN_SCORE)
register_reward("sorft_edit", _edit_reward("lines"), edit.EDIT_MIN_SCORE)
register_reward("sorft_edit_similarity", _edit_reward("similarity"), edit.EDIT_MIN_SCORE)
def _execution_reward(with_similarity: bool) -> RewardFn:
    def fn(meta: Mapping[str, Any], response: str) -> RewardResult:
        # Imported on first use: only the execution rewards need the harness (and its imports).
        from swe_rl_jax.rewards import execution

        return execution.compute_execution(meta, response, with_similarity)
    return fn


register_reward("tests_pass", _execution_reward(False), swe_rl.SWE_RL_MIN_SCORE)
register_reward("tests_pass_similarity", _execution_reward(True), swe_rl.SWE_RL_MIN_SCORE)
for _subtask in localization.LEVELS:
    register_reward(f"sorft_{_subtask}", _localization_reward(_subtask, localization.LOCALIZATION_MIN_SCORE),
                    localization.LOCALIZATION_MIN_SCORE)
    register_reward(f"sorft_{_subtask}_strict", _localization_reward(_subtask, localization.STRICT_MALFORMED_SCORE),
                    localization.STRICT_MALFORMED_SCORE)
