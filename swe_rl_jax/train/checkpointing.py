"""Orbax checkpoints of the train state plus JSON metadata, made to survive preemption.

Each checkpoint step holds two items: `state` (the TrainState as a dict of arrays, saved with
`StandardSave`, asynchronously, every host writing its own shards) and `meta` (JSON: step,
data-iterator position, seed, config, whatever the loop adds). Restore takes the abstract state
of the *current* run (`state.abstract_train_state`), so a checkpoint written on one mesh loads
onto another: Orbax reads each device's slice for the target sharding.

Preemption: `PreemptionFlag` turns SIGTERM into a flag; the loop saves at the next step
boundary, waits for the write to finish, and exits cleanly. A SIGKILL (no warning) loses only
the steps since the last periodic save; Orbax commits a step atomically, so a half-written
checkpoint is never picked up.
"""
from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, Optional

import orbax.checkpoint as ocp

from swe_rl_jax.train.state import TrainState


def _as_dict(state: TrainState) -> dict[str, Any]:
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state, "rng": state.rng}


class Checkpointer:
    """A `CheckpointManager` keeping the newest `keep` checkpoints under `directory`."""

    def __init__(self, directory: str | Path, keep: int = 3, async_save: bool = True) -> None:
        self.directory = Path(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True
        )
        self._manager = ocp.CheckpointManager(
            Path(directory).absolute(), options=options, item_names=("state", "meta")
        )

    def latest_step(self) -> Optional[int]:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, step: int, state: TrainState, meta: dict[str, Any]) -> None:
        """Starts an (async) save of `state` and `meta` as checkpoint `step`. The arrays are
        copied before this returns, so `state` may be donated to the next train step."""
        self._manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(_as_dict(state)), meta=ocp.args.JsonSave(meta)),
            force=True,
        )

    def restore(self, abstract_state: TrainState, step: Optional[int] = None) -> tuple[TrainState, dict[str, Any]]:
        """(state, meta) of checkpoint `step` (default: the latest), placed per the shardings of
        `abstract_state` (ShapeDtypeStructs with `.sharding`)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self._manager.directory}")
        target = _as_dict(abstract_state)
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()),
        )
        return TrainState(**restored["state"]), dict(restored["meta"])

    def wait(self) -> None:
        """Blocks until pending async saves are committed."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


class PreemptionFlag:
    """Set by SIGTERM (the notice TPU/GPU schedulers give before preempting); the loop polls
    `is_set()` at step boundaries. `restore()` puts the previous handler back."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)) -> None:
        self._event = threading.Event()
        self._previous = {s: signal.signal(s, self._handle) for s in signals}

    def _handle(self, signum: int, frame: Any) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
