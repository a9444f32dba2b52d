"""A step's reward metrics against hand-counted values."""
from types import SimpleNamespace

import pytest

from swe_rl_jax.rl.policy_update import reward_metrics


def test_rates_and_components_by_hand():
    file, edit = SimpleNamespace(subtask="file_localization"), SimpleNamespace(subtask="edit_generation")
    payloads = [file, file, edit, edit]
    rewards = [1.0, 0.0, -1.0, 0.5]
    # One well-formed answer per subtask, one malformed one, one scored at the time limit.
    infos = [{"kind": "ok"}, {"kind": "timeout"}, {"kind": "no_blocks"}, {"kind": "ok"}]
    metrics = reward_metrics(payloads, rewards, infos)
    assert metrics["reward_timeout_rate"] == pytest.approx(1 / 4)
    assert metrics["tampered_rate"] == 0.0
    caught = reward_metrics(payloads, rewards, [*infos[:3], {"kind": "tampered"}])
    assert caught["tampered_rate"] == pytest.approx(1 / 4) and caught["format_error_rate"] == pytest.approx(3 / 4)
    assert metrics["format_error_rate"] == pytest.approx(2 / 4)  # a timeout is not well-formed either
    assert metrics["reward/file_localization"] == pytest.approx(0.5)
    assert metrics["reward/edit_generation"] == pytest.approx(-0.25)
