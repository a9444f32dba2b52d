"""Shared by the per-op profilers (tools/profile_decode.py, tools/profile_update.py): run a jitted
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


def op_sources(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> "jax op  output shape" (the jit and loop prefixes dropped)."""
    sources = {}
    for name, shape, op_name in _HLO_LINE.findall(hlo_text):
        op = re.sub(r"^jit\([^)]*\)/", "", op_name).replace("while/body/", "")
        sources[name] = f"{op}  {re.sub(r'{[^}]*}', '', shape)}"
    return sources


def traced_op_times(trace_dir: str) -> tuple[collections.Counter, collections.Counter]:
    """(total microseconds, run count) per HLO instruction name in a perfetto trace."""
    path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
        trace = json.load(f)
    micros, counts = collections.Counter(), collections.Counter()
    for event in trace["traceEvents"] if isinstance(trace, dict) else trace:
        if event.get("ph") == "X" and "hlo_op" in event.get("args", {}):
            micros[event["args"]["hlo_op"]] += event.get("dur", 0)
            counts[event["args"]["hlo_op"]] += 1
    return micros, counts
