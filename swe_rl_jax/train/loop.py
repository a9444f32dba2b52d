"""The outer training loop shared by SFT and RL: steps, metrics, checkpoints, preemption.

Positions count batches consumed from the data; `make_batches(position)` must yield the batches
from that position on, deterministically (seeded by position), so a resumed run sees exactly
the batches an uninterrupted one would. The checkpoint id is the position (monotonic even when
a non-finite step applies no update); `state.step` counts applied updates.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Optional

import jax
from tqdm import tqdm

from swe_rl_jax.config import ConfigError, require
from swe_rl_jax.parallel.distributed import any_process
from swe_rl_jax.train.checkpointing import Checkpointer, PreemptionFlag
from swe_rl_jax.train.losses import Batch
from swe_rl_jax.train.metrics import MetricsWriter, host_memory_gb, mfu, peak_flops_per_device
from swe_rl_jax.train.state import TrainState
from swe_rl_jax.train.step import TrainStep

StopReason = Literal["done", "preempted", "diverged"]


@dataclass(frozen=True)
class LoopConfig:
    num_steps: int  # total batches of the run (a resumed run stops at the same place)
    save_every: int = 100
    log_every: int = 1
    max_bad_steps: int = 5  # consecutive non-finite steps that stop the run
    peak_flops_per_device: Optional[float] = None  # None: from the device kind when known
    progress: bool = True

    def __post_init__(self) -> None:
        require(self.num_steps > 0, "num_steps", "must be > 0")
        require(self.save_every > 0, "save_every", "must be > 0")
        require(self.log_every > 0, "log_every", "must be > 0")
        require(self.max_bad_steps > 0, "max_bad_steps", "must be > 0")


@dataclass
class LoopResult:
    state: TrainState
    position: int
    reason: StopReason
    skipped_steps: int = 0  # over the whole run, resumes included
    history: list[dict[str, float]] = field(default_factory=list)  # this invocation's steps
    # The losses of the run's first and last steps, also when this invocation resumed the run (or
    # had nothing left to do): checkpoints carry them in their meta under "run".
    first_loss: Optional[float] = None
    last_loss: Optional[float] = None


# Top-level config keys a resumed run may change: how long it runs, how it reports/saves, where
# its output lives (a run directory may be moved or copied) and which activations it recomputes
# to save memory (the same gradients: tests/test_rl_packing.py), not what it computes.
RESUME_MAY_CHANGE = frozenset({"num_steps", "progress", "save_every", "keep_checkpoints", "stop_after_steps",
                               "export", "eval_examples", "eval_max_new_tokens", "heldout", "out_dir",
                               "distributed", "remat", "memory_budget_gb"})


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, Mapping):
        return {k: v for key, sub in tree.items() for k, v in _flatten(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def check_resumable(directory: Any, saved: Mapping[str, Any], current: Mapping[str, Any],
                    may_change: frozenset[str] = RESUME_MAY_CHANGE) -> None:
    """Raises ConfigError when the checkpoint in `directory` was written under a config that
    differs from `current` beyond `may_change`: resuming it would silently splice two runs."""
    old, new = _flatten(saved), _flatten(json.loads(json.dumps(current)))
    differ = sorted(k for k in old.keys() | new.keys()
                    if old.get(k) != new.get(k) and k.split(".")[0] not in may_change)
    if differ:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in differ[:6])
        more = f" (+{len(differ) - 6} more)" if len(differ) > 6 else ""
        raise ConfigError(f"{directory} holds checkpoints of a run with another config ({shown}{more}); "
                          "resume with the same settings, or delete that directory / choose another out_dir")


def resume(
    checkpointer: Checkpointer, abstract_state: TrainState, init: Callable[[], TrainState],
    config: Optional[Mapping[str, Any]] = None,
) -> tuple[TrainState, int, dict[str, Any]]:
    """(state, position, meta) from the latest checkpoint, or (init(), 0, {}) without one.
    config: this run's config (as saved in meta["config"]); a checkpoint written under a
    different one is refused (`check_resumable`)."""
    if checkpointer.latest_step() is None:
        return init(), 0, {}
    state, meta = checkpointer.restore(abstract_state)
    if config is not None and "config" in meta:
        check_resumable(checkpointer.directory, meta["config"], config)
    return state, int(meta["position"]), meta


def train_loop(
    state: TrainState,
    train_step: TrainStep,
    make_batches: Callable[[int], Iterator[Batch]],
    config: LoopConfig,
    *,
    start_position: int = 0,
    checkpointer: Optional[Checkpointer] = None,
    writer: Optional[MetricsWriter] = None,
    meta: Optional[dict[str, Any]] = None,
    resumed_meta: Optional[Mapping[str, Any]] = None,
    tokens_per_batch: Optional[int] = None,
    flops_per_batch: Optional[float] = None,
) -> LoopResult:
    """Runs batches `start_position .. config.num_steps - 1`. Saves every `save_every`
    positions, at the end, and at the first step boundary after SIGTERM; stops early after
    `max_bad_steps` non-finite steps in a row. `meta` (e.g. the config) goes into every
    checkpoint alongside the position and the run-level values (first loss, skipped steps);
    `resumed_meta` is the meta of the checkpoint this run resumes from (`resume`), whose run-level
    values carry on."""
    peak = config.peak_flops_per_device or peak_flops_per_device()
    preemption = PreemptionFlag()
    run = dict((resumed_meta or {}).get("run", {}))
    position, bad_in_row, skipped = start_position, 0, int(run.get("skipped_steps", 0))
    result_reason: StopReason = "done"
    history: list[dict[str, float]] = []
    bar = tqdm(total=config.num_steps, initial=position, disable=not config.progress, dynamic_ncols=True)

    def save() -> None:
        if checkpointer is not None:
            checkpointer.save(position, state, {**(meta or {}), "position": position, "step": int(state.step),
                                                "run": {**run, "skipped_steps": skipped}})

    try:
        batches = make_batches(position)
        while position < config.num_steps:
            batch = next(batches)
            start = time.perf_counter()
            state, metrics = train_step(state, batch)
            host = {k: float(v) for k, v in jax.device_get(metrics).items()}  # waits for the step
            seconds = time.perf_counter() - start
            position += 1
            if host["finite"]:
                bad_in_row = 0
            else:
                bad_in_row, skipped = bad_in_row + 1, skipped + 1
            host.update(step_seconds=seconds, skipped_steps=skipped, **host_memory_gb())
            if tokens_per_batch:
                host["tokens_per_second"] = tokens_per_batch / seconds
            if flops_per_batch:
                host["mfu"] = mfu(flops_per_batch, seconds, jax.device_count(), peak)
            history.append(host)
            run.setdefault("first_loss", host["loss"])
            run["last_loss"] = host["loss"]
            if writer is not None and position % config.log_every == 0:
                writer.write(position, host)
            bar.update(1)
            bar.set_postfix(loss=f"{host['loss']:.4f}", gnorm=f"{host['grad_norm']:.3g}", refresh=False)
            if bad_in_row >= config.max_bad_steps:
                result_reason = "diverged"
                break
            if any_process(preemption.is_set()):  # every host saves at the same position
                save()
                result_reason = "preempted"
                break
            if position % config.save_every == 0 or position == config.num_steps:
                save()
    finally:
        bar.close()
        preemption.restore()
        if checkpointer is not None:
            checkpointer.wait()
    return LoopResult(state, position, result_reason, skipped, history, run.get("first_loss"), run.get("last_loss"))
