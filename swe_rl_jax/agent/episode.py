"""One episode on the model's side: the conversation, its turns and how it ended, and the trajectory
row it is kept as (docs/AGENT.md, "Trajectories"). No sandbox, no policy: the driver
(agent/driver.py) feeds it answers and observations.

The history is mini-swe-agent's: one linear list of messages (system, the task, then per turn the
model's answer and the observation: a command's output, or a format error). A turn is one model
call; `step_limit` counts them all, format errors included (mini-swe-agent's `n_calls`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from swe_rl_jax.agent.actions import BashAction, FormatError, parse_bash_turn
from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.environment import Observation, render
from swe_rl_jax.agent.tokens import EpisodeTokens, observation_ids
from swe_rl_jax.policies import PolicyRequest, PolicyResponse, derive_seed
from swe_rl_jax.policies.http import estimate_tokens
from swe_rl_jax.rewards.parsers import after_think
from swe_rl_jax.tokenizer import ChatTokenizer

# How an episode ended. submitted: a command printed the marker (the patch is the tree's diff);
# step_limit, format_errors (consecutive), context_limit (the conversation's estimated tokens, or
# the policy did not send the prompt: too long for the model), command_budget: the episode's limits
# (no patch, as mini-swe-agent's LimitsExceeded); policy_error: the policy gave no answer; setup_error:
# the work tree could not be made (these two are the policy's or the harness's failures, not the
# agent's: `resolve` does not keep them, so a rerun tries again); diff_failed: the submitted tree's diff could not be computed (over
# its byte limit, say); internal_error: a crash of the episode.
EXIT_STATUSES = ("submitted", "step_limit", "format_errors", "context_limit", "command_budget", "policy_error",
                 "setup_error", "diff_failed", "internal_error")


def task_id(instance_id: str, sample: int) -> str:
    """The policy's task id of an episode's turns (recorded answers are keyed by it; turn i is the
    request's `first`)."""
    return f"{instance_id}/agent/{sample}"


@dataclasses.dataclass
class Episode:
    instance_id: str
    sample: int
    config: AgentConfig
    messages: list[dict[str, str]] = dataclasses.field(default_factory=list)
    turns: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    exit_status: str = ""
    error: str = ""
    patch: str = ""
    verdict: Optional[dict[str, Any]] = None
    consecutive_format_errors: int = 0
    seconds: dict[str, float] = dataclasses.field(default_factory=lambda: {"setup": 0.0, "policy": 0.0,
                                                                             "commands": 0.0, "submission": 0.0})
    # With a tokenizer (the in-process sampler's), the episode is kept as token ids too (agent/tokens.py):
    # each prompt is `tokens.ids`, never the conversation rendered and tokenized again.
    tokenizer: Optional[ChatTokenizer] = None
    tokens: Optional[EpisodeTokens] = None
    _turn_start: Optional[tuple[list[dict[str, str]], str, Any]] = None  # (messages before, answer, Sampled)

    @property
    def done(self) -> bool:
        return bool(self.exit_status)

    @property
    def format_errors(self) -> int:
        return sum(t["format_error"] for t in self.turns)

    def counts(self) -> dict[str, Any]:
        """The trajectory's `counts`."""
        commands = [t for t in self.turns if "command" in t]
        return {"turns": len(self.turns), "format_errors": self.format_errors, "commands": len(commands),
                "timed_out_commands": sum(bool(t.get("timed_out")) for t in commands),
                "command_cpu_seconds": round(sum(t.get("cpu_seconds", 0.0) for t in commands), 3)}

    def end(self, status: str, error: str = "") -> None:
        assert status in EXIT_STATUSES, status
        if not self.exit_status:
            self.exit_status, self.error = status, error

    def start(self, task: str) -> None:
        self.messages = [{"role": "system", "content": render(self.config.system_template)},
                         {"role": "user", "content": task}]
        if self.tokenizer is not None:
            self.tokens = EpisodeTokens.start(self.tokenizer, self.messages)

    def _context_tokens(self) -> int:
        return len(self.tokens.ids) if self.tokens is not None else estimate_tokens(self.messages)

    def _observe(self, text: str) -> None:
        """Appends an observation (a command's, or a format error's) to the messages and the tokens."""
        if self.tokens is not None and self._turn_start is not None:
            before, answer, sampled = self._turn_start
            self.tokens.add_observation(observation_ids(self.tokenizer, before, answer, sampled, text))
        self._turn_start = None
        self.messages.append({"role": "user", "content": text})

    def limit_before_turn(self) -> bool:
        """Ends the episode when a limit keeps it from another turn; True when it did."""
        if 0 < self.config.step_limit <= len(self.turns):
            self.end("step_limit", f"{len(self.turns)} turns")
        elif 0 < self.config.max_context_tokens < self._context_tokens():
            self.end("context_limit", f"{'' if self.tokens else 'about '}{self._context_tokens()} tokens > "
                                      f"max_context_tokens {self.config.max_context_tokens}")
        return self.done

    def request(self, seed: int) -> PolicyRequest:
        """The next turn's question: the whole conversation."""
        sp = self.config.sampling
        turn = len(self.turns)
        return PolicyRequest(task_id(self.instance_id, self.sample), tuple(self.messages), 1, sp.temperature,
                             sp.max_new_tokens, sp.top_p, tuple(sp.stop),
                             derive_seed(seed, self.instance_id, self.sample, turn), sp.top_k, first=turn,
                             prompt_ids=tuple(self.tokens.ids) if self.tokens is not None else ())

    def answered(self, response: PolicyResponse, seconds: float) -> Optional[BashAction]:
        """Takes the policy's answer: the action to run, or None (a format error, whose message is the
        next observation, or the end of the episode)."""
        self.seconds["policy"] += seconds
        if response.skipped:
            self.end("context_limit", response.skipped)
            return None
        if not response.completions:
            self.end("policy_error", response.error or "no answer")
            return None
        answer = response.completions[0]
        if self.tokens is not None:
            if not response.samples:
                self.end("policy_error", "the policy returned no token ids for a token-exact episode")
                return None
            self.tokens.add_sampled(response.samples[0])
            self._turn_start = (list(self.messages), answer, response.samples[0])
        self.messages.append({"role": "assistant", "content": answer})
        parsed = parse_bash_turn(after_think(answer), self.config.languages)
        turn: dict[str, Any] = {"answer": answer, "policy_seconds": round(seconds, 3)}
        self.turns.append(turn)
        if isinstance(parsed, FormatError):
            turn["format_error"] = True
            self.consecutive_format_errors += 1
            self._observe(parsed.message)
            if 0 < self.config.max_consecutive_format_errors <= self.consecutive_format_errors:
                self.end("format_errors", f"{self.consecutive_format_errors} consecutive format errors")
            return None
        self.consecutive_format_errors = 0
        turn.update(format_error=False, command=parsed.command)
        return parsed

    def observed(self, observation: Observation) -> None:
        self._observe(observation.text)
        self.turns[-1].update(returncode=observation.returncode, output_chars=observation.output_chars,
                              timed_out=observation.timed_out, seconds=round(observation.seconds, 3),
                              cpu_seconds=round(observation.cpu_seconds, 3), submitted=observation.submitted,
                              limit=observation.limit)
        self.seconds["commands"] += observation.seconds
        if observation.budget_spent and not observation.submitted:
            self.end("command_budget", f"the episode's commands used over {self.config.episode_command_s:g} CPU s")

    def to_json(self) -> dict[str, Any]:
        """The trajectory row (docs/AGENT.md, "Trajectories")."""
        return {
            "instance_id": self.instance_id, "sample": self.sample, "exit_status": self.exit_status,
            "error": self.error, "patch": self.patch, "verdict": self.verdict, "counts": self.counts(),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "turns": self.turns, "messages": self.messages,
            "tokens": self.tokens.to_json() if self.tokens is not None else None,
        }
