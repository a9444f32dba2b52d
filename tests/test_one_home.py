"""One home for each concept: the subtask definitions are the ones every layer uses, libraries
never import the command layer, the checkpoint readers do not import each other, reward names
fail at config load, and greedy rollouts' log-probs agree between sampler and trainer."""
import ast
from pathlib import Path

import jax
import numpy as np
import pytest

from swe_rl_jax.config import ConfigError, load_config
from swe_rl_jax.subtasks import (DEFAULT_REWARDS, DEFINITIONS, EDIT_SUBTASKS, LOCALIZATION_SUBTASKS, SORFT_SUBTASKS,
                                 SUBTASKS, format_ok, subtask)

PACKAGE = Path(__file__).resolve().parents[1] / "swe_rl_jax"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_libraries_never_import_commands_or_the_cli():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("commands/") or rel == "cli.py":
            continue
        offenders += [f"{rel}: {m}" for m in _imports(path)
                      if m == "swe_rl_jax.cli" or m.startswith("swe_rl_jax.commands")]
    assert offenders == []
    # The trainers share rl/policy_update.py, not each other's modules.
    assert "swe_rl_jax.rl.grpo" not in _imports(PACKAGE / "rl" / "ppo.py")
    assert "swe_rl_jax.rl.ppo" not in _imports(PACKAGE / "rl" / "grpo.py")


def test_the_harness_does_not_import_the_rewards():
    """rewards/execution.py runs the harness; the harness takes its path rules from swe_rl_jax/paths.py,
    below both, so the two packages do not import each other."""
    offenders = [f"{p.name}: {m}" for p in (PACKAGE / "harness").rglob("*.py") for m in _imports(p)
                 if m.startswith("swe_rl_jax.rewards")]
    assert offenders == []
    assert "swe_rl_jax.paths" in _imports(PACKAGE / "harness" / "patching.py")
    assert "swe_rl_jax.harness.runner" in _imports(PACKAGE / "rewards" / "execution.py")


def test_one_sandbox_for_model_written_code():
    """Every command line that runs model-written code (install steps, tests, reproduction scripts,
    synthesis's runs) is built in harness/sandbox.py and started from harness/runner.py: no other
    module names the sandbox's tools (cgexec, which puts a command in its cgroup, among them) or
    calls `run_isolated`. The kernel limits have one home each: cgroups in harness/cgroups.py (the
    only module that makes, reads or removes a run's cgroup), a run's file system in
    harness/runfs.py (the only module besides sandbox.py that mounts)."""
    import re

    tools = re.compile(r"[\"'](bwrap|unshare|setpriv|prlimit|cgexec)[\"']")
    builders, callers, groups, mounts = [], [], [], []
    for path in PACKAGE.rglob("*.py"):
        rel, text = path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8")
        if rel != "harness/sandbox.py" and tools.search(text):
            builders.append(rel)
        if rel not in ("harness/sandbox.py", "harness/runner.py") and re.search(r"\brun_isolated\(", text):
            callers.append(rel)
        if rel != "harness/cgroups.py" and re.search(r"cgroup\.procs|cpuacct\.usage|pids\.max|memory\.max", text):
            groups.append(rel)
        if rel not in ("harness/sandbox.py", "harness/runfs.py") and re.search(r"[\"']u?mount[\"']", text):
            mounts.append(rel)
    assert builders == [] and callers == [] and groups == [] and mounts == []
    assert re.search(r"\brun_isolated\(", (PACKAGE / "harness" / "runner.py").read_text())


def test_subtask_definitions_are_the_ones_every_layer_uses():
    from swe_rl_jax.data import records, seqio_tasks, tfds_builder
    from swe_rl_jax.data.tasks import BUILDERS
    from swe_rl_jax.rewards import get_reward_spec
    from swe_rl_jax.rewards.localization import LEVELS

    assert SUBTASKS == records.SUBTASKS == tfds_builder.SUBTASKS == seqio_tasks.SUBTASKS == tuple(BUILDERS)
    assert SORFT_SUBTASKS == seqio_tasks.SORFT_SUBTASKS and "swe_rl" not in SORFT_SUBTASKS
    assert {c.subtask for c in tfds_builder.SweSubtasks.BUILDER_CONFIGS} == set(SUBTASKS)
    assert set(LOCALIZATION_SUBTASKS) | set(EDIT_SUBTASKS) == set(SUBTASKS)
    assert {subtask(s).level for s in LOCALIZATION_SUBTASKS} == set(LEVELS)
    for name, reward in DEFAULT_REWARDS.items():
        assert get_reward_spec(reward).name == reward, name
    with pytest.raises(KeyError, match="unknown subtask 'poetry'"):
        subtask("poetry")


def test_format_correct_kinds_per_subtask():
    # A localization answer naming items the input lacks is well formed; an edit that applies but
    # changes nothing is well formed for edit generation; SWE-RL counts only a scored answer.
    assert format_ok("file_localization", "absent_items") and not format_ok("file_localization", "empty_edit")
    assert format_ok("edit_generation", "empty_edit") and not format_ok("edit_generation", "absent_items")
    assert format_ok("swe_rl", "ok") and not format_ok("swe_rl", "empty_edit")
    assert format_ok(None, "absent_items") and not format_ok(None, "no_blocks")
    assert all(d.acceptance == ("threshold" if s == "swe_rl" else "overlap") for s, d in DEFINITIONS.items())


def test_checkpoint_readers_do_not_import_each_other():
    """`loader.py` alone decides HF or GGUF; the format readers import neither each other nor it."""
    ckpt = PACKAGE / "checkpoints"
    readers = {"hf": "swe_rl_jax.checkpoints.hf", "gguf": "swe_rl_jax.checkpoints.gguf"}
    for name, module in readers.items():
        others = set(readers.values()) - {module} | {"swe_rl_jax.checkpoints.loader"}
        assert not _imports(ckpt / f"{name}.py") & others, name
    importers = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                 if set(readers.values()) <= _imports(p)}
    assert importers == {"checkpoints/loader.py"}
    # The check "a directory without config.json holding a .gguf file" is written once.
    assert {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
            if 'suffix == ".gguf"' in p.read_text(encoding="utf-8")
            and '"config.json").exists()' in p.read_text(encoding="utf-8")} == {"checkpoints/loader.py"}


@pytest.mark.parametrize("cls_path", ["swe_rl_jax.rl.run:RLConfig", "swe_rl_jax.eval.run:EvalConfig"])
def test_misspelled_reward_fails_when_the_config_loads(cls_path):
    module, name = cls_path.split(":")
    cls = getattr(__import__(module, fromlist=[name]), name)
    with pytest.raises(ConfigError, match=r"rewards.swe_rl: unknown reward 'swe_rl_discreet'"):
        load_config(cls, None, ["records_dir=x", "rewards.swe_rl=swe_rl_discreet"])
    with pytest.raises(ConfigError, match=r"rewards.swe_rl: unknown reward 'no_such_module:fancy': cannot import module 'no_such_module'"):
        load_config(cls, None, ["records_dir=x", "rewards.swe_rl=no_such_module:fancy"])
    with pytest.raises(ConfigError, match="keys must be subtasks"):
        load_config(cls, None, ["records_dir=x", "rewards.poetry=swe_rl"])
    assert load_config(cls, None, ["records_dir=x", "rewards.swe_rl=swe_rl_lenient"]).rewards == {
        "swe_rl": "swe_rl_lenient"}


def test_greedy_rollout_logprobs_agree_between_sampler_and_trainer():
    from swe_rl_jax.models import model_config_from_dict
    from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
    from swe_rl_jax.rl.config import GRPOConfig
    from swe_rl_jax.rl.policy_update import PolicyUpdater, TrainerSetup, UpdateConfig
    from swe_rl_jax.rl.rollout import build_rollout_batch
    from swe_rl_jax.sampling import SamplingParams, generate
    from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

    config = model_config_from_dict(dict(family="llama", vocab_size=32, hidden_size=32, intermediate_size=64,
                                         num_layers=1, num_heads=2, num_kv_heads=1, rope_theta=10000.0))
    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    optimizer = make_optimizer(OptimizerConfig(lr=1e-3, total_steps=1, schedule="constant"))
    state, shardings = create_train_state(config, optimizer, mesh, rules, jax.random.PRNGKey(0))
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=())
    assert greedy.logprob_temperature == 1.0 and SamplingParams(temperature=0.7).logprob_temperature == 0.7
    prompts = [[1, 2, 3], [4, 5]]
    results = generate(config, state.params, prompts, greedy, 0)
    updater = PolicyUpdater(TrainerSetup(config, shardings, optimizer, mesh, rules, pad_id=0), state,
                            GRPOConfig(), greedy, UpdateConfig(loss_chunk=8, remat="none"), keep_reference=False)
    batch = build_rollout_batch(prompts, results, 0, "none").arrays()
    logp = np.asarray(updater._logp(state.params, batch)[0])
    mask = batch["loss_mask"] > 0
    sampler = batch["logp_sampler"][mask]
    assert mask.sum() == sum(r.length for r in results) == 12
    np.testing.assert_allclose(logp[mask], sampler, atol=2e-5)
    assert np.all(sampler < 0)  # real log-probs of the model's distribution, not ~0 as at T -> 0
