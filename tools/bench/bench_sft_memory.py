"""Where a LoRA SFT run of SmolLM2-135M-Instruct (the embedded default) spends its resident memory,
and what `remat` does to it: peak RSS of whole `sft` runs side by side, and the compiled train
step's own account (XLA's buffer assignment) per remat policy.

    python tools/bench/bench_sft_memory.py rss [--remat none,auto,full] [--work DIR] [--json OUT]
    python tools/bench/bench_sft_memory.py compiled [--remat none,attention,dots,full]

`rss`: makes the sample's records and SFT examples once under --work (`build-data --sample`,
`rejection-sample` with the shipped teacher file), then runs the same `sft` command
(configs/sft_tiny.yaml with `model.lora.rank=32`, file localization, 2 packed rows of 576 + 256 =
832 tokens, 3 steps, the held-out eval of one record, the export) once per `remat` setting, each
in a fresh process, one after another. Reported per run: the process's peak resident set (the
kernel's `ru_maxrss`, from `wait4`), the policy the run used (`summary.json`, `remat`) and its
wall time. `remat=none` is the SFT default before `auto`.

`compiled`: the same model, LoRA rank 32 and batch shape in this process; per policy the train
step's compiled per-device bytes (`memory_analysis()`: arguments, outputs, temporaries; the
peak `BudgetedStep` compares with the budget) and the budget `auto` compares them with.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROWS, INPUTS, TARGETS, STEPS, RANK = 2, 576, 256, 3, 32
GIB = 2**30


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "swe_rl_jax.cli", *argv]


def _sft_argv(work: Path, out: Path, remat: str) -> list[str]:
    return _cli("sft", "--config", str(ROOT / "configs" / "sft_tiny.yaml"), f"sft_dir={work / 'sft_data'}",
                f"records_dir={work / 'records'}", f"out_dir={out}", f"model.lora.rank={RANK}",
                "subtasks=[file_localization]", f"batch_size={ROWS}", f"num_steps={STEPS}",
                f"inputs_length={INPUTS}", f"targets_length={TARGETS}", "shuffle_buffer_size=16",
                "eval_examples=1", "eval_max_new_tokens=8", "progress=false", f"remat={remat}")


def _run(argv: list[str], log: Path) -> tuple[int, float, float]:
    """(exit status, peak RSS in GiB, seconds) of one child process."""
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss * 1024 / GIB, time.monotonic() - start  # ru_maxrss: KiB on Linux


def rss(args: argparse.Namespace) -> dict:
    work = Path(args.work).resolve()
    if not (work / "sft_data" / "report.json").is_file():
        for argv in (("build-data", "--sample", "--out", str(work / "records")),
                     ("rejection-sample", f"records_dir={work / 'records'}", f"out_dir={work / 'sft_data'}",
                      f"teacher.path={ROOT / 'data' / 'sample' / 'teacher_responses.jsonl'}",
                      "rejection.samples_per_prompt=5", "rejection.num_workers=1")):
            subprocess.run(_cli(*argv), check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    runs = {}
    for remat in args.remat.split(","):
        out = work / f"sft_{remat}"
        subprocess.run(["rm", "-rf", str(out)], check=True)
        out.mkdir(parents=True)
        code, peak, seconds = _run(_sft_argv(work, out, remat), out / "log.txt")
        summary = json.loads((out / "summary.json").read_text()) if code == 0 else {}
        runs[remat] = {"exit": code, "peak_rss_gib": round(peak, 2), "seconds": round(seconds),
                       "remat_used": summary.get("remat"), "train_loss_last": summary.get("train_loss_last")}
        print(json.dumps({remat: runs[remat]}), flush=True)
    return {"runs": runs, "command": " ".join(_sft_argv(work, work / "sft_<remat>", "<remat>")[1:]),
            "host_ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 1),
            "date": time.strftime("%Y-%m-%d %H:%M"), "load_average": os.getloadavg()}


def compiled(args: argparse.Namespace) -> dict:
    import jax
    import numpy as np

    from swe_rl_jax.models.lora import LoraConfig
    from swe_rl_jax.parallel import MeshConfig, MeshSharding, get_rules, make_mesh
    from swe_rl_jax.model_source import ModelSource, load_policy
    from swe_rl_jax.train import (OptimizerConfig, batch_shardings, compiled_peak_bytes, create_train_state,
                                  make_optimizer, make_sft_loss, make_train_step, memory_budget_bytes)

    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    config, params, _ = load_policy(ModelSource(lora=LoraConfig(rank=RANK, alpha=RANK)), mesh, rules)
    optimizer = make_optimizer(OptimizerConfig(lr=1e-4, total_steps=STEPS))
    state, state_sh = create_train_state(config, optimizer, mesh, rules, jax.random.PRNGKey(0), params=params)
    del params
    shape = (ROWS, INPUTS + TARGETS)
    batch = {k: jax.ShapeDtypeStruct(shape, np.int32) for k in ("tokens", "positions", "segment_ids", "loss_mask")}
    b_sh = batch_shardings(mesh, rules, batch)
    out = {"budget_gib": round(memory_budget_bytes(0) / GIB, 2), "rows": ROWS, "tokens_per_row": shape[1],
           "state_gib": round(sum(x.nbytes for x in jax.tree.leaves(state)) / GIB, 2), "policies": {}}
    for remat in args.remat.split(","):
        loss = make_sft_loss(config, chunk=512, remat=remat, shard=MeshSharding(mesh, rules))
        step = make_train_step(loss, optimizer, state_sh, b_sh).lower(state, batch).compile()
        mem = step.memory_analysis()
        out["policies"][remat] = {"peak_gib": round(compiled_peak_bytes(step) / GIB, 2),
                                  "temporaries_gib": round(mem.temp_size_in_bytes / GIB, 2),
                                  "arguments_gib": round(mem.argument_size_in_bytes / GIB, 2)}
        print(json.dumps({remat: out["policies"][remat]}), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("rss", help="peak RSS of whole sft runs, one per remat setting")
    p.add_argument("--remat", default="none,auto,full", help="comma-separated remat settings")
    p.add_argument("--work", default="outputs/bench_sft_memory", help="records, SFT examples and runs")
    p.add_argument("--json", default="", help="also write the result here")
    p = sub.add_parser("compiled", help="the compiled step's bytes per remat policy")
    p.add_argument("--remat", default="none,attention,dots,full", help="comma-separated remat policies")
    p.add_argument("--json", default="", help="also write the result here")
    args = parser.parse_args(argv)
    result = rss(args) if args.what == "rss" else compiled(args)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
