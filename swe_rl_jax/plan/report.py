"""A plan: compile one program for a target, read its per-chip memory, judge it against the
chip's HBM, bound its speed, and say what would make it fit when it does not.

Memory comes from XLA's buffer assignment of the compiled program (`memory_analysis()`):
arguments (params, optimizer state, batch), outputs, aliased (donated) bytes, temporaries and
the program's code. peak = arguments + outputs - aliased + temporaries + code. The chip must also
hold the run's other live state (`Program.resident`), so fits = peak + resident <= HBM.
"""
from __future__ import annotations

import math
import re
import time
from types import SimpleNamespace
from typing import Any, Callable, Optional

import jax

from swe_rl_jax.config import ConfigError
from swe_rl_jax.models import lora
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.params import param_specs
from swe_rl_jax.parallel import get_rules, make_mesh, parse_mesh
from swe_rl_jax.parallel.mesh import MESH_AXES, MeshConfig
from swe_rl_jax.plan.chips import GIB, Chip
from swe_rl_jax.plan.programs import BUILDERS, PlanSpec, Program, rollout_engine, unsharded_split
from swe_rl_jax.plan.roofline import rollout_roofline, train_roofline
from swe_rl_jax.plan.targets import Target, parse_target, target_chip, target_devices

DEFAULT_CHIP = "v5p"  # what a cpu:N target is judged against unless --chip says otherwise
FUSED_KERNEL_MARKERS = {"tpu_custom_call": "Pallas/Mosaic TPU kernel", "__cudnn$fmha": "cuDNN fused attention"}


def resolve_layout(spec: PlanSpec) -> tuple[Target, MeshConfig, Chip]:
    """The target, a fully sized mesh and the chip, all checked before anything compiles
    (a ConfigError names what is wrong)."""
    mesh = parse_mesh(spec.mesh) if spec.mesh else None
    if spec.target:
        target = parse_target(spec.target)
    else:  # today's default: fake CPU devices, as many as the mesh names
        mesh = mesh or MeshConfig(fsdp=8)
        sizes = [getattr(mesh, a) for a in MESH_AXES]
        if -1 in sizes:
            raise ConfigError("mesh: without --target every mesh size must be given (e.g. --mesh fsdp=8)")
        target = parse_target(f"cpu:{math.prod(sizes)}")
    mesh = mesh or MeshConfig(fsdp=-1)
    mesh = MeshConfig(*mesh.shape(target.num_devices))
    chip = target_chip(target, spec.chip if spec.chip or target.is_tpu else DEFAULT_CHIP)
    return target, mesh, chip


def _per_chip_bytes(tree: Any) -> int:
    """Bytes one device holds of abstract arrays with shardings (the largest shard of each)."""
    return sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


_REFUSED = re.compile(r"RESOURCE_EXHAUSTED: Ran out of memory.*?HLO temporaries \(([\d.]+)([KMGT])\)", re.S)


def _refused_temporaries(message: str) -> Optional[int]:
    """Bytes of temporaries a TPU compile refused as more than the HBM, or None (another error)."""
    m = _REFUSED.search(message)
    return None if m is None else int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2)))


def plan(spec: PlanSpec, config: Optional[ModelConfig] = None,
         say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Compiles `spec.program` for its target in this process (which must have the target's
    devices: `targets.libtpu_env` / fake CPU devices) and reports per-chip bytes, fit and bounds.
    config: a model other than the preset `spec.model` names (tests plan tiny ones). `say` gets a
    line as each stage starts and ends: tracing and compiling a large model take minutes."""
    target, mesh_config, chip = resolve_layout(spec)
    mesh = make_mesh(mesh_config, target_devices(target))
    rules_name = spec.rules or ("fsdp_tp" if mesh_config.tensor > 1 else "fsdp")
    rules = get_rules(rules_name)
    config = spec.model_config(config)
    model_name = spec.model if config == spec.model_config() else "custom"
    mesh_text = ",".join(f"{k}={v}" for k, v in mesh.shape.items())
    say(f"tracing the {spec.program} program of {model_name} for {target.name} (mesh {mesh_text})")
    program: Program = BUILDERS[spec.program](config, mesh, rules, spec)
    params_bytes = _per_chip_bytes(program.params)
    opt_bytes = _per_chip_bytes(program.opt_state) if program.opt_state is not None else 0
    start = time.perf_counter()
    refused = None
    try:
        lowered = program.lower()
        say("traced; compiling it (minutes for a large model)")
        compiled = lowered.compile()
        mem, hlo = compiled.memory_analysis(), compiled.as_text()
    except jax.errors.JaxRuntimeError as e:
        # The TPU compiler stops when a program's buffers exceed the chip's HBM: that is a
        # "does not fit" with the temporaries it names, not a failed plan.
        temp = _refused_temporaries(str(e))
        if temp is None:
            raise
        refused, hlo = str(e).splitlines()[0][:300], ""
        mem = SimpleNamespace(argument_size_in_bytes=params_bytes + opt_bytes, output_size_in_bytes=0,
                              alias_size_in_bytes=0, temp_size_in_bytes=temp, generated_code_size_in_bytes=0)
    compile_seconds = time.perf_counter() - start
    say(f"traced and compiled in {compile_seconds:.1f} s" if refused is None else
        "the compiler refused the program: larger than the chip's memory")
    peak = (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
            + mem.temp_size_in_bytes + mem.generated_code_size_in_bytes)
    resident = {name: _per_chip_bytes(tree) for name, tree in program.resident.items()}
    total = peak + sum(resident.values())
    chips = target.num_devices
    if spec.program == "rollout":
        engine_rules = rollout_engine(mesh, spec).rules
        batch_split = math.prod(mesh.shape[a] for a in engine_rules.get("batch", ()))
        bound = rollout_roofline(
            config, spec.batch // spec.samples, spec.prompt_tokens, spec.live_sequences, spec.seq - spec.prompt_tokens,
            jax.numpy.dtype(spec.dtype).itemsize, chip, chips, batch_split=batch_split,
            weight_split=unsharded_split(mesh, engine_rules, "mlp", config.intermediate_size),
            kv_split=unsharded_split(mesh, engine_rules, "kv_heads", config.num_kv_heads),
            waves=-(-spec.batch // spec.live_sequences)).as_dict()
    else:
        bound = train_roofline(config, spec.seq, spec.batch, spec.micro_batches, spec.remat, spec.chunk,
                               params_bytes + opt_bytes, chip, chips,
                               unsharded_split(mesh, rules, "mlp", config.intermediate_size),
                               lm_head=spec.program != "critic").as_dict()
    report: dict[str, Any] = {
        "program": spec.program, "model": model_name,
        "num_params": config.num_params(),
        "adapter_params": sum(math.prod(shape) for path, (shape, _) in param_specs(config).items()
                              if lora.is_adapter(path)),
        "target": target.name, "topology": target.topology, "chip": chip.name, "devices": chips,
        "mesh": dict(mesh.shape), "rules": rules_name,
        "seq": spec.seq, "batch": spec.batch, "micro_batches": spec.micro_batches, "remat": spec.remat,
        "dtype": spec.dtype, "param_dtype": spec.param_dtype, "chunk": spec.chunk, "lora_rank": spec.lora_rank,
        "attention": spec.attention, "attention_chunk": spec.attention_chunk,
        "fused_kernels": sorted(name for marker, name in FUSED_KERNEL_MARKERS.items() if marker in hlo),
        "params_bytes": params_bytes, "opt_state_bytes": opt_bytes,
        "argument_bytes": mem.argument_size_in_bytes, "output_bytes": mem.output_size_in_bytes,
        "alias_bytes": mem.alias_size_in_bytes, "temp_bytes": mem.temp_size_in_bytes,
        "code_bytes": mem.generated_code_size_in_bytes, "peak_bytes": peak,
        "resident": resident, "resident_bytes": sum(resident.values()), "total_bytes": total,
        "hbm_bytes": chip.hbm_bytes, "fits": total <= chip.hbm_bytes,
        "roofline": bound, "step_seconds_lower_bound": bound["seconds"], "mfu_bound": bound["mfu_bound"],
        "compile_seconds": round(compile_seconds, 1),
    }
    if spec.program in ("rl", "critic", "rollout"):
        report["algorithm"] = spec.algorithm
        report["reference"] = spec.reference
    if spec.program == "rollout":
        report.update(prompt_len=spec.prompt_tokens, samples=spec.samples, rollout_rules=spec.rollout_rules,
                      rollout_batch_split=batch_split, slots=spec.slots, live_sequences=spec.live_sequences)
    if refused is not None:  # memory: the known arguments plus the temporaries the compiler named
        report["compile_refused"] = refused
    report["hints"] = [] if report["fits"] else fit_hints(spec, report)
    return report


def fit_hints(spec: PlanSpec, r: dict[str, Any]) -> list[str]:
    """What would make a plan that does not fit fit, from its own numbers."""
    gib = lambda n: f"{n / GIB:.1f} GiB"  # noqa: E731
    hints = []
    state = r["params_bytes"] + r["opt_state_bytes"] + r["resident_bytes"]
    temp = r["temp_bytes"]
    long_rows = spec.seq >= 2048
    if spec.attention in ("auto", "dense") and long_rows and "Pallas/Mosaic TPU kernel" not in r["fused_kernels"]:
        hints.append(f"attention: {spec.attention} attention keeps [rows, heads, {spec.seq}, {spec.seq}] scores "
                     f"among the {gib(temp)} of temporaries; --attention chunked (any backend) or splash (TPU) "
                     "keeps them O(seq)")
    if spec.program != "rollout":
        rows_per_micro = spec.batch // spec.micro_batches
        row_split = r["mesh"]["data"] * r["mesh"]["fsdp"]
        if rows_per_micro > row_split:  # more than one row per chip in each forward/backward
            hints.append(f"more micro-batches: --micro-batches {spec.micro_batches * 2} halves the rows per "
                         f"forward/backward ({rows_per_micro} over {row_split} chips now), and with them most "
                         "temporaries")
        if spec.remat != "full":
            hints.append("--remat full: recompute each layer's activations in the backward instead of keeping them")
    else:
        if r["mesh"].get("tensor", 1) == 1:
            hints.append("a tensor axis in the mesh (e.g. --mesh fsdp=-1,tensor=4): the rollout layout splits "
                         "weights, heads and the KV cache over it, where now every chip holds all weights")
        hints.append(f"fewer decode slots (--slots {max(spec.samples, spec.live_sequences // 2)}): the KV cache "
                     "and prefill activations scale with the sequences decoded at once")
    if spec.param_dtype == "float32":
        hints.append(f"--param-dtype bfloat16 halves parameters and optimizer state ({gib(state)} per chip with "
                     "what stays resident)")
    hints.append(f"a larger mesh: parameters, optimizer state and resident state take {gib(state)} per chip "
                 f"on {r['devices']} chips and shrink in proportion to the chip count")
    return hints


def format_report(r: dict[str, Any]) -> str:
    def row(label: str, n: int, note: str = "") -> str:
        return f"  {label:<26}{n / GIB:9.2f} GiB" + (f"   ({note})" if note else "")

    mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items())
    program = r["program"] + (f" ({r['algorithm']})" if "algorithm" in r else "")
    rows = (f"{r['batch']} sequences ({r['samples']} per prompt), prompt {r['prompt_len']} of {r['seq']} tokens, "
            f"{r['live_sequences']} decoded at once ({r['slots']} slots), layout {r['rollout_rules']} "
            f"(rows split {r['rollout_batch_split']} ways)"
            if r["program"] == "rollout" else
            f"batch {r['batch']} x seq {r['seq']}  micro-batches {r['micro_batches']}  remat {r['remat']}  "
            f"loss chunk {r['chunk']}")
    lines = [
        f"{program}: {r['model']} ({r['num_params'] / 1e9:.2f}B params) on {r['target']} "
        f"({r['devices']} x {r['chip']})  mesh {mesh}  rules {r['rules']}",
        rows,
        f"compute {r['dtype']}  master {r['param_dtype']}  attention {r['attention']}"
        + (f"  LoRA rank {r['lora_rank']} ({r['adapter_params'] / 1e6:.1f}M float32 adapter params, the only "
           "trained weights)" if r.get("lora_rank") else "")
        + (f"  fused: {', '.join(r['fused_kernels'])}" if r["fused_kernels"] else ""),
        "per chip:",
        row("parameters", r["params_bytes"]),
        row("optimizer state", r["opt_state_bytes"]),
        row("arguments (all)", r["argument_bytes"]),
        row("temporaries", r["temp_bytes"]),
        row("program peak", r["peak_bytes"], "arguments + outputs - donated + temporaries + code"),
    ]
    lines += [row(f"+ {name}", n, "resident during the run") for name, n in r["resident"].items()]
    verdict = "fits" if r["fits"] else "DOES NOT FIT"
    lines.append(row("total", r["total_bytes"], f"of {r['hbm_bytes'] / GIB:.0f} GiB HBM: {verdict}"))
    if r["program"] == "rollout":
        b = r["roofline"]
        lines.append(f"roofline: prefill >= {b['prefill']['seconds']:.3g} s, decode step >= "
                     f"{b['decode_step']['seconds'] * 1e3:.3g} ms, rollout >= {b['seconds']:.3g} s, "
                     f"MFU <= {b['mfu_bound']:.1%}")
    else:
        lines.append(f"roofline: step >= {r['step_seconds_lower_bound']:.3g} s, MFU <= {r['mfu_bound']:.1%}")
    if r["hints"]:
        lines.append("to make it fit:")
        lines += [f"  - {h}" for h in r["hints"]]
    if "compile_refused" in r:
        lines.append(f"the TPU compiler refused the program (temporaries above are what it named): {r['compile_refused']}")
    lines.append(f"compile time {r['compile_seconds']} s")
    return "\n".join(lines)
