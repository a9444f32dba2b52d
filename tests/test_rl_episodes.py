"""Agent episodes as GRPO rows (rl/episodes.py): leave-one-out advantages with compact filtering,
by hand, and the rows' alignment. The trainer's log-probs on such rows: tests/test_agent_tokens.py."""
from __future__ import annotations

import numpy as np
import pytest

from swe_rl_jax.rl.episodes import (COMPACT_FILTERED, build_episode_batch, episode_metrics, episode_reward,
                                    informative_groups, kept_for_loss, loo_advantages)


def test_leave_one_out_advantages_by_hand_with_compact_filtering():
    rewards = [[1, 0, 0, 1], [1, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    kept = [[True] * 4, [True, True, False, True], [True, False, False, False], [True] * 4]
    adv = loo_advantages(rewards, kept)
    np.testing.assert_allclose(adv[0], [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])  # minus the mean of the other three
    # The filtered episode (reward 1 but ended by a limit) is neither trained on nor in the baseline.
    np.testing.assert_allclose(adv[1], [1 - 0, 0 - 0.5, 0, 0 - 0.5])
    assert adv[2] == [0, 0, 0, 0]  # one kept episode: no baseline
    assert adv[3] == [0, 0, 0, 0]  # nothing to tell apart
    assert {s for s in ("submitted", "format_errors", "step_limit", "context_limit", "command_budget", "policy_error")
            if not kept_for_loss(s)} == COMPACT_FILTERED == {"step_limit", "context_limit", "command_budget"}
    # Without compact filtering every episode trains, one cut by a limit as a failure (reward 0): in
    # group [resolved, step_limit] the unsubmitted episode now gets the negative advantage.
    assert all(kept_for_loss(s, compact_filtering=False) for s in COMPACT_FILTERED | {"submitted"})
    # A set-up failure (a Ray worker lost past its retries, mid-episode) is the harness's: never trained on.
    assert not kept_for_loss("setup_error") and not kept_for_loss("setup_error", compact_filtering=False)
    np.testing.assert_allclose(loo_advantages([[1, 0]], [[kept_for_loss(s, False) for s in ("submitted", "step_limit")]]),
                               [[1, -1]])
    assert episode_reward({"verdict": {"resolved": True}}) == 1.0
    assert episode_reward({"verdict": None}) == 0.0 == episode_reward({"verdict": {"resolved": False}})


def test_a_caught_forgery_costs_as_a_malformed_answer_does():
    # Caught tampering scores -1 whatever the similarity mix would pay (a forger's diff may copy the
    # oracle's lines), below the 0 of an honest wrong answer; the metrics count it by hand: 1 of 4.
    tampered = {"resolved": False, "error": "tampered", "similarity": 0.9}
    assert episode_reward({"verdict": tampered}) == -1.0 == episode_reward({"verdict": tampered}, 0.5)
    rows = [{"exit_status": "submitted", "counts": {"turns": 2, "format_errors": 0}, "verdict": v}
            for v in (tampered, {"resolved": True, "error": None}, {"resolved": False, "error": "timeout"}, None)]
    metrics = episode_metrics([rows[:2], rows[2:]])
    assert metrics["tampered_rate"] == 0.25 and metrics["resolved_rate"] == 0.25


def test_dynamic_samplings_filter_looks_at_the_episodes_the_loss_keeps():
    # By hand: a group carries signal when two kept episodes earn different rewards.
    rewards = [[1, 0], [1, 1], [0, 1, 1, 1], [1, 0, 1, 1], [0.25, 0.25, 0.5], [1, 0]]
    kept = [[True, True], [True, True], [False, True, True, True], [True, True, False, False], [True] * 3,
            [True, False]]
    # The third group's only differing episode was cut by a limit (filtered): nothing to learn, though
    # its raw rewards differ (DAPO's filter on rewards alone would keep it); the last has one kept episode.
    assert informative_groups(rewards, kept) == [True, False, False, True, True, False]
    assert informative_groups([[0, 0, 0, 0]], [[True] * 4]) == [False]


def test_episode_rows_put_the_loss_on_the_positions_that_predict_sampled_tokens():
    a = {"ids": [10, 11, 12, 13, 14, 15, 16], "mask": [0, 0, 1, 1, 0, 1, 0],
         "logprobs": [0, 0, -0.5, -0.25, 0, -2.0, 0]}
    b = {"ids": [20, 21, 22], "mask": [0, 1, 1], "logprobs": [0, -1.0, -3.0]}
    batch = build_episode_batch([a, b], pad_id=0, kept=[True, False], min_length=8)
    assert batch.tokens.shape == (2, 8)
    # The row ends at the last sampled token (15): the observation after it (16) carries no loss.
    assert batch.tokens[0].tolist() == [10, 11, 12, 13, 14, 15, 0, 0] and batch.tokens[1].tolist() == [20, 21, 22] + [0] * 5
    # Position s predicts token s + 1.
    assert batch.loss_mask[0].tolist() == [0, 1, 1, 0, 1, 0, 0, 0]
    assert batch.logp_sampler[0].tolist() == [0, -0.5, -0.25, 0, -2.0, 0, 0, 0]
    assert batch.loss_mask[1].tolist() == [0] * 8  # not kept: compact filtering
    assert batch.logp_sampler[1].tolist()[:2] == [-1.0, -3.0]
    assert batch.result_index[0].tolist() == [-1, 0, 0, -1, 0, -1, -1, -1]
    np.testing.assert_array_equal(batch.per_token(np.array([2.0, 5.0]))[0], [0, 2, 2, 0, 2, 0, 0, 0])
    assert batch.response_lengths.tolist() == [3, 2]
    with pytest.raises(ValueError, match="one length"):
        build_episode_batch([{"ids": [1, 2], "mask": [0], "logprobs": [0, 0]}], pad_id=0)
    # An episode without a sampled token keeps an empty row without loss, and rows are padded with
    # such rows to the row multiple (minibatches x micro-batches x batch shards): 3 episodes -> 4 rows.
    empty = {"ids": [], "mask": [], "logprobs": []}
    padded = build_episode_batch([a, empty, b], pad_id=0, row_multiple=2, min_length=8)
    assert padded.tokens.shape == (4, 8) and padded.loss_mask[1:].sum() == 2 and padded.loss_mask[0].sum() == 3
    assert not padded.tokens[1].any() and not padded.tokens[3].any() and (padded.result_index[3] == -1).all()
    assert padded.response_lengths.tolist() == [3, 0, 2, 0]


def test_the_reward_mix_and_swe_rls_similarity_of_two_diffs_against_difflib():
    import difflib

    from swe_rl_jax.rewards.swe_rl import diff_similarity

    base = {"m.py": "a = 1\nb = 2\nc = 3\n"}
    oracle = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 20\n c = 3\n"
    pred = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a = 1\n b = 2\n-c = 3\n+c = 4\n"

    def normalized(new: str) -> str:  # SWE-RL's: a unified diff with 3 lines of context, from the first @@
        return "\n".join(list(difflib.unified_diff(base["m.py"].splitlines(), new.splitlines(), lineterm=""))[2:])

    expected = difflib.SequenceMatcher(None, normalized("a = 1\nb = 2\nc = 4\n"), normalized("a = 1\nb = 20\nc = 3\n"),
                                       autojunk=False).ratio()
    assert 0 < expected < 1 and diff_similarity(base, oracle, pred) == pytest.approx(expected, abs=1e-12)
    assert diff_similarity(base, oracle, oracle) == 1.0
    assert diff_similarity(base, oracle, "") == 0.0 == diff_similarity(base, oracle, "not a diff\n")
    # A new file the oracle does not touch: the mean over the files either side touches.
    new_file = pred + "--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x = 1\n"
    assert diff_similarity(base, oracle, new_file) == pytest.approx(expected / 2, abs=1e-12)
    # A diff that grows its files past the single-turn reward's cap on an edit, in all, scores 0
    # without being compared; one within the cap is compared (2,000-line files, by difflib).
    from swe_rl_jax.rewards import MAX_EDITED_FILE_CHARS

    def adding(path: str, lines: int) -> str:
        return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{lines} @@\n" + "".join(f"+{path} {i}\n" for i in range(lines))

    huge = MAX_EDITED_FILE_CHARS // 20  # lines of 9 to 14 characters: each file under the cap, both over it
    sizes = [sum(len(f"{path} {i}\n") for i in range(huge)) for path in ("n0.txt", "n1.txt")]
    assert max(sizes) < MAX_EDITED_FILE_CHARS < sum(sizes)
    assert diff_similarity(base, oracle, pred + adding("n0.txt", huge) + adding("n1.txt", huge)) == 0.0
    assert diff_similarity(base, oracle, pred + adding("n0.txt", 2000)) == pytest.approx(expected / 2, abs=1e-12)
    verdict = {"resolved": False, "similarity": 0.5}
    assert episode_reward({"verdict": verdict}, 0.25) == 0.125 and episode_reward({"verdict": verdict}) == 0.0
    assert episode_reward({"verdict": {**verdict, "resolved": True}}, 0.25) == 0.875
