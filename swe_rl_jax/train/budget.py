"""Activation checkpointing chosen by a memory budget: compile a train step under the cheapest
remat policy whose compiled peak fits, read from XLA's own buffer assignment
(`compiled.memory_analysis()`, the numbers `plan-memory` reports)."""
from __future__ import annotations

import os
from typing import Any, Callable, Literal

import jax
import numpy as np
from jax.experimental import multihost_utils

from swe_rl_jax.models.decoder import RematPolicy
from swe_rl_jax.parallel.distributed import multi_process

# Cheapest first: recompute nothing, the attention core, all but the weight matmuls, everything.
REMAT_BY_COST = ("none", "attention", "dots", "full")
# A run's `remat` setting: one policy, or "auto", the first of REMAT_BY_COST that fits the budget.
RematSetting = Literal["auto", "none", "attention", "dots", "full"]


def memory_budget_bytes(budget_gb: float) -> int:
    """`budget_gb` in bytes; 0 means 90 % of the first device's memory limit, or a quarter of the
    host's physical memory on CPU, where the same RAM also holds the sampler and its cache, the
    reference params, host copies and the compiler (SmolLM2's packed GRPO update on a 24 GiB
    host: `attention` remat, 5.4 GiB, rather than `none`, 8.7 GiB: docs/BENCHMARKS.md)."""
    if budget_gb > 0:
        return int(budget_gb * 2**30)
    stats = jax.local_devices()[0].memory_stats() or {}  # another process's devices report nothing
    if "bytes_limit" in stats:
        budget = int(0.9 * stats["bytes_limit"])
    else:
        budget = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    if multi_process():  # every process must compile the same program: the smallest decides
        budget = int(np.min(multihost_utils.process_allgather(np.int64(budget))))
    return budget


def compiled_peak_bytes(compiled: Any) -> int:
    """Peak estimate of a compiled program per device: arguments + outputs - aliased + temporaries."""
    mem = compiled.memory_analysis()
    return (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
            + mem.temp_size_in_bytes)


class BudgetedStep:
    """A train step compiled on its first call under the first remat policy of REMAT_BY_COST
    whose compiled peak fits `budget` bytes (the last one if none does). `build(remat)` gives
    the jitted step; `chosen` records the policy and its peak."""

    def __init__(self, build: Callable[[RematPolicy], Any], budget: int):
        self.build, self.budget = build, budget
        self.compiled: Any = None
        self.chosen: tuple[str, int] = ("", 0)

    def __call__(self, state: Any, batch: Any) -> Any:
        if self.compiled is None:
            for remat in REMAT_BY_COST:
                compiled = self.build(remat).lower(state, batch).compile()
                peak = compiled_peak_bytes(compiled)
                if peak <= self.budget or remat == REMAT_BY_COST[-1]:
                    self.compiled, self.chosen = compiled, (remat, peak)
                    break
        return self.compiled(state, batch)


def budgeted_step(build: Callable[[RematPolicy], Any], remat: RematSetting, budget_gb: float) -> Any:
    """The train step of a `remat` setting: `build(remat)`, or for "auto" a `BudgetedStep` over
    `build` within `memory_budget_bytes(budget_gb)`."""
    return BudgetedStep(build, memory_budget_bytes(budget_gb)) if remat == "auto" else build(remat)
