"""Shared by the per-op profilers (tools/bench/profile_decode.py, tools/bench/profile_update.py): run a jitted
program under `jax.profiler.trace`, then name each traced XLA op by the JAX operation it comes
from (the `op_name` metadata of the compiled HLO, plus the output shape)."""
from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re

_HLO_LINE = re.compile(r"^\s*(?:ROOT )?%?([\w.-]+) = (\S+) .*?op_name=\"([^\"]*)\"", re.M)


def op_sources(hlo_text: str, with_module: bool = False) -> dict:
    """HLO instruction name -> "jax op  output shape" (the jit and loop prefixes dropped); keyed
    by (module name, instruction name) with `with_module`, for traces of several programs."""
    module = re.search(r"^HloModule ([^\s,]+)", hlo_text, re.M)
    sources = {}
    for name, shape, op_name in _HLO_LINE.findall(hlo_text):
        op = re.sub(r"^jit\([^)]*\)/", "", op_name).replace("while/body/", "")
        sources[(module.group(1) if module else "", name) if with_module else name] = \
            f"{op}  {re.sub(r'{[^}]*}', '', shape)}"
    return sources


_CONTAINER = re.compile(r"^(while|conditional|call)(\.\d+)?$")


def traced_op_times(trace_dir: str, with_module: bool = False,
                    skip_containers: bool = False) -> tuple[collections.Counter, collections.Counter]:
    """(total microseconds, run count) per HLO instruction name in a perfetto trace (per (module,
    instruction name) with `with_module`). `skip_containers` drops while / conditional / call
    ops, whose spans enclose the ops of their bodies (counting both counts the body twice)."""
    path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
        trace = json.load(f)
    micros, counts = collections.Counter(), collections.Counter()
    for event in trace["traceEvents"] if isinstance(trace, dict) else trace:
        args = event.get("args", {})
        if event.get("ph") == "X" and "hlo_op" in args and not (skip_containers and _CONTAINER.match(args["hlo_op"])):
            key = (args.get("hlo_module", ""), args["hlo_op"]) if with_module else args["hlo_op"]
            micros[key] += event.get("dur", 0)
            counts[key] += 1
    return micros, counts
