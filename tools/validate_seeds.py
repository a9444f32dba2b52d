"""Validates instances' gold patches across hash seeds and repeats, names the tests whose status
hangs on the run, and writes the instances without them (harness/stability.py; docs/HARNESS.md,
"Verdicts that do not hang on a seed").

    python tools/validate_seeds.py --instances FILE (--repos DIR | --images DIR) --out DIR \
        [--seeds 0,1,2,3] [--repeats 1] [--field FIELD=COLUMN ...] [evaluate's harness flags]

Runs `evaluate --gold` once per seed and repeat (the harness's `--hash-seed`), every run of an
instance under the same flags; then per instance: the verdict of each run, and every test whose
outcome (pass / fail / skip) is not the same in all runs, with its statuses and whether it is a
FAIL_TO_PASS or PASS_TO_PASS test. Writes DIR/validation.json (that, per instance), DIR/reports/
(each run's report.json), DIR/validated.jsonl (the instance rows as read, their unstable graded
tests moved into `unstable_tests`), and prints a line per instance. Exit status 1 when a run failed
in the harness's set-up for every instance (nothing was validated).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swe_rl_jax.commands.common import field_pair  # noqa: E402
from swe_rl_jax.commands.harness_args import add_harness_arguments, harness_options  # noqa: E402
from swe_rl_jax.data.sources import RepoLocator, _rows, canonical_fields, load_instances  # noqa: E402
from swe_rl_jax.files import input_dir, input_file, output_dir  # noqa: E402
from swe_rl_jax.harness import evaluate_predictions, load_specs, write_report  # noqa: E402
from swe_rl_jax.harness.stability import unstable_tests, validated_row  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", required=True)
    p.add_argument("--repos", default="")
    p.add_argument("--specs", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="0,1,2,3", help="PYTHONHASHSEED values (%(default)s)")
    p.add_argument("--repeats", type=int, default=1, help="runs per seed (%(default)s)")
    p.add_argument("--field", action="append", default=[], type=field_pair, metavar="FIELD=COLUMN")
    add_harness_arguments(p)
    args = p.parse_args(argv)
    out = output_dir(args.out, "--out")
    fields = dict(args.field)
    path = input_file(args.instances, "--instances")
    instances = load_instances(path, fields=fields)
    locator = RepoLocator(input_dir(args.repos, "--repos") if args.repos else None)
    specs = load_specs(args.specs, "--specs") if args.specs else {}
    base = harness_options(args)
    gold = [{"instance_id": i.instance_id, "model_patch": i.patch} for i in instances]
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for repeat in range(args.repeats):
            report = evaluate_predictions(gold, instances, locator, specs, dataclasses.replace(base, hash_seed=seed),
                                          progress=True)
            write_report(report, out / "reports" / f"seed{seed}-{repeat}")
            if report["summary"]["setup_failure"]:
                print(f"error: seed {seed}: {report['summary']['setup_failure']}", file=sys.stderr)
                return 1
            runs.append(((seed, repeat), {r["instance_id"]: r for r in report["records"]}))
    validation = {}
    for inst in instances:
        records = [by_id[inst.instance_id] for _, by_id in runs]
        graded = [*inst.fail_to_pass, *inst.pass_to_pass]
        unstable = unstable_tests([r["test_statuses"] for r in records], graded)
        validation[inst.instance_id] = {
            "runs": [{"seed": s, "repeat": k, "resolution_status": r["resolution_status"], "error": r["error"]}
                     for ((s, k), _), r in zip(runs, records)],
            "unstable": {t: {"statuses": v, "list": "FAIL_TO_PASS" if t in inst.fail_to_pass else
                             "PASS_TO_PASS" if t in inst.pass_to_pass else "neither"}
                         for t, v in unstable.items()}}
        verdicts = " ".join(r["resolution_status"] + (f"/{r['error']}" if r["error"] else "") for r in records)
        named = ", ".join(f"{t} ({v['list']})" for t, v in validation[inst.instance_id]["unstable"].items())
        print(f"{inst.instance_id}: {verdicts}; unstable: {named or '-'}")
    (out / "validation.json").write_text(json.dumps(validation, indent=2) + "\n")
    with open(out / "validated.jsonl", "w") as f:
        for where, row in _rows(path):
            row = canonical_fields(row, fields)
            found = validation.get(row.get("instance_id"), {"unstable": {}})["unstable"]
            f.write(json.dumps(validated_row(row, [t for t, v in found.items() if v["list"] != "neither"])) + "\n")
    print(f"wrote {out / 'validation.json'} and {out / 'validated.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
