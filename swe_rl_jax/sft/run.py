"""The sharded SFT run: seqio SFT mixture (packed, loss on responses only) → train loop → eval → HF export.

Paper defaults (SoRFT: full fine-tune, global batch 128, 2 epochs, peak LR 1e-5, cosine, 3% warmup)
are the `configs/sorft_sft.yaml` preset; `configs/sft_tiny.yaml` is the CPU scale used by tests.
The number of steps is `num_steps`, or, when 0, `epochs` × train examples / batch size.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import jax
import numpy as np

from swe_rl_jax.config import require, to_dict
from swe_rl_jax.data.records import SubtaskCounts, iter_jsonl, read_split_records, records_file
from swe_rl_jax.models import lora
from swe_rl_jax.models.decoder import RematPolicy
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import DistributedConfig, barrier, global_batch, initialize, local_rows
from swe_rl_jax.parallel.placement import replica_on_host
from swe_rl_jax.parallel.rules import MeshSharding
from swe_rl_jax.model_source import ModelSource, export_policy, jnp_dtype, load_policy, sampling_config, tokenizer_source
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.subtasks import SUBTASKS
from swe_rl_jax.train import (BudgetedStep, Checkpointer, LoopConfig, MetricsWriter, OptimizerConfig, RematSetting,
                              abstract_train_state, batch_shardings, budgeted_step, create_train_state, from_seqio,
                              learning_rate_schedule, make_optimizer, make_sft_loss, make_train_step, resume,
                              train_flops_per_token, train_loop)
from swe_rl_jax.train.losses import SEQIO_SFT_FEATURES


@dataclass(frozen=True)
class SFTConfig:
    sft_dir: str = ""  # rejection-sampled examples, <split>/<subtask>.jsonl with a `response` field
    model: ModelSource = field(default_factory=ModelSource)
    records_dir: str = ""  # task records for the greedy subtask eval ("" disables it)
    out_dir: str = "outputs/sft"
    subtasks: tuple[str, ...] = ()  # default: every subtask with SFT data
    inputs_length: int = 1536  # prompt tokens per packed row (seqio PrefixLM lengths)
    targets_length: int = 512  # response tokens per packed row
    pack: bool = True
    # Examples each subtask's stream shuffles over (seqio's default 1,000). The pipeline tokenizes
    # this many before the first batch (~20 s on 2 cores); a short run can ask for fewer.
    shuffle_buffer_size: int = 1000
    batch_size: int = 8  # packed rows per step (global)
    micro_batches: int = 1
    epochs: float = 2.0
    num_steps: int = 0  # 0: from epochs
    # The LR schedule's length (0: the run's steps). Longer than num_steps, the run stops part-way
    # along it and a later invocation with more num_steps goes on along the same schedule.
    schedule_steps: int = 0
    optimizer: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=1e-5, warmup_ratio=0.03))
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rules: str = "fsdp"
    # Activation checkpointing of the layers; "auto": the cheapest policy (none, attention, dots,
    # full) whose compiled step fits memory_budget_gb (train/budget.py). Without it SmolLM2's step
    # at 2 x 832 tokens keeps 6.2 GiB of activations (docs/BENCHMARKS.md, "SFT memory").
    remat: RematSetting = "auto"
    memory_budget_gb: float = 0.0  # 0: 90 % of the device's memory (a quarter of the host's RAM on CPU)
    loss_chunk: int = 512
    eval_examples: int = 16  # held-out records per subtask for the greedy eval (0: none)
    eval_max_new_tokens: int = 256
    save_every: int = 50
    keep_checkpoints: int = 2
    export: bool = True
    seed: int = 0
    progress: bool = True
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # multi-host (docs/TRAINING.md)

    def __post_init__(self) -> None:
        require(self.batch_size > 0, "batch_size", "must be > 0")
        require(self.shuffle_buffer_size > 0, "shuffle_buffer_size", "must be > 0")
        require(self.micro_batches > 0 and self.batch_size % self.micro_batches == 0, "micro_batches",
                f"must divide batch_size {self.batch_size}")
        require(self.epochs > 0 or self.num_steps > 0, "epochs", "epochs or num_steps must be > 0")
        require(self.num_steps >= 0, "num_steps", "must be >= 0")
        require(self.schedule_steps >= 0, "schedule_steps", "must be >= 0")
        require(all(s in SUBTASKS for s in self.subtasks), "subtasks", f"each must be one of {SUBTASKS}")
        get_rules(self.rules)


def _sft_subtasks(config: SFTConfig) -> list[str]:
    found = [s for s in SUBTASKS if records_file(config.sft_dir, "train", s).is_file()
             and records_file(config.sft_dir, "train", s).stat().st_size > 0]
    chosen = [s for s in found if not config.subtasks or s in config.subtasks]
    if not chosen:
        raise FileNotFoundError(f"no SFT examples under {config.sft_dir}/train/ for subtasks {config.subtasks or SUBTASKS}")
    return chosen


def sft_example_counts(config: SFTConfig, split: str, subtasks: list[str], tokenizer: Any) -> SubtaskCounts:
    """SFT examples per subtask that fit the packed row lengths, and those the seqio pipeline drops
    (`prompt_too_long`: over `inputs_length`; `response_too_long`: over `targets_length`), counted
    with the tokenization the tasks use (`ChatTokenizer.encode_prompt` / `encode_response`)."""
    counts = SubtaskCounts()
    for subtask in subtasks:
        path = records_file(config.sft_dir, split, subtask)
        if not path.is_file():
            continue
        for _, row in iter_jsonl(path):
            if len(tokenizer.encode_prompt(row["messages"])) > config.inputs_length:
                counts.skip(subtask, "prompt_too_long")
            elif len(tokenizer.encode_response(row["response"])) > config.targets_length:
                counts.skip(subtask, "response_too_long")
            else:
                counts.keep(subtask)
    return counts


class SeqioBatches:
    """Deterministic SFT batches from the seqio mixture; `from_position(p)` resumes exactly.

    `rows`: the rows of every global batch this process reads (`parallel.distributed.local_rows`;
    all of them with one process). The packed stream is the same on every host; each host turns
    only its rows into arrays, so the global batch is the single-process one.
    """

    def __init__(self, config: SFTConfig, subtasks: list[str], pad_id: int):
        from swe_rl_jax.data import seqio_tasks as st  # TensorFlow stays out of the import path

        self.st = st
        self.config = config
        self.rows = slice(None)
        tokenizer = tokenizer_source(config.model)

        def register(build: bool) -> Any:
            return st.register_tasks(None, tokenizer, sft_dir=config.sft_dir, data_dir=str(Path(config.out_dir) / "tfds"),
                                     sft_subtasks=subtasks, shuffle_buffer_size=config.shuffle_buffer_size, build=build,
                                     progress=config.progress)

        # One host builds the TFDS datasets; the others wait for it, then only read them.
        first = jax.process_index() == 0
        self.registration = register(build=True) if first else None
        barrier("sft tfds built")
        self.registration = self.registration or register(build=False)
        self.converter = st.ChatFeatureConverter(pack=config.pack, pad_id=pad_id)
        self.lengths = {"inputs": config.inputs_length, "targets": config.targets_length}

    def shapes(self) -> dict[str, tuple[int, int]]:
        """Global [batch, length] of every batch array."""
        lengths = self.converter.get_model_feature_lengths(self.lengths)
        return {ours: (self.config.batch_size, lengths[theirs]) for theirs, ours in SEQIO_SFT_FEATURES.items()}

    def _rows(self, features: Any) -> Any:
        return {k: v[self.rows] for k, v in features.items()}

    def _dataset(self, split: str, shuffle: bool, epochs: Optional[int]) -> Any:
        import seqio

        return seqio.get_dataset(self.st.SFT_MIXTURE, self.lengths, self.converter, dataset_split=split, shuffle=shuffle,
                                 seed=self.config.seed, num_epochs=epochs, batch_size=self.config.batch_size)

    def from_position(self, position: int) -> Iterator[dict[str, np.ndarray]]:
        ds = self._dataset("train", shuffle=True, epochs=None).skip(position).map(self._rows)
        for features in ds.as_numpy_iterator():
            yield {k: np.asarray(v, np.int32) for k, v in from_seqio(features).items()}

    def validation(self) -> list[dict[str, np.ndarray]]:
        try:
            ds = self._dataset("validation", shuffle=False, epochs=1)
        except Exception:  # seqio raises when no task has a validation split
            return []
        out = []
        for features in ds.as_numpy_iterator():
            batch = {k: np.asarray(v, np.int32) for k, v in from_seqio(features).items()}
            short = self.config.batch_size - batch["tokens"].shape[0]
            if short:  # pad the last batch with empty rows (loss_mask 0) to the compiled shape
                batch = {k: np.concatenate([v, np.zeros((short, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}
            out.append({k: v[self.rows] for k, v in batch.items()})
        return out


def run_sft(config: SFTConfig) -> dict[str, Any]:
    """Trains, evaluates, exports; returns a summary dict (also written to out_dir/summary.json)."""
    require(bool(config.sft_dir), "sft_dir", "is required")
    initialize(config.distributed)  # before anything touches a device
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mesh = make_mesh(config.mesh)
    rules = get_rules(config.rules)
    model_config, params, tokenizer = load_policy(config.model, mesh, rules)
    subtasks = _sft_subtasks(config)
    counts = sft_example_counts(config, "train", subtasks, tokenizer)
    print(f"sft examples (train): {counts.describe()}", flush=True)
    n_train = sum(counts.kept.values())
    # A subtask none of whose examples fits would be an empty task in the mixture, which seqio's
    # endlessly repeated sampling waits on forever: refuse it, naming it.
    empty = [s for s in subtasks if not counts.kept[s]]
    require(not empty, "inputs_length", f"no {', '.join(empty)} SFT example fits inputs_length={config.inputs_length} "
            f"and targets_length={config.targets_length} ({counts.describe()}): raise the lengths or leave "
            f"{'it' if len(empty) == 1 else 'them'} out of subtasks")
    # An epoch is counted in examples / batch rows; with packing a row holds several examples, so
    # this over-counts steps per epoch (never under-trains). Set num_steps to control it exactly.
    num_steps = config.num_steps or max(1, math.ceil(config.epochs * n_train / config.batch_size))
    opt_config = dataclasses.replace(config.optimizer, total_steps=config.schedule_steps or num_steps)
    optimizer = make_optimizer(opt_config)
    param_dtype = jnp_dtype(config.model.param_dtype)
    state, state_sh = create_train_state(model_config, optimizer, mesh, rules, jax.random.PRNGKey(config.seed),
                                         params=params, param_dtype=param_dtype)
    del params
    shard = MeshSharding(mesh, rules)
    batches = SeqioBatches(config, subtasks, tokenizer.pad_id)
    shapes = batches.shapes()
    b_sh = batch_shardings(mesh, rules, {k: jax.ShapeDtypeStruct(s, np.int32) for k, s in shapes.items()})
    batches.rows = local_rows(b_sh["tokens"], shapes["tokens"])  # this host reads only these rows
    place = lambda local: global_batch(local, b_sh, config.batch_size)  # noqa: E731

    def build(remat: RematPolicy) -> Any:
        return make_train_step(make_sft_loss(model_config, chunk=config.loss_chunk, remat=remat, shard=shard),
                               optimizer, state_sh, b_sh, num_micro_batches=config.micro_batches,
                               learning_rate=learning_rate_schedule(opt_config))

    step = budgeted_step(build, config.remat, config.memory_budget_gb)

    checkpointer = Checkpointer(out / "checkpoints", keep=config.keep_checkpoints)
    state, position, resumed = resume(checkpointer,
                                      abstract_train_state(model_config, optimizer, state_sh, param_dtype),
                                      lambda: state, config=to_dict(config))
    writer = MetricsWriter(out / "metrics")
    seq = shapes["tokens"][1]
    try:
        result = train_loop(
            state, step, lambda p: (place(b) for b in batches.from_position(p)),
            LoopConfig(num_steps=num_steps, save_every=config.save_every, progress=config.progress),
            start_position=position, checkpointer=checkpointer, writer=writer, meta={"config": to_dict(config)},
            resumed_meta=resumed,
            tokens_per_batch=config.batch_size * seq,
            flops_per_batch=train_flops_per_token(model_config, seq) * config.batch_size * seq,
        )
    finally:
        # An open CheckpointManager keeps non-daemon threads alive; a failed step must still let
        # the process exit (seen: an out-of-memory error left the process hanging).
        checkpointer.close()
    state = result.state
    summary: dict[str, Any] = {"steps": result.position, "stop_reason": result.reason, "train_examples": n_train,
                               "examples": counts.to_json(),
                               "skipped_steps": result.skipped_steps,
                               "train_loss_first": result.first_loss, "train_loss_last": result.last_loss,
                               "remat": (step.chosen[0] if isinstance(step, BudgetedStep) else "") or config.remat}

    val = batches.validation()
    if val:
        loss_fn = make_sft_loss(model_config, chunk=config.loss_chunk, shard=shard)  # no backward: no remat
        eval_loss = jax.jit(lambda p, b: loss_fn(p, b), in_shardings=(state_sh.params, b_sh))
        total, tokens = 0.0, 0.0
        for b in val:
            loss_sum, aux = eval_loss(state.params, place(b))
            total, tokens = total + float(loss_sum), tokens + float(aux["loss_tokens"])
        summary["heldout_loss"] = total / max(tokens, 1.0)
        writer.write(result.position, {"heldout_loss": summary["heldout_loss"]})
    if config.records_dir and config.eval_examples:
        # The sampler reads merged weights, knowing nothing of adapters.
        eval_params = lora.folded(model_config.lora, replica_on_host(model_config, state.params, rules))
        summary["heldout_eval"] = evaluate_split(sampling_config(model_config, config.model).replace(lora=None),
                                                 eval_params, tokenizer, config, "validation")
    writer.close()
    if config.export:
        summary.update(export_policy(out, model_config, state.params, config.model))  # export_dir, adapter_dir
    if jax.process_index() == 0:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def evaluate_split(model_config, params, tokenizer, config: SFTConfig, split: str) -> dict[str, Any]:
    from swe_rl_jax.eval.on_records import evaluate

    subtasks = [s for s in SUBTASKS if not config.subtasks or s in config.subtasks]
    records = read_split_records(config.records_dir, split, subtasks, config.eval_examples)
    if not records:
        return {}
    sampling = SamplingParams(max_new_tokens=config.eval_max_new_tokens, temperature=0.0, n=1,
                              eos_ids=tokenizer.eos_ids)
    return evaluate(model_config, params, tokenizer, records, sampling, config.seed).summary
