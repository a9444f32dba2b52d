"""The outer training loop shared by SFT and RL: steps, metrics, checkpoints, preemption.

Positions count batches consumed from the data; `make_batches(position)` must yield the batches
from that position on, deterministically (seeded by position), so a resumed run sees exactly
the batches an uninterrupted one would. The checkpoint id is the position (monotonic even when
a non-finite step applies no update); `state.step` counts applied updates.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Optional

import jax
from tqdm import tqdm

from swe_rl_jax.config import require
from swe_rl_jax.train.checkpointing import Checkpointer, PreemptionFlag
from swe_rl_jax.train.losses import Batch
from swe_rl_jax.train.metrics import MetricsWriter, mfu, peak_flops_per_device
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
    skipped_steps: int = 0
    history: list[dict[str, float]] = field(default_factory=list)


def resume(
    checkpointer: Checkpointer, abstract_state: TrainState, init: Callable[[], TrainState]
) -> tuple[TrainState, int, dict[str, Any]]:
    """(state, position, meta) from the latest checkpoint, or (init(), 0, {}) without one."""
    if checkpointer.latest_step() is None:
        return init(), 0, {}
    state, meta = checkpointer.restore(abstract_state)
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
    tokens_per_batch: Optional[int] = None,
    flops_per_batch: Optional[float] = None,
) -> LoopResult:
    """Runs batches `start_position .. config.num_steps - 1`. Saves every `save_every`
    positions, at the end, and at the first step boundary after SIGTERM; stops early after
    `max_bad_steps` non-finite steps in a row. `meta` (e.g. the config) goes into every
    checkpoint alongside the position."""
    peak = config.peak_flops_per_device or peak_flops_per_device()
    preemption = PreemptionFlag()
    position, bad_in_row, skipped = start_position, 0, 0
    result_reason: StopReason = "done"
    history: list[dict[str, float]] = []
    bar = tqdm(total=config.num_steps, initial=position, disable=not config.progress, dynamic_ncols=True)

    def save() -> None:
        if checkpointer is not None:
            checkpointer.save(position, state, {**(meta or {}), "position": position, "step": int(state.step)})

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
            host.update(step_seconds=seconds, skipped_steps=skipped)
            if tokens_per_batch:
                host["tokens_per_second"] = tokens_per_batch / seconds
            if flops_per_batch:
                host["mfu"] = mfu(flops_per_batch, seconds, jax.device_count(), peak)
            history.append(host)
            if writer is not None and position % config.log_every == 0:
                writer.write(position, host)
            bar.update(1)
            bar.set_postfix(loss=f"{host['loss']:.4f}", gnorm=f"{host['grad_norm']:.3g}", refresh=False)
            if bad_in_row >= config.max_bad_steps:
                result_reason = "diverged"
                break
            if preemption.is_set():
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
    return LoopResult(state, position, result_reason, skipped, history)
