"""Host-side rewards and answer parsers for SoRFT and SWE-RL (docs/REWARDS.md).

Every reward returns `(score, info)` with a JSON-serialisable `info` whose `kind` says what
happened; no response string makes a reward raise or run past its time limit.
"""
from swe_rl_jax.rewards.batch import (
    RewardPool,
    RewardTask,
    WorkerStartError,
    score_batch,
    score_task,
)
from swe_rl_jax.rewards.diffs import (
    changed_line_items,
    changed_old_lines,
    git_diff,
    normalized_patch,
    normalized_patches,
    split_git_lines,
)
from swe_rl_jax.rewards.edit import EDIT_MODES, edit_reward
from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.fbeta import DEFAULT_BETA, fbeta, overlap_info
from swe_rl_jax.rewards.limits import (
    DEFAULT_TIME_LIMIT_S,
    MAX_EDITED_FILE_CHARS,
    MAX_RESPONSE_CHARS,
    RewardTimeout,
    run_guarded,
    time_limit,
)
from swe_rl_jax.rewards.localization import LEVELS, localization_reward, normalize_item
from swe_rl_jax.rewards.parsers import (
    FileList,
    FunctionLocations,
    LineLocations,
    ThinkSolution,
    after_think,
    answer_region,
    last_fenced_block,
    normalize_path,
    parse_file_list,
    parse_function_locations,
    parse_line_locations,
    parse_think_solution,
)
from swe_rl_jax.rewards.registry import (
    GuardedReward,
    RewardSpec,
    check_reward_names,
    get_reward,
    get_reward_spec,
    register_reward,
    reward_names,
)
from swe_rl_jax.rewards.search_replace import (
    EditResult,
    SearchReplaceBlock,
    SearchReplaceEdits,
    apply_search_replace,
    parse_search_replace,
)
from swe_rl_jax.rewards.similarity import longest_match, sequence_ratio
from swe_rl_jax.rewards.swe_rl import patch_similarity, swe_rl_discrete_reward, swe_rl_reward

__all__ = [
    "DEFAULT_BETA", "DEFAULT_TIME_LIMIT_S", "EDIT_MODES", "MAX_EDITED_FILE_CHARS",
    "MAX_RESPONSE_CHARS", "LEVELS", "EditResult", "FileList", "FormatError",
    "FunctionLocations", "GuardedReward", "LineLocations", "RewardPool", "RewardSpec",
    "RewardTask", "RewardTimeout", "SearchReplaceBlock", "SearchReplaceEdits", "ThinkSolution",
    "WorkerStartError", "after_think", "answer_region", "apply_search_replace", "changed_line_items",
    "changed_old_lines", "check_reward_names", "edit_reward", "fbeta", "get_reward", "get_reward_spec", "git_diff",
    "last_fenced_block", "localization_reward", "longest_match", "normalize_item", "normalize_path",
    "normalized_patch", "normalized_patches", "overlap_info", "parse_file_list",
    "parse_function_locations", "parse_line_locations", "parse_search_replace",
    "parse_think_solution", "patch_similarity", "register_reward", "reward_names", "run_guarded",
    "score_batch", "score_task", "sequence_ratio", "split_git_lines", "swe_rl_discrete_reward",
    "swe_rl_reward", "time_limit",
]
