"""The train step: gradient accumulation with a global denominator, non-finite skipping,
mixed precision, and the loop's metrics, stop rules and writers (1 device)."""
from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from swe_rl_jax.models import ModelConfig, forward
from swe_rl_jax.models.lora import LoraConfig
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.train import (
    LoopConfig,
    MetricsWriter,
    OptimizerConfig,
    batch_shardings,
    create_train_state,
    make_optimizer,
    make_sft_loss,
    make_train_step,
    mfu,
    next_token_targets,
    train_flops_per_token,
    train_loop,
)

CFG = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2)
MESH = make_mesh(MeshConfig())
RULES = get_rules("fsdp")


def _batch(rows_tokens: list[int], seq: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    """Rows with the given numbers of loss tokens (at the end of each row, as responses are)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((len(rows_tokens), seq), np.float32)
    for i, n in enumerate(rows_tokens):
        mask[i, seq - n:] = 1.0
    return {"tokens": rng.integers(0, CFG.vocab_size, (len(rows_tokens), seq)).astype(np.int32), "loss_mask": mask}


def _step(optimizer, k: int, batch, config: ModelConfig = CFG, loss_fn=None, **kw):
    state, shardings = create_train_state(config, optimizer, MESH, RULES, jax.random.PRNGKey(0))
    loss_fn = loss_fn or make_sft_loss(config, chunk=4)
    step = make_train_step(loss_fn, optimizer, shardings, batch_shardings(MESH, RULES, batch), num_micro_batches=k, **kw)
    return state, step


def test_accumulated_micro_batches_equal_one_big_batch_with_unequal_token_counts():
    # k=4 micro-batches take rows (0,4), (1,5), (2,6), (3,7): 1+9, 2+1, 9+9, 3+1 loss tokens.
    batch = _batch([1, 2, 9, 3, 9, 1, 9, 1])
    sgd = optax.sgd(1.0)  # params move by exactly -grad, so params compare gradients
    state, step = _step(sgd, 4, batch)
    params0 = jax.tree.map(np.asarray, state.params)

    def naive_mean_ce(p):  # independent reference: one big batch, full logits, one global mean
        logp = jax.nn.log_softmax(forward(CFG, p, batch["tokens"]), axis=-1)
        logp = jnp.take_along_axis(logp, next_token_targets(jnp.asarray(batch["tokens"]))[..., None], -1)[..., 0]
        return -jnp.sum(logp[:, :-1] * batch["loss_mask"][:, 1:]) / batch["loss_mask"].sum()

    ref_loss, ref_grads = jax.jit(jax.value_and_grad(naive_mean_ce))(params0)
    state, metrics = step(state, batch)
    assert float(metrics["denominator"]) == 35.0 and float(metrics["loss_tokens"]) == 35.0
    assert abs(float(metrics["loss"]) - float(ref_loss)) < 1e-6
    for p, p0, g in zip(jax.tree.leaves(state.params), jax.tree.leaves(params0), jax.tree.leaves(ref_grads)):
        np.testing.assert_allclose(p0 - np.asarray(p), g, atol=1e-6, rtol=0)
    # The test can tell: a mean of per-micro-batch means is a different number.
    loss_fn = jax.jit(make_sft_loss(CFG, chunk=4))
    means = [loss_fn(params0, {k: v[m::4] for k, v in batch.items()}) for m in range(4)]
    assert abs(np.mean([float(s) / float(a["loss_tokens"]) for s, a in means]) - float(ref_loss)) > 1e-3


def test_non_finite_step_is_skipped_and_counted():
    sft = make_sft_loss(CFG, chunk=4)

    def poisoned(params, batch):  # NaN loss and gradients when batch["poison"] is set
        loss, aux = sft(params, batch)
        return loss * jnp.where(batch["poison"][0] > 0, jnp.nan, 1.0), aux

    batch = _batch([3, 4])
    opt = make_optimizer(OptimizerConfig(lr=1e-2, warmup_steps=0, total_steps=10))
    state, step = _step(opt, 1, {**batch, "poison": np.zeros(2, np.float32)}, loss_fn=poisoned)
    before = jax.tree.map(np.asarray, (state.params, state.opt_state))
    state, metrics = step(state, {**batch, "poison": np.ones(2, np.float32)})
    assert int(metrics["finite"]) == 0 and int(state.step) == 0
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves((state.params, state.opt_state))):
        np.testing.assert_array_equal(a, b)
    state, metrics = step(state, {**batch, "poison": np.zeros(2, np.float32)})
    assert int(metrics["finite"]) == 1 and int(state.step) == 1
    assert not np.array_equal(before[0]["embed"], np.asarray(state.params["embed"]))

    # The loop stops after max_bad_steps non-finite steps in a row and logs each one.
    def batches(position):
        while True:
            yield {**batch, "poison": np.full(2, float(position >= 1), np.float32)}
            position += 1

    result = train_loop(state, step, batches, LoopConfig(num_steps=10, max_bad_steps=3, progress=False))
    assert result.reason == "diverged" and result.position == 4 and result.skipped_steps == 3
    assert [h["finite"] for h in result.history] == [1, 0, 0, 0]


def test_bfloat16_compute_keeps_float32_master_weights():
    batch = _batch([5, 6])
    opt = make_optimizer(OptimizerConfig(lr=1e-3, warmup_steps=0, total_steps=10))
    state, step = _step(opt, 1, batch, config=CFG.replace(dtype="bfloat16"))
    f32_loss = jax.jit(make_sft_loss(CFG, chunk=4))(state.params, batch)[0] / batch["loss_mask"].sum()
    state, metrics = step(state, batch)
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
    assert float(metrics["loss"]) != float(f32_loss)  # really computed in bfloat16
    assert abs(float(metrics["loss"]) - float(f32_loss)) < 2e-2


def test_loop_writes_jsonl_and_tensorboard_with_throughput_and_mfu(tmp_path):
    batch = _batch([5, 6])
    opt = make_optimizer(OptimizerConfig(lr=1e-3, warmup_steps=1, total_steps=3))
    state, step = _step(opt, 1, batch)
    flops = train_flops_per_token(CFG, 12) * batch["tokens"].size
    writer = MetricsWriter(tmp_path / "logs")
    result = train_loop(state, step, lambda p: iter(lambda: batch, None), LoopConfig(num_steps=3, progress=False),
                        writer=writer, tokens_per_batch=batch["tokens"].size, flops_per_batch=flops)
    writer.close()
    assert result.reason == "done" and int(result.state.step) == 3
    records = [json.loads(line) for line in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    for r in records:
        assert r["tokens_per_second"] == pytest.approx(24 / r["step_seconds"])
        assert {"loss", "grad_norm", "finite", "skipped_steps"} <= r.keys()
        assert r["host/peak_rss_gb"] >= r["host/rss_gb"] > 0
    assert "mfu" not in records[0]  # CPU: no known peak, so no MFU unless configured
    assert list((tmp_path / "logs").glob("events.out.tfevents.*"))


def test_flop_count_and_mfu_by_hand():
    # Per layer: q,o 32·32 each, k,v 32·16 each, MLP 3·32·64, 2 norms of 32; plus the final norm
    # and the output projection 32·64 (the untied input embedding is a lookup, not counted).
    n = 2 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64 + 2 * 32) + 32 + 32 * 64
    per_token = 6 * n + 12 * 2 * 4 * 8 * 12  # attention: 12 · layers · heads · head_dim · seq
    assert train_flops_per_token(CFG, 12) == per_token
    # LoRA rank 2 on q and v: a frozen base gets no weight gradients (4·n), the adapters train (6·each);
    # per layer q: A 32x2 + B 2x32, v: A 32x2 + B 2x16
    adapters = 2 * (32 * 2 + 2 * 32 + 32 * 2 + 2 * 16)
    lora_cfg = dataclasses.replace(CFG, lora=LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "v_proj")))
    assert train_flops_per_token(lora_cfg, 12) == 4 * n + 6 * adapters + 12 * 2 * 4 * 8 * 12
    assert mfu(1e12, 2.0, 4, 1e12) == pytest.approx(0.125)
    assert mfu(1e12, 2.0, 4, None) is None


def test_host_memory_matches_the_kernels_own_accounting():
    from swe_rl_jax.train.metrics import host_memory_gb

    ballast = np.ones(64 * 2**20 // 8)  # 64 MiB touched now: the resident size must see it
    memory = host_memory_gb()
    # /proc/self/status reports the same two numbers through another interface, in kB.
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    rss, peak = (int(status[k].split()[0]) / 2**20 for k in ("VmRSS", "VmHWM"))
    assert memory["host/rss_gb"] == pytest.approx(rss, abs=0.02)
    assert memory["host/peak_rss_gb"] == pytest.approx(peak, abs=0.02)
    assert memory["host/peak_rss_gb"] >= memory["host/rss_gb"] >= ballast.nbytes / 2**30
