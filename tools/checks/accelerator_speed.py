"""Parts 2 and 3 of tools/accelerator_check.py: speed and memory on the device.

A train program (`sft`: the SFT step; `rl`: the GRPO actor update) is the very program
`plan-memory` compiles (`plan.programs.BUILDERS`, which hands back its jitted step and abstract
arguments), built on the device with random weights and batch and run for 1 + N steps in a
process of its own (so the device's peak memory is this program's): compile time, compilations
after the first step (a recompilation per step is a defect), step time, tokens/s, MFU against the
chip's bf16 peak (`plan.chips`), the device's measured peak memory, and beside them what
`plan.report.plan` predicts for the same program and shapes.

`accelerator_check.py` runs `run_train_program` in a child process of its own (its `_CHILD`); this
module is not run as a script.

The sampler's decode speed (continuous batching, `sampling.Engine`) runs in the check's own process.
"""
from __future__ import annotations

import atexit
import shutil
import statistics
import tempfile
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelerator_common import CompileCounter, Part, Profile, profile_for  # noqa: E402

MIB = 2**20
# The measured device peak may exceed the plan's program peak by this share: the plan is XLA's
# buffer assignment of the program compiled for the CPU backend (or a TPU topology), while the
# device's allocator rounds and fragments its blocks, and cuBLAS / cuDNN workspaces live outside
# XLA's assignment. A plan that says "fits" with less headroom than this is not to be trusted.
MEMORY_SLACK = 0.25


def model_config(profile: Profile) -> Any:
    """The model trained and sampled: a preset's shapes with random weights, bfloat16 compute, the
    backend's attention (`auto`); on a CPU a 2-layer miniature."""
    from swe_rl_jax.models import ModelConfig, preset

    if profile.train_model == "tiny":
        return ModelConfig(family="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                           num_heads=4, num_kv_heads=2, qkv_bias=True, dtype="bfloat16", attention_impl="auto")
    return preset(profile.train_model, dtype="bfloat16", attention_impl="auto")


def local_chip() -> Any:
    """The chip table's entry for this device (None on a CPU or an unknown device)."""
    import jax

    from swe_rl_jax.plan.chips import chip_of_kind

    return chip_of_kind(jax.devices()[0].device_kind)


def plan_target(platform: str, chip: Any) -> str:
    """Where the plan compiles: the device's own TPU topology (one chip), else one CPU device
    judged against the device's chip (what `plan-memory --target cpu:1 --chip NAME` does)."""
    if platform == "tpu" and chip is not None and chip.name in ("v5p", "v5e", "v6e"):
        return f"{chip.name}:{'1x1x1' if chip.name == 'v5p' else '1x1'}"
    return "cpu:1"


def _concrete(abstract: Any, vocab: int, seed: int = 0) -> Any:
    """Device arrays for a program's abstract (state, batch): random weights, zero optimizer
    state, random tokens with their positions, unit loss masks and one segment a row, random
    advantages and log-probs near a language model's."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    state, batch = abstract
    key = jax.random.PRNGKey(seed)

    def put(x: np.ndarray, s: Any) -> Any:
        return jax.device_put(x.astype(s.dtype), s.sharding)

    def random_weight(s: Any, k: Any) -> Any:
        return jax.jit(lambda k: (0.02 * jax.random.normal(k, s.shape, jnp.float32)).astype(s.dtype),
                       out_shardings=s.sharding)(k)

    leaves, tree = jax.tree.flatten(state.params)
    params = jax.tree.unflatten(tree, [random_weight(s, k) for s, k in zip(leaves, jax.random.split(key, len(leaves)))])
    zeros = lambda s: jax.jit(lambda: jnp.zeros(s.shape, s.dtype), out_shardings=s.sharding)()  # noqa: E731
    state = state.replace(step=zeros(state.step), params=params, opt_state=jax.tree.map(zeros, state.opt_state),
                          rng=zeros(state.rng))
    rng = np.random.default_rng(seed)
    rows, seq = batch["tokens"].shape
    fill = {"tokens": lambda: rng.integers(0, vocab, (rows, seq)),
            "positions": lambda: np.broadcast_to(np.arange(seq), (rows, seq)),
            "segment_ids": lambda: np.ones((rows, seq)), "loss_mask": lambda: np.ones((rows, seq)),
            "advantages": lambda: rng.normal(size=batch["advantages"].shape)}
    out = {k: put(np.asarray(fill[k]() if k in fill else -1.0 - rng.random(s.shape)), s) for k, s in batch.items()}
    return state, out


def run_train_program(kind: str, platform: str, quick: bool) -> dict[str, Any]:
    import jax
    import numpy as np

    from swe_rl_jax.models.attention import choose_impl
    from swe_rl_jax.models.layers import AttentionMask
    from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
    from swe_rl_jax.plan.programs import BUILDERS, PlanSpec
    from swe_rl_jax.plan.report import plan
    from swe_rl_jax.train import mfu, train_flops_per_token

    profile = profile_for(platform, quick)
    counter = CompileCounter.get()
    if platform == "cpu":
        # The plan compiles for this very device: the run takes the plan's compiled program from
        # jax's compilation cache instead of compiling it a second time.
        cache_dir = tempfile.mkdtemp(prefix="accelerator_check_")
        atexit.register(shutil.rmtree, cache_dir, ignore_errors=True)  # each run used to leave its cache in /tmp
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    config = model_config(profile)
    seq, rows = profile.train_seq, profile.train_batch
    # What `auto` runs for this program's rows: SFT rows are packed (segment ids), the GRPO
    # update's rows are not; the plan must compile the same attention.
    spec_mask = AttentionMask(jax.numpy.arange(seq), jax.numpy.arange(seq),
                              q_segment=jax.numpy.ones((rows, seq), jax.numpy.int32) if kind == "sft" else None,
                              k_segment=jax.numpy.ones((rows, seq), jax.numpy.int32) if kind == "sft" else None)
    attention = choose_impl("auto", spec_mask, True, dtype=jax.numpy.bfloat16)
    chip = local_chip()
    spec = PlanSpec(program=kind, model=profile.train_model if profile.train_model != "tiny" else "smollm2-135m",
                    seq=seq, batch=rows, target=plan_target(platform, chip),
                    chip=None if platform == "tpu" and chip else (chip.name if chip else None), remat="full",
                    dtype="bfloat16", chunk=min(1024, seq), attention=attention, reference=True)
    out: dict[str, Any] = {"program": kind, "model": profile.train_model, "num_params": config.num_params(),
                           "compile_reused_from_plan": platform == "cpu",
                           "seq": seq, "batch": rows, "attention": attention, "remat": "full",
                           "device": jax.devices()[0].device_kind, "chip": chip.name if chip else None}
    try:
        predicted = plan(spec, config)
        out["plan"] = {k: predicted[k] for k in ("target", "chip", "peak_bytes", "total_bytes", "resident_bytes",
                                                 "hbm_bytes", "fits", "compile_seconds", "mfu_bound")}
    except Exception as e:  # a plan that cannot compile is a finding of its own, the run still goes on
        out["plan_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    mesh = make_mesh(MeshConfig(fsdp=1), jax.devices()[:1])
    program = BUILDERS[kind](spec.model_config(config), mesh, get_rules("fsdp"), spec)
    state, batch = _concrete(program.args, config.vocab_size)
    with counter.window() as first:
        state, metrics = program.step(state, batch)
        loss = float(metrics["loss"])
    times = []
    with counter.window() as rest:
        for _ in range(profile.train_steps):
            start = time.perf_counter()
            state, metrics = program.step(state, batch)
            jax.block_until_ready(metrics["loss"])
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    tokens = rows * seq
    flops = train_flops_per_token(config, seq) * tokens
    stats = jax.devices()[0].memory_stats() or {}
    out.update(first_step_seconds=first["wall_seconds"], first_step_compilations=first["count"],
               compile_seconds=first["compile_seconds"], compilations_after_first=rest["count"],
               steps=profile.train_steps, step_seconds=step_s, tokens_per_second=tokens / step_s,
               mfu=mfu(flops, step_s, 1, chip.peak_flops if chip else None), first_loss=loss,
               last_loss=float(metrics["loss"]), finite=bool(np.isfinite(loss) and np.isfinite(float(metrics["loss"]))),
               measured_peak_bytes=stats.get("peak_bytes_in_use"), device_bytes_limit=stats.get("bytes_limit"))
    return out


def judge_train_program(part: Part, memory: Part, r: dict[str, Any]) -> None:
    """The speed part's checks of one train program's run, and the memory part's."""
    kind = r["program"]
    part.measurements[kind] = r
    part.check(f"{kind}: compilations in {r['steps']} steps after the first", r["compilations_after_first"], 0)
    part.check(f"{kind}: loss finite", r["finite"], True, ok=r["finite"])
    if r["mfu"] is None:
        part.skipped.append(f"{kind} MFU: no bf16 peak for device {r['device']!r} in plan/chips.py")
    if "plan_error" in r:
        memory.check(f"{kind}: plan-memory compiles the program", r["plan_error"], "no error", ok=False)
        return
    p = r["plan"]
    memory.measurements[kind] = {"plan": p, "measured_peak_bytes": r["measured_peak_bytes"],
                                 "device_bytes_limit": r["device_bytes_limit"]}
    if r["measured_peak_bytes"] is None:
        memory.skipped.append(f"{kind} measured peak: the {r['device']} device reports no memory statistics "
                              f"(plan: program peak {p['peak_bytes'] / MIB:.1f} MiB on {p['target']})")
        return
    ratio = r["measured_peak_bytes"] / max(p["peak_bytes"], 1)
    memory.check(f"{kind}: measured peak / planned program peak", ratio, 1 + MEMORY_SLACK)
    if p["fits"] and r["device_bytes_limit"]:
        memory.check(f"{kind}: plan says fits, measured peak within the device's limit",
                     r["measured_peak_bytes"], r["device_bytes_limit"])


def sampler_speed(part: Part, profile: Profile) -> None:
    """Decode tokens/s of continuous batching: `sampler_requests` random prompts over
    `sampler_slots` slots, each run to `new_tokens` (EOS off); a second identical call must
    compile nothing."""
    import jax
    import numpy as np

    from swe_rl_jax.models import init_params
    from swe_rl_jax.sampling import Engine, SamplingParams

    config = model_config(profile).replace(attention_impl="auto")
    params = jax.jit(lambda k: jax.tree.map(lambda x: x.astype(jax.numpy.bfloat16), init_params(config, k)))(
        jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, config.vocab_size, profile.prompt_len).tolist() for _ in range(profile.sampler_requests)]
    engine = Engine(slots=profile.sampler_slots)
    sp = SamplingParams(max_new_tokens=profile.new_tokens, temperature=1.0, eos_ids=())
    counter = CompileCounter.get()
    with counter.window() as first:
        engine.generate(config, params, prompts, sp, 0)
    traced = engine.compilations
    with counter.window() as second:
        results = engine.generate(config, params, prompts, sp, 1)
    generated = sum(r.length for r in results)
    part.measurements["sampler"] = {
        "model": profile.train_model, "slots": profile.sampler_slots, "requests": profile.sampler_requests,
        "prompt_len": profile.prompt_len, "new_tokens": profile.new_tokens, "first_call_seconds": first["wall_seconds"],
        "first_call_compilations": first["count"], "compile_seconds": first["compile_seconds"],
        "seconds": second["wall_seconds"], "decode_tokens_per_second": generated / second["wall_seconds"]}
    part.check("sampler: every request ran to its length", generated, profile.sampler_requests * profile.new_tokens,
               ok=generated == profile.sampler_requests * profile.new_tokens)
    part.check("sampler: compilations in a second identical generate call", second["count"], 0)
    part.check("sampler: programs traced again in the second call", engine.compilations - traced, 0)
