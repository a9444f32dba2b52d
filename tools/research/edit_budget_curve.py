"""%Applied / %Resolved of the edit stage against training budget, judged by the harness.

Runs outside the main job's budget (docs/RESULTS.md, "Edit stage"), on a `configs/resolve_demo.yaml`
run's data, for one stage:

- `--stage sft`: SFT on the ground-truth SEARCH/REPLACE answers from the config's base model;
- `--stage rl`: the config's GRPO from the run's SFT model (`RUN/sft/hf`).

Either is one continuous run of `--chunks` x `--steps` steps, stopped after every `--steps` steps
and resumed (the optimizer state, data order and RNG stream carry on), with the config's LR
schedule laid over the whole run (`schedule_steps`): a decaying schedule is part-way down at the
early points, as in any one run's checkpoints.

Before the first chunk and after each, a greedy answer to every chosen held-out edit record,
judged by the harness; every point is compared with the starting model on the same records
(paired 95 % bootstrap interval of the %Resolved difference).

    python tools/research/edit_budget_curve.py --run outputs/resolve_demo --out DIR [--stage sft --chunks 4
        --steps 30 --lr 1e-4 --records 64:123 --config configs/resolve_demo.yaml] [key=value ...]

The model, the training shapes, the greedy evaluation and the harness settings are the config's
(the run's own config; `--lr` replaces the stage's learning rate), so the curve measures the run's
recipe and nothing else; `key=value` overrides change it as they change the main job's
(e.g. `rl.rewards.edit_generation=tests_pass`, `sft.optimizer.schedule=cosine`).

`--records A:B` picks held-out edit records A..B-1 (in file order): the development records, kept
apart from the first 64 that the main job reports. Writes DIR/curve.json after every point and
DIR/curve.png; run again with the same arguments, a stopped curve goes on from its last point.
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

EDIT = "edit_generation"


def record_range(text: str) -> tuple[int, int]:
    start, _, stop = text.partition(":")
    if not (start.isdigit() and stop.isdigit() and int(start) < int(stop)):
        raise argparse.ArgumentTypeError(f"{text!r} is not A:B with 0 <= A < B")
    return int(start), int(stop)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a resolve_demo main-job output (records/, sft_data/, repos/, sft/hf)")
    p.add_argument("--out", required=True)
    p.add_argument("--stage", choices=("sft", "rl"), default="sft")
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--steps", type=int, default=30, help="training steps per chunk")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the stage's in the config)")
    p.add_argument("--records", default="64:123", type=record_range, help="held-out edit records A:B (file order)")
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[2] / "configs" / "resolve_demo.yaml"),
                   help="the main-job config the run was made with")
    p.add_argument("overrides", nargs="*", help="key=value changes to the config, as the main job takes them")
    return p.parse_args(argv)


def plot_budget_curve(points: list[dict[str, Any]], stage: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p["steps"] for p in points]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key in ("applied", "resolved"):
        ax.plot(steps, [p[key] for p in points], marker="o", label=key)
    ax.set_xlabel("SFT steps (1 packed row of ~2 examples each)" if stage == "sft" else
                  "GRPO steps after SFT (prompts x group per step: the config's)")
    ax.set_ylabel(f"held-out edit records (of {points[0]['n']})")
    ax.set_title(f"edit stage: {stage.upper()} budget")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run, out = Path(args.run), Path(args.out)
    held_out = run / "records" / "validation" / f"{EDIT}.jsonl"
    lines = held_out.read_text().splitlines() if held_out.is_file() else []
    start, stop = args.records
    needs = run / ("sft_data" if args.stage == "sft" else "sft/hf")
    if not needs.is_dir():
        print(f"error: {needs} is missing: --stage {args.stage} starts from it", file=sys.stderr)
        return 2
    if len(lines) < stop:
        print(f"error: --records {start}:{stop} asks for more than the {len(lines)} held-out edit records of {run}",
              file=sys.stderr)
        return 2

    from swe_rl_jax.config import load_config
    from swe_rl_jax.data.records import read_split_records
    from swe_rl_jax.eval.run import run_eval
    from swe_rl_jax.eval.stats import paired_difference
    from swe_rl_jax.pipeline.main_job import MainConfig, execution_config
    from swe_rl_jax.pipeline.resolution import judge_edits, write_sample_instances
    from swe_rl_jax.rl.run import run_rl
    from swe_rl_jax.sft.run import run_sft

    config = load_config(MainConfig, args.config, args.overrides)
    chosen = out / "records"
    (chosen / "validation").mkdir(parents=True, exist_ok=True)
    (chosen / "validation" / f"{EDIT}.jsonl").write_text("\n".join(lines[start:stop]) + "\n")
    records = read_split_records(chosen, "validation", (EDIT,))
    instances = write_sample_instances(out / "instances.jsonl", synthesized=True)
    tokenizer = config.model.tokenizer or config.model.checkpoint
    start_model = (config.model if args.stage == "sft" else
                   dataclasses.replace(config.model, checkpoint=str(run / "sft" / "hf"), tokenizer=tokenizer))

    def judge(k: int, judged_model: Any, model_dir: Path, train_s: float) -> dict[str, Any]:
        report = run_eval(dataclasses.replace(config.eval, records_dir=str(chosen), model=judged_model,
                                              split="validation", subtasks=(EDIT,), max_examples=0,
                                              out_dir=str(model_dir / "eval")))
        response = {r["task_id"]: r["response"] for r in report["records"]}
        judged = judge_edits(config.resolution, records, [response[r.task_id] for r in records], instances,
                             run / "repos", model_dir / "edits")
        summary = judged["summary"]
        return {"steps": k * args.steps, "train_s": round(train_s, 1), "n": summary["instances"],
                "applied": summary["applied"], "resolved": summary["resolved"],
                "answer_errors": summary["answer_errors"],
                "resolved_ids": sorted(r.task_id for r, j in zip(records, judged["records"]) if j["resolved"])}

    ids = [r.task_id for r in records]
    curve = out / "curve.json"  # a stopped curve goes on from its last point
    points = json.loads(curve.read_text()) if curve.is_file() else []
    if any(p["steps"] != k * args.steps for k, p in enumerate(points)):
        print(f"error: {curve} holds points of another --steps; choose another --out", file=sys.stderr)
        return 2
    if not points:
        points.append(judge(0, start_model, out / "start", 0.0))
        curve.write_text(json.dumps(points, indent=1))
        print(json.dumps(points[-1]), flush=True)
    budget = args.chunks * args.steps
    for k in range(len(points), args.chunks + 1):
        t = time.perf_counter()
        if args.stage == "sft":  # one run from the base model: resumes out/sft's last checkpoint
            chunk = out / "sft"
            optimizer = dataclasses.replace(config.sft.optimizer, lr=args.lr or config.sft.optimizer.lr)
            run_sft(dataclasses.replace(config.sft, sft_dir=str(run / "sft_data"), model=start_model,
                                        out_dir=str(chunk), num_steps=k * args.steps, schedule_steps=budget,
                                        save_every=args.steps, progress=False, optimizer=optimizer))
        else:  # one run from the SFT model: resumes out/rl's last checkpoint, exports at k * steps
            chunk = out / "rl"
            optimizer = dataclasses.replace(config.rl.optimizer, lr=args.lr or config.rl.optimizer.lr)
            rl = dataclasses.replace(
                config.rl, records_dir=str(run / "records"), out_dir=str(chunk), model=start_model,
                num_steps=k * args.steps, schedule_steps=budget, save_every=args.steps, export=True,
                progress=False, optimizer=optimizer, heldout=dataclasses.replace(config.rl.heldout, every=0),
                execution=execution_config(config, instances, run / "repos"))
            run_rl(rl)
        trained = dataclasses.replace(start_model, checkpoint=str(chunk / "hf"), tokenizer=tokenizer)
        point = judge(k, trained, out / f"{args.stage}_{k}_judged", time.perf_counter() - t)
        first = set(points[0]["resolved_ids"])
        diff, ci = paired_difference([float(i in point["resolved_ids"]) for i in ids], [float(i in first) for i in ids])
        point["resolved_minus_start"] = {"diff": diff, "ci": list(ci)}
        points.append(point)
        curve.write_text(json.dumps(points, indent=1))
        print(json.dumps(point), flush=True)
    plot_budget_curve(points, args.stage, out / "curve.png")
    print(f"wrote {out / 'curve.json'}, {out / 'curve.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
