"""Agents need bwrap (harness/sandbox.py, `agent_isolation`; docs/AGENT.md, "Agents need bwrap"):
in namespaces or none mode a shell sees the host's files, among them sibling episodes' trees and
judges' checkouts with the hidden test patch. Every agent entry point refuses those modes, and auto
where bubblewrap does not work, with one line and before it makes anything. Not skipped without
bubblewrap: the refusal is what such a machine must show (the attacks themselves, in bubblewrap:
tests/test_agent_hostile.py, "concurrent runs")."""
from __future__ import annotations

from pathlib import Path

import pytest

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.judge import make_judge
from swe_rl_jax.cli import main as cli_main
from swe_rl_jax.config import ConfigError
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.harness import EnvironmentOptions, sandbox
from swe_rl_jax.harness.sandbox import agent_isolation
from swe_rl_jax.harness.workspace import Workspace

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"
REFUSED = "agent.isolation: agent episodes need bwrap isolation (in namespaces or none mode a shell reads"


@pytest.fixture
def no_bwrap(monkeypatch):
    """This machine as one without bubblewrap: auto falls back to namespaces (as root) or none."""
    monkeypatch.setattr(sandbox, "_bwrap_works", lambda: False)


def _one_line(message: str) -> str:
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("mode", ["namespaces", "none"])
def test_namespaces_and_none_are_refused_wherever_bwrap_works(mode, monkeypatch):
    monkeypatch.setattr(sandbox, "_bwrap_works", lambda: True)
    assert agent_isolation("auto") == agent_isolation("bwrap") == "bwrap"
    with pytest.raises(ConfigError) as e:
        agent_isolation(mode)
    message = _one_line(str(e.value))
    assert message.startswith(REFUSED) and f"not '{mode}'" in message and "apt-get install bubblewrap" in message


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
def test_auto_and_bwrap_are_refused_where_bwrap_does_not_work(mode, no_bwrap):
    with pytest.raises(ConfigError) as e:
        agent_isolation(mode)
    message = _one_line(str(e.value))
    assert message.startswith(REFUSED) and "does not work here" in message and "apt-get install bubblewrap" in message


def test_the_workspace_and_the_judge_refuse_before_making_anything(tmp_path):
    work = tmp_path / "work"
    with pytest.raises(ConfigError, match="^agent.isolation: "):
        with Workspace.open(tmp_path, "0" * 40, None, isolation="namespaces", work_dir=work):  # type: ignore[arg-type]
            pass
    assert not work.exists()
    with pytest.raises(ConfigError, match="^agent.isolation: "):
        make_judge(AgentConfig(isolation="none"), RepoLocator(str(tmp_path)), {}, EnvironmentOptions(), work)


def _resolve(tmp_path: Path, setting: str) -> list[str]:
    return ["resolve", "--scaffold", "agent", "--instances", str(SAMPLE / "instances.jsonl"), "--repos",
            str(tmp_path / "repos"), "--out", str(tmp_path / "out" / "preds.jsonl"), setting, "progress=false"]


def _agent_rl(tmp_path: Path, setting: str) -> list[str]:
    return ["agent-rl", f"out_dir={tmp_path / 'out'}", "sample=true", setting, "progress=false"]


@pytest.mark.parametrize("command", [_resolve, _agent_rl], ids=["resolve", "agent-rl"])
@pytest.mark.parametrize("mode", ["namespaces", "none", "auto without bwrap"])
def test_the_agent_commands_exit_2_with_one_line_and_write_nothing(command, mode, tmp_path, monkeypatch, capsys):
    if mode == "auto without bwrap":
        monkeypatch.setattr(sandbox, "_bwrap_works", lambda: False)
    (tmp_path / "repos").mkdir()
    assert cli_main(command(tmp_path, f"agent.isolation={mode.split()[0]}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {REFUSED}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repos"]  # no out dir, no sample clones, no checkpoint
