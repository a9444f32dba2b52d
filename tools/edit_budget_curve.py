"""%Applied / %Resolved of the edit stage against SFT budget, judged by the harness.

Runs outside the main job's budget (docs/RESULTS.md, "Edit stage"): SFT on the ground-truth
SEARCH/REPLACE answers of a `configs/resolve_demo.yaml` run's data, in chained chunks of `--steps`
steps (each chunk starts from the last one's weights, with a new shuffle and a constant LR), and
after each chunk a greedy answer to every chosen held-out edit record, judged by the harness.

    python tools/edit_budget_curve.py --run outputs/resolve_demo --out DIR [--chunks 4 --steps 30
        --lr 1e-4 --records 64:123 --config configs/resolve_demo.yaml]

The model, the SFT shapes, the greedy evaluation and the harness settings are the config's (the
run's own config), so the curve measures the run's SFT and nothing else.

`--records A:B` picks held-out edit records A..B-1 (in file order): the development records, kept
apart from the first 64 that the main job reports. Writes DIR/curve.json after every chunk (so a
stopped run keeps its points) and DIR/curve.png.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EDIT = "edit_generation"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a resolve_demo main-job output (records/, sft_data/, repos/)")
    p.add_argument("--out", required=True)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--steps", type=int, default=30, help="SFT steps per chunk")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--records", default="64:123", help="held-out edit records A:B (file order)")
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs" / "resolve_demo.yaml"),
                   help="the main-job config the run was made with")
    return p.parse_args(argv)


def plot_budget_curve(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p["steps"] for p in points]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key in ("applied", "resolved"):
        ax.plot(steps, [p[key] for p in points], marker="o", label=key)
    ax.set_xlabel("SFT steps (1 packed row of ~2 examples each)")
    ax.set_ylabel(f"held-out edit records (of {points[0]['n']})")
    ax.set_title("edit stage: SFT budget")
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
    start, stop = (int(x) for x in args.records.split(":"))
    if not (run / "sft_data").is_dir() or not lines[start:stop]:
        print(f"error: {run} has no sft_data/ or no held-out edit records {args.records}", file=sys.stderr)
        return 2

    from swe_rl_jax.config import load_config
    from swe_rl_jax.data.records import read_split_records
    from swe_rl_jax.eval.run import run_eval
    from swe_rl_jax.pipeline.main_job import MainConfig
    from swe_rl_jax.pipeline.resolution import judge_edits, write_sample_instances
    from swe_rl_jax.sft.run import run_sft

    config = load_config(MainConfig, args.config)
    chosen = out / "records"
    (chosen / "validation").mkdir(parents=True, exist_ok=True)
    (chosen / "validation" / f"{EDIT}.jsonl").write_text("\n".join(lines[start:stop]) + "\n")
    records = read_split_records(chosen, "validation", (EDIT,))
    instances = write_sample_instances(out / "instances.jsonl", synthesized=True)
    model = config.model
    points = []
    for k in range(1, args.chunks + 1):
        chunk = out / f"sft_{k}"
        t = time.perf_counter()
        optimizer = dataclasses.replace(config.sft.optimizer, lr=args.lr, schedule="constant",
                                        warmup_steps=config.sft.optimizer.warmup_steps if k == 1 else 0)
        run_sft(dataclasses.replace(config.sft, sft_dir=str(run / "sft_data"), model=model, out_dir=str(chunk),
                                    num_steps=args.steps, seed=k, save_every=args.steps, progress=False,
                                    optimizer=optimizer))
        sft_s = time.perf_counter() - t
        model = dataclasses.replace(model, checkpoint=str(chunk / "hf"), tokenizer=config.model.tokenizer or
                                    config.model.checkpoint)
        report = run_eval(dataclasses.replace(config.eval, records_dir=str(chosen), model=model, split="validation",
                                              subtasks=(EDIT,), max_examples=0, out_dir=str(chunk / "eval")))
        response = {r["task_id"]: r["response"] for r in report["records"]}
        judged = judge_edits(config.resolution, records, [response[r.task_id] for r in records], instances,
                             run / "repos", chunk / "edits")["summary"]
        points.append({"steps": k * args.steps, "sft_s": round(sft_s, 1), "n": judged["instances"],
                       "applied": judged["applied"], "resolved": judged["resolved"],
                       "answer_errors": judged["answer_errors"]})
        (out / "curve.json").write_text(json.dumps(points, indent=1))
        print(json.dumps(points[-1]), flush=True)
    plot_budget_curve(points, out / "curve.png")
    print(f"wrote {out / 'curve.json'}, {out / 'curve.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
