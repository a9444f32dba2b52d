"""The main job's GRPO phase with LoRA against full fine-tuning, over seeds (docs/RESULTS.md).

From a main-job run (`--run DIR`: its records/ and SFT model sft/hf), for each seed the config's
GRPO phase runs twice from the same SFT model, once full fine-tuning (the config's learning rate)
and once with LoRA (`model.lora`, the learning rate times `--lora-lr-factor`), and each export is
judged exactly as the main job judges its SFT+RL model: greedy file localization on the held-out
repository's records (the config's `eval` section). Full fine-tuning with the config's own seed is
the run's own GRPO phase, read from the run, not run again. The table gives per seed each mode's held-out
file hit and the RL loop's last sampled held-out reward, LoRA minus full with its paired 95 %
bootstrap interval, and over the seeds the mean of each mode; beside them the SFT model (the
start) and the strongest trivial baseline of the run (from its results.json).

    python tools/research/lora_vs_full.py --run outputs/main --out DIR [--seeds 0,1,2] [--rank 32 --alpha 32
        --lora-lr-factor 10] [key=value ...]

The learning rate of LoRA is 10x full fine-tuning's by default: "LoRA without regret" (Thinking
Machines, 2025) finds the optimal LoRA rate about 10x the full one across model sizes; nothing
here was tuned on these records. A seed and mode already in DIR/lora_vs_full.json is not run again
(runs made apart, e.g. side by side, are merged by putting their entries into one such file);
DIR/lora_vs_full.json and .md are rewritten after every run.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

MODES = ("lora", "full")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a main-job output directory (records/, sft/hf, results.json)")
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="0,1,2", help="comma-separated RL seeds")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: lora, full (default both)")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--lora-lr-factor", type=float, default=10.0, help="LoRA's learning rate / full fine-tuning's")
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[2] / "configs" / "main.yaml"),
                   help="the main-job config the run was made with")
    p.add_argument("overrides", nargs="*", help="key=value changes to the config, as the main job takes them")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run, out = Path(args.run), Path(args.out)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        print(f"error: --seeds {args.seeds!r} is not a comma-separated list of integers", file=sys.stderr)
        return 2
    for needed in (run / "records", run / "sft" / "hf"):
        if not needed.exists():
            print(f"error: {needed} is missing: --run must be a main-job output past its SFT stage", file=sys.stderr)
            return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not seeds or not modes or set(modes) - set(MODES):
        print(f"error: --seeds {args.seeds!r} / --modes {args.modes!r}: name at least one seed and only {MODES}",
              file=sys.stderr)
        return 2

    from swe_rl_jax.config import load_config
    from swe_rl_jax.eval.run import run_eval
    from swe_rl_jax.models.lora import LoraConfig
    from swe_rl_jax.pipeline.main_job import MainConfig, execution_config
    from swe_rl_jax.pipeline.resolution import write_sample_instances
    from swe_rl_jax.rl.run import run_rl

    config = load_config(MainConfig, args.config, args.overrides)
    out.mkdir(parents=True, exist_ok=True)
    instances = write_sample_instances(out / "instances.jsonl", synthesized=config.synthesized)
    tokenizer = config.model.tokenizer or config.model.checkpoint
    sft_model = dataclasses.replace(config.model, checkpoint=str(run / "sft" / "hf"), tokenizer=tokenizer)
    lora = LoraConfig(rank=args.rank, alpha=args.alpha)

    def judge(model: Any, directory: Path) -> dict[str, float]:
        report = run_eval(dataclasses.replace(config.eval, records_dir=str(run / "records"), model=model,
                                              out_dir=str(directory / "eval")))
        return hits_of(report)

    results: dict[str, Any] = json.loads((out / "lora_vs_full.json").read_text()) if (out / "lora_vs_full.json").is_file() else {}
    for seed in seeds:
        for mode in modes:
            key = f"{mode}_s{seed}"
            if key in results:
                continue
            directory = out / key
            if mode == "full" and seed == config.rl.seed and (run / "eval_sft_rl" / "eval.json").is_file():
                results[key] = main_job_rl(run, seed)  # the run's own GRPO phase is this very run
                continue
            lr = config.rl.optimizer.lr * (args.lora_lr_factor if mode == "lora" else 1.0)
            model = dataclasses.replace(sft_model, lora=lora if mode == "lora" else None, export_merged=True)
            t = time.perf_counter()
            rl = run_rl(dataclasses.replace(
                config.rl, records_dir=str(run / "records"), out_dir=str(directory / "rl"), model=model, seed=seed,
                export=True, progress=False, optimizer=dataclasses.replace(config.rl.optimizer, lr=lr),
                execution=execution_config(config, instances, run / "repos")))
            seconds = time.perf_counter() - t
            if not rl["finished"]:  # stopped by a signal: the checkpoint stays, a rerun goes on from it
                print(f"{key}: RL stopped at step {rl['steps']} of {config.rl.num_steps}; run again to go on",
                      file=sys.stderr)
                return 130
            trained = dataclasses.replace(sft_model, checkpoint=rl["export_dir"])
            results[key] = {"seed": seed, "mode": mode, "lr": lr, "rl_seconds": round(seconds, 1),
                            "heldout_first": rl.get("heldout_first", {}),
                            "heldout_last": rl.get("heldout_last", {}), "hits": judge(trained, directory)}
            write_table(out, results, run, seeds)
            print(f"{key}: held-out file hit {mean(results[key]['hits']):.3f} ({seconds:.0f} s of RL)", flush=True)
    if "start" not in results:  # the main job's own judgement of its SFT model, when it has made it
        main_eval = run / "eval_sft" / "eval.json"
        results["start"] = {"hits": hits_of(json.loads(main_eval.read_text())) if main_eval.is_file()
                            else judge(sft_model, out / "start")}
    write_table(out, results, run, seeds)
    print(f"wrote {out / 'lora_vs_full.json'}, {out / 'lora_vs_full.md'}")
    return 0


def main_job_rl(run: Path, seed: int) -> dict[str, Any]:
    """The main job's own GRPO phase (full fine-tuning, the config's seed) and its judgement."""
    report = json.loads((run / "eval_sft_rl" / "eval.json").read_text())
    rl = json.loads((run / "rl" / "summary.json").read_text())
    timings = json.loads((run / "results.json").read_text())["timings_s"]
    return {"seed": seed, "mode": "full", "lr": None, "rl_seconds": round(timings["rl"], 1), "from_main_job": True,
            "heldout_first": rl.get("heldout_first", {}), "heldout_last": rl.get("heldout_last", {}),
            "hits": hits_of(report)}


def hits_of(report: dict[str, Any]) -> dict[str, float]:
    """Task id -> file hit of an eval report's file-localization records."""
    return {r["task_id"]: float(r["outcome"]["hit"]) for r in report["records"] if r["subtask"] == "file_localization"}


def mean(hits: dict[str, float]) -> float:
    return sum(hits.values()) / max(len(hits), 1)


def write_table(out: Path, results: dict[str, Any], run: Path, seeds: list[int]) -> None:
    from swe_rl_jax.eval.stats import paired_difference

    ids = sorted(next(r["hits"] for k, r in results.items() if k != "summary"))
    lines = ["| seed | full: held-out file hit | LoRA: held-out file hit | LoRA − full [paired 95% CI] "
             "| full / LoRA last sampled held-out reward | full / LoRA RL seconds |", "|---|---|---|---|---|---|"]
    summary: dict[str, Any] = {}
    for seed in seeds:
        full, low = results.get(f"full_s{seed}"), results.get(f"lora_s{seed}")
        if not (full and low):
            continue
        diff, ci = paired_difference([low["hits"][i] for i in ids], [full["hits"][i] for i in ids])
        reward = [r["heldout_last"].get("heldout/mean_reward", float("nan")) for r in (full, low)]
        lines.append(f"| {seed} | {mean(full['hits']):.3f} | {mean(low['hits']):.3f} | {diff:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] "
                     f"| {reward[0]:.3f} / {reward[1]:.3f} | {full['rl_seconds']:.0f} / {low['rl_seconds']:.0f} |")
        summary[str(seed)] = {"full": mean(full["hits"]), "lora": mean(low["hits"]), "diff": diff, "ci": list(ci)}
    done = [summary[s] for s in summary]
    if done:
        lines.append(f"| mean of {len(done)} | {sum(d['full'] for d in done) / len(done):.3f} "
                     f"| {sum(d['lora'] for d in done) / len(done):.3f} | | | |")
    notes = [f"{len(ids)} held-out records"]
    if "start" in results:
        notes.append(f"start (the SFT model): {mean(results['start']['hits']):.3f}")
    if (run / "results.json").is_file():
        run_results = json.loads((run / "results.json").read_text())
        baseline = run_results["strongest_baseline"]
        notes.append(f"strongest trivial baseline ({baseline}): {run_results['table'][baseline]['file_hit']:.3f}")
    lines.append("\n" + "; ".join(notes) + ".")
    (out / "lora_vs_full.json").write_text(json.dumps({**results, "summary": summary}, indent=1, sort_keys=True) + "\n")
    (out / "lora_vs_full.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
