"""The batched driver of `resolve`: instances in chunks, each stage's questions of a chunk asked
in one `Policy.generate` call (docs/EVAL.md).

Every instance of a chunk runs its stages (resolve/stages.py) up to its next question; the
questions of all of them (whatever stage each has reached; an instance that fell back simply has
none in that stage) go to the policy together, the answers go back, and so on until the chunk is
done; then its rows are written in input order. The continuous-batching sampler thus sees a
chunk's prompts at once, and an endpoint has as many requests in flight as its `concurrency`
allows. Each request is seeded from (seed, instance id, stage): an instance's answers do not depend
on the other instances, the chunk size, `limit` or the shard.

No silent failures: a request the policy failed is counted per stage and named in the instance's
trace (`errors`; a prompt not sent, say too long for the model's context, under `skipped`), and the
stage falls back as for an unparseable answer; when every request of a stage in a batch failed,
the run stops with the first error (PolicyError).
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

from swe_rl_jax.data.sources import GitError, Instance, Snapshot
from swe_rl_jax.policies import Policy, PolicyRequest, PolicyResponse, check_any_answered, derive_seed
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.stages import resolve_steps
from swe_rl_jax.resolve.steps import Ask, Question, Resolution, Steps
from swe_rl_jax.sampling import SamplingParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageSampling:
    """How each stage samples: `localization` for file, function and line (`line` for line when
    set) and for the regression selection (`regression_selection` when set), `repair` for repair,
    `reproduction` for reproduction (the n of a request is its Ask's). In the stages of
    `greedy_first`, the first sample of each Ask is greedy and the others use the stage's
    temperature (Agentless's 1 greedy + 9 at 0.8 per repair): one Ask becomes two requests, the
    greedy sample `first` and the sampled `first + 1 ..`, so every sample keeps its own seed."""

    localization: SamplingParams
    repair: SamplingParams
    reproduction: SamplingParams
    greedy_first: tuple[str, ...] = ()
    line: Optional[SamplingParams] = None  # the line stage's, when not `localization`'s
    regression_selection: Optional[SamplingParams] = None  # the regression selection's, when not `localization`'s

    def params(self, stage: str) -> SamplingParams:
        return {"repair": self.repair, "reproduction": self.reproduction, "line": self.line or self.localization,
                "regression_selection": self.regression_selection or self.localization}.get(stage, self.localization)

    def requests(self, instance_id: str, ask: Ask, seed: int) -> list[PolicyRequest]:
        """The requests of one Ask, whose answers in order are the Ask's."""
        sp = self.params(ask.stage)
        whole = PolicyRequest(f"{instance_id}/{ask.stage}", tuple(ask.messages), ask.n, sp.temperature,
                              sp.max_new_tokens, sp.top_p, tuple(sp.stop), derive_seed(seed, instance_id, ask.stage),
                              sp.top_k, ask.first)
        if ask.stage not in self.greedy_first or sp.greedy:
            return [whole]
        greedy = replace(whole, n=1, temperature=0.0)
        return [greedy] + ([replace(whole, n=ask.n - 1, first=ask.first + 1)] if ask.n > 1 else [])


def merge_responses(parts: Sequence[PolicyResponse]) -> PolicyResponse:
    """One Ask's response from those of its requests, answers in request order."""
    return PolicyResponse(parts[0].task_id, tuple(c for p in parts for c in p.completions),
                          "; ".join(dict.fromkeys(p.error for p in parts if p.error)),
                          next((p.skipped for p in parts if p.skipped), ""))


@dataclass
class Counts:
    """Requests per stage: sent, failed (the policy gave no answer), skipped (not sent)."""

    requests: collections.Counter = field(default_factory=collections.Counter)
    failed: collections.Counter = field(default_factory=collections.Counter)
    skipped: collections.Counter = field(default_factory=collections.Counter)
    generate_calls: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"requests": dict(sorted(self.requests.items())), "failed": dict(sorted(self.failed.items())),
                "skipped": dict(sorted(self.skipped.items())), "generate_calls": self.generate_calls}


# A started instance: its steps, or its final Resolution when it cannot start (no repository...).
Started = Steps[Resolution] | Resolution


def _git_error(instance_id: str, e: GitError) -> Resolution:
    log.warning("%s: %s", instance_id, e)
    return Resolution(instance_id, "", "git_error")


def resolve_chunk(started: Sequence[tuple[str, Started]], policy: Policy, sampling: StageSampling, seed: int,
                  counts: Counts, on_round: Optional[Callable[[dict[str, int]], None]] = None,
                  on_done: Optional[Callable[[], None]] = None) -> list[Resolution]:
    """The Resolutions of one chunk, in order: its instances' questions asked together, round by round.
    Progress, for a bar: `on_round(questions per stage)` before each round goes to the policy,
    `on_done()` as each instance finishes (its steps, test runs included, are over)."""
    done: list[Optional[Resolution]] = [None] * len(started)
    asks: dict[int, Question] = {}
    errors: list[dict[str, str]] = [{} for _ in started]
    skipped: list[dict[str, str]] = [{} for _ in started]

    def finish(k: int, res: Resolution) -> None:
        done[k] = res
        if on_done is not None:
            on_done()

    def advance(k: int, step: Callable[[], Question]) -> None:
        try:
            asks[k] = step()
        except StopIteration as finished:
            finish(k, finished.value)
        except GitError as e:
            finish(k, _git_error(started[k][0], e))

    for k, (_, run) in enumerate(started):
        if isinstance(run, Resolution):
            finish(k, run)
        else:
            advance(k, lambda run=run: next(run))
    while asks:
        # Every Ask of every waiting instance, each as one or more requests (greedy_first).
        flat = [(k, ask) for k, q in asks.items() for ask in ((q,) if isinstance(q, Ask) else q)]
        if on_round is not None:
            on_round(dict(collections.Counter(ask.stage for _, ask in flat)))
        parts = [sampling.requests(started[k][0], ask, seed) for k, ask in flat]
        got = iter(policy.generate([r for p in parts for r in p]))
        counts.generate_calls += 1
        responses = [merge_responses([next(got) for _ in p]) for p in parts]
        by_stage: dict[str, list[PolicyResponse]] = collections.defaultdict(list)
        answers: dict[int, list[list[str]]] = collections.defaultdict(list)
        for (k, ask), response in zip(flat, responses):
            by_stage[ask.stage].append(response)
            counts.requests[ask.stage] += 1
            if response.skipped:
                counts.skipped[ask.stage] += 1
                skipped[k][ask.stage] = response.skipped
            elif response.error:
                counts.failed[ask.stage] += response.failed
                errors[k][ask.stage] = response.error
            answers[k].append(list(response.completions))
        for stage, stage_responses in by_stage.items():
            check_any_answered(stage_responses, stage)
        for k, got_k in answers.items():
            run, question = started[k][1], asks.pop(k)
            reply = got_k[0] if isinstance(question, Ask) else got_k
            advance(k, lambda run=run, reply=reply: run.send(reply))
    for k, res in enumerate(done):
        res.errors.update(errors[k])
        res.skipped.update(skipped[k])
    return done


def start(inst: Instance, snapshot: Callable[[Instance], Snapshot | Resolution], options: AgentlessOptions) -> Started:
    """The instance's steps, or its Resolution when its repository or commit cannot be read."""
    try:
        view = snapshot(inst)
    except GitError as e:
        return _git_error(inst.instance_id, e)
    return view if isinstance(view, Resolution) else resolve_steps(inst, view, options)
