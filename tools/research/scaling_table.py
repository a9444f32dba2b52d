"""The rows of docs/SCALING.md: the paper recipes' programs planned for TPU slices.

    python tools/research/scaling_table.py run [--only SUBSTRING ...]   # compile what is missing, one at a time
    python tools/research/scaling_table.py table                         # print the markdown table

Each row is one `plan-memory` command (printed in the table beside its numbers); `run` executes
the rows whose result is not yet in tools/research/scaling_rows.jsonl and appends it. A row whose train
state alone (parameters, Adam moments, and the RL run's resident copies, split evenly over the
chips) exceeds the chip's HBM is not compiled: it cannot fit whatever XLA does with the rest,
and the table says so with that lower bound. Big-model compiles take minutes each on a small
host: `--lock FILE` runs each one under `flock FILE` where other jobs share the machine.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from swe_rl_jax.models.config import preset  # noqa: E402
from swe_rl_jax.plan.chips import GIB  # noqa: E402
from swe_rl_jax.plan.report import resolve_layout  # noqa: E402
from swe_rl_jax.plan.programs import PlanSpec  # noqa: E402

RESULTS = ROOT / "tools" / "research" / "scaling_rows.jsonl"
# Slices per model: the smallest that can hold each recipe, and larger ones. Rows on slices the
# train state cannot fit are listed from the analytic bound without a compile.
TARGETS = {"qwen2.5-coder-7b": ("v5p-8", "v6e-8", "v5p-32"),
           "qwen2.5-coder-32b": ("v5p-8", "v6e-8", "v5p-32", "v6e-64", "v5p-128"),
           "llama3.3-70b": ("v5p-8", "v6e-8", "v5p-32", "v6e-64", "v5p-128")}


@dataclass(frozen=True)
class Row:
    recipe: str
    program: str  # sft | rl | critic | rollout
    target: str
    args: dict = field(default_factory=dict)

    def argv(self) -> list[str]:
        out = ["--target", self.target, "--program", self.program]
        for key, value in self.args.items():
            out += [f"--{key}"] if value is True else [f"--{key}", str(value)]
        return out

    def command(self) -> str:
        return "python -m swe_rl_jax.cli plan-memory " + " ".join(shlex.quote(a) for a in self.argv())

    def spec(self) -> PlanSpec:
        a = self.args
        return PlanSpec(program=self.program, model=a["model"], seq=int(a["seq"]), batch=int(a["batch"]),
                        target=self.target, mesh=a.get("mesh", ""), micro_batches=int(a.get("micro-batches", 1)),
                        algorithm=a.get("algorithm", "grpo"), prompt_len=int(a.get("prompt-len", 0)),
                        samples=int(a.get("samples", 1)), slots=int(a.get("slots", 64)))


def _chips(target: str) -> int:
    return resolve_layout(PlanSpec(program="sft", model="qwen2.5-7b", seq=8, batch=8, target=target))[0].num_devices


def _rollout_mesh(target: str, model: str) -> str:
    """The rollout's mesh: tensor over as many chips as divide the kv heads (so that the KV cache
    splits), fsdp (more rows per chip split) over the rest."""
    return f"fsdp=-1,tensor={math.gcd(_chips(target), preset(model).num_kv_heads)}"


def rows() -> list[Row]:
    """SoRFT (configs/sorft_sft.yaml, sorft_ppo.yaml) for Qwen2.5-Coder-7B and 32B, SWE-RL
    (configs/swe_rl_grpo.yaml) for Llama-3.3-70B. Micro-batches give one 16k row per chip per
    forward/backward where the batch allows it (the configs' own choice on 8 chips). Rollouts run
    in the engine's tp layout on a mesh with a tensor axis, 64 decode slots (the RL defaults);
    the GRPO rollouts sample 32 prompts x 16 at the 16k context (12,288 prompt + 4,096 new)."""
    out = []
    for model in ("qwen2.5-coder-7b", "qwen2.5-coder-32b"):
        for target in TARGETS[model]:
            chips = _chips(target)
            sft = dict(model=model, seq=16384, batch=128, **{"micro-batches": max(1, 128 // chips)})
            out.append(Row(f"SoRFT {model} SFT", "sft", target, sft))
            # PPO: 64 prompts x 1 sample; rows = prompt (<= 8192) + 4096 new tokens, bucketed to 16384.
            update = dict(model=model, seq=16384, batch=64, algorithm="ppo", **{"micro-batches": max(1, 64 // chips)})
            out.append(Row(f"SoRFT {model} PPO actor", "rl", target, update))
            out.append(Row(f"SoRFT {model} PPO critic", "critic", target, update))
            rollout = dict(model=model, seq=12288, batch=64, algorithm="ppo", mesh=_rollout_mesh(target, model),
                           **{"prompt-len": 8192})
            out.append(Row(f"SoRFT {model} PPO rollout", "rollout", target, rollout))
    for model in ("qwen2.5-coder-32b", "llama3.3-70b"):
        for target in ("v5p-8", "v5p-32", "v5p-128"):
            rollout = dict(model=model, seq=16384, batch=512, algorithm="grpo", samples=16, mesh=_rollout_mesh(target, model),
                           **{"prompt-len": 12288})
            out.append(Row(f"GRPO {model} rollout, 32 x 16", "rollout", target, rollout))
    model = "llama3.3-70b"
    for target in TARGETS[model]:
        chips = _chips(target)
        update = dict(model=model, seq=16384, batch=512, algorithm="grpo", **{"micro-batches": max(1, 512 // chips)})
        out.append(Row(f"SWE-RL {model} GRPO update", "rl", target, update))
    return out


def state_lower_bound(row: Row) -> float:
    """Bytes per chip of the float32 weights and Adam moments the row's run keeps, split evenly:
    4 + 8 bytes per parameter for the policy (its moments are resident during the rollout), the
    same again for PPO's critic, 4 for the KL reference; plus, for a rollout, the chip's part of
    the bf16 rollout weights and of the bf16 KV cache of the sequences decoded at once."""
    config = preset(row.args["model"])
    chips = _chips(row.target)
    per_param = 12
    if row.program != "sft":
        per_param += 4  # reference
        if row.args.get("algorithm") == "ppo":
            per_param += 12  # critic
    total = per_param * config.num_params() / chips
    if row.program == "rollout":
        live = row.spec().live_sequences
        cache = 2 * 2 * live * int(row.args["seq"]) * config.num_layers * config.num_kv_heads * config.head_dim_
        total += (cache + 2 * config.num_params()) / chips
    return total


def load_results() -> dict[str, dict]:
    if not RESULTS.is_file():
        return {}
    return {r["command"]: r for r in map(json.loads, RESULTS.read_text().splitlines()) if r}


def run(only: list[str], lock: str = "") -> None:
    done = load_results()
    for row in rows():
        if row.command() in done or (only and not any(o in row.command() + row.recipe for o in only)):
            continue
        spec = row.spec()
        chip_hbm = resolve_layout(spec)[2].hbm_bytes
        bound = state_lower_bound(row)
        record: dict = {"command": row.command(), "recipe": row.recipe, "program": row.program, "target": row.target}
        if bound > chip_hbm:
            record.update(skipped=True, state_lower_bound=bound, hbm_bytes=chip_hbm, fits=False)
        else:
            start = time.time()
            cmd = [sys.executable, "-m", "swe_rl_jax.cli", "plan-memory", *row.argv(), "--json"]
            proc = subprocess.run(["flock", lock, *cmd] if lock else cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                record.update(error=proc.stderr.strip().splitlines()[-1][:300])
            else:
                record.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            record["wall_seconds"] = round(time.time() - start, 1)
        with RESULTS.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{row.recipe} {row.target}: {'skipped' if record.get('skipped') else record.get('fits')}", flush=True)


def _cell(r: dict) -> tuple[str, str, str, str]:
    """(HBM per chip, fits, roofline, fix) for one result."""
    gib = lambda n: f"{n / GIB:.1f}"  # noqa: E731
    if r.get("skipped"):
        return (f"> {gib(r['state_lower_bound'])}", "no (state alone)", "",
                "more chips, or fewer decode slots" if r["program"] == "rollout" else
                "more chips (or bf16 master weights)")
    if "error" in r:
        return ("", "error", "", r["error"])
    used = f"{gib(r['total_bytes'])} / {r['hbm_bytes'] / GIB:.0f}"
    if r["program"] == "rollout":
        b = r["roofline"]
        speed = f"rollout ≥ {b['seconds']:.0f} s (decode step ≥ {b['decode_step']['seconds'] * 1e3:.0f} ms), MFU ≤ {b['mfu_bound']:.0%}"
    else:
        speed = f"step ≥ {r['step_seconds_lower_bound']:.1f} s, MFU ≤ {r['mfu_bound']:.0%}"
    fix = "" if r["fits"] else (r["hints"][0] if r.get("hints") else "")
    return used, "yes" if r["fits"] else "no", speed, fix


def table() -> str:
    results = load_results()
    lines = ["| recipe / program | target | mesh, micro-batches | HBM GiB per chip (used / has) | fits | roofline | "
             "to fit | command |", "|---|---|---|---|---|---|---|---|"]
    for row in rows():
        r = results.get(row.command())
        if r is None:
            continue
        used, fits, speed, fix = _cell(r)
        mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items() if v > 1) if "mesh" in r else row.args.get("mesh", "fsdp")
        micro = row.args.get("micro-batches", "")
        layout = f"{mesh}, {micro}" if micro else f"{mesh}, {row.spec().live_sequences} live"
        lines.append(f"| {row.recipe} | {row.target} | {layout} | {used} | {fits} | {speed} | {fix} | "
                     f"`{row.command()}` |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("run", "table"))
    p.add_argument("--only", nargs="*", default=[], help="run only rows whose command or recipe contains one of these")
    p.add_argument("--lock", default="", help="run each compile under `flock LOCK` (a machine shared with other jobs)")
    args = p.parse_args()
    if args.action == "run":
        run(args.only, args.lock)
    else:
        print(table())


if __name__ == "__main__":
    main()
