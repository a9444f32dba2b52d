"""Every YAML preset in configs/ loads and validates into its command's config class."""
from pathlib import Path

import pytest

from swe_rl_jax.commands.demo import DemoConfig
from swe_rl_jax.pipeline.main_job import MainConfig
from swe_rl_jax.config import ConfigError, load_config
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.rl.agent_run import AgentRLConfig
from swe_rl_jax.rl.run import RLConfig
from swe_rl_jax.sft.run import SFTConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CLASSES = {"main": MainConfig, "grpo_demo": MainConfig, "resolve_demo": MainConfig, "demo": DemoConfig, "sorft_sft": SFTConfig, "sft_tiny": SFTConfig, "swe_rl_grpo": RLConfig,
           "sorft_ppo": RLConfig,
           "rl_tiny": RLConfig, "grpo_tests_pass": RLConfig,
           "agentless": ResolveConfig, "agentless_mini": ResolveConfig, "agent": ResolveConfig,
           "agent_grpo": AgentRLConfig, "agent_grpo_demo": AgentRLConfig}
# The resolve presets name ResolveConfig.selection and .verification (issue 38, branch i38-exec).
NEEDS_VERIFICATION = pytest.mark.skipif(not hasattr(ResolveConfig(), "verification"),
                                        reason="ResolveConfig has no selection/verification keys on this branch")


def test_every_preset_is_known():
    assert {p.stem for p in CONFIGS.glob("*.yaml")} <= set(CLASSES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=NEEDS_VERIFICATION) if CLASSES[n] is ResolveConfig else n
                                  for n in sorted(CLASSES)])
def test_preset_loads(name):
    cfg = load_config(CLASSES[name], CONFIGS / f"{name}.yaml")
    assert isinstance(cfg, CLASSES[name])


def test_paper_settings():
    sft = load_config(SFTConfig, CONFIGS / "sorft_sft.yaml")
    assert (sft.batch_size, sft.epochs, sft.optimizer.lr, sft.optimizer.schedule, sft.optimizer.warmup_ratio) == \
        (128, 2.0, 1e-5, "cosine", 0.03)
    rl = load_config(RLConfig, CONFIGS / "swe_rl_grpo.yaml")
    assert (rl.grpo.group_size, rl.update.prompts_per_step, rl.num_steps, rl.update.ppo_epochs) == (16, 32, 1600, 1)


def test_the_agent_preset_holds_mini_swe_agents_swebench_settings():
    """mini-swe-agent 2.4's config/benchmarks/swebench_backticks.yaml and agents/default.py, copied by hand."""
    agent = load_config(ResolveConfig, CONFIGS / "agent.yaml")
    assert agent.scaffold == "agent"
    a = agent.agent
    assert (a.step_limit, a.max_consecutive_format_errors, a.command_timeout_s) == (250, 3, 60)
    assert a.command_env == {"PAGER": "cat", "MANPAGER": "cat", "LESS": "-R", "PIP_PROGRESS_BAR": "off",
                             "TQDM_DISABLE": "1"}
    assert a.languages == ("mswea_bash_command",) and "```mswea_bash_command" in a.system_template


# Longest real prompts, Qwen tokens with the chat template (docs/DATA.md, "Prompt lengths"):
# 27 SWE-bench Lite instances built with the defaults and `--tokenizer qwen`.
REAL_MAX_PROMPT = {"file_localization": 12268, "function_localization": 9895, "line_localization": 8325,
                   "edit_generation": 8283, "swe_rl": 12051}
PAPER_CONTEXT = {"swe_rl_grpo": 16384}  # SWE-RL: 16k


def test_paper_presets_hold_the_paper_context_and_real_prompts():
    from swe_rl_jax.data.options import BuildOptions

    built = BuildOptions().max_prompt_tokens  # no task build-data writes is longer
    sft = load_config(SFTConfig, CONFIGS / "sorft_sft.yaml")
    assert sft.inputs_length >= built >= max(REAL_MAX_PROMPT[s] for s in sft.subtasks)
    for name in ("swe_rl_grpo", "sorft_ppo"):
        rl = load_config(RLConfig, CONFIGS / f"{name}.yaml")
        assert rl.max_prompt_tokens >= built >= max(REAL_MAX_PROMPT[s] for s in rl.subtasks), name
        assert rl.max_prompt_tokens + rl.sampling.max_new_tokens == PAPER_CONTEXT.get(name, 16384), name


def test_paper_presets_hold_deepswes_published_settings():
    """configs/agent_grpo.yaml against DeepSWE's release (rLLM v0.1 examples/swe/train_deepswe_32b.sh,
    its ppo_trainer.yaml defaults, agent_execution_engine.py, environments/swe/swe.py; the blog),
    copied by hand; each key's source is beside it in the file."""
    from swe_rl_jax.models.config import preset

    cfg = load_config(AgentRLConfig, CONFIGS / "agent_grpo.yaml")
    g, a, u, o = cfg.grpo, cfg.agent, cfg.update, cfg.optimizer
    # 8 problems x 8 episodes per step, one optimizer step per batch, 200 steps (the blog).
    assert (cfg.instances_per_step, g.group_size, u.ppo_epochs, u.minibatches, cfg.num_steps) == (8, 8, 1, 1, 200)
    # GRPO++: clip-higher, no KL, no entropy term, no length normalization.
    assert (g.clip_low, g.clip_high, g.kl_coef, g.entropy_coef, g.loss_agg) == (0.2, 0.28, 0.0, 0.0, "seq-mean-token-sum")
    assert (o.lr, o.schedule, o.warmup_ratio, o.weight_decay, o.clip_norm) == (1e-6, "constant", 0.0, 0.01, 1.0)
    # Episodes: 50 turns, a 4,096 + 32,768-token budget, 90 s commands, a 300 s verdict, 5,400 s episodes.
    assert (a.step_limit, a.max_context_tokens, a.command_timeout_s, a.judge_timeout_s, a.episode_command_s) == \
        (50, 4096 + 32768, 90, 300, 5400)
    assert (a.sampling.temperature, a.sampling.top_p, a.sampling.top_k, a.sampling.max_new_tokens) == (1.0, 1.0, 0, 32768)
    assert a.max_consecutive_format_errors == 0 and a.command_workers == 8 * 8
    assert cfg.model.lora is None and cfg.model.param_dtype == "float32"
    assert (cfg.save_every, cfg.heldout.every, cfg.heldout.samples) == (10, 10, 1)
    # Held out by repository: SWE-bench's 12 (DeepSWE trains on none of them, validates on Verified).
    assert len(cfg.heldout.repos) == 12 and {"sympy/sympy", "django/django"} <= set(cfg.heldout.repos)
    # Qwen3-32B's published config.json; the budget fits its 40,960-token context; the rollout's
    # tensor axis is its kv heads (DeepSWE's vLLM: tensor parallel 8).
    qwen = preset("qwen3-32b")
    assert (qwen.hidden_size, qwen.intermediate_size, qwen.num_layers, qwen.num_heads, qwen.num_kv_heads,
            qwen.head_dim_, qwen.vocab_size, qwen.tie_word_embeddings, qwen.rope_theta,
            qwen.max_position_embeddings) == (5120, 25600, 64, 64, 8, 128, 151936, False, 1e6, 40960)
    assert a.max_context_tokens < qwen.max_position_embeddings
    assert cfg.rollout.mesh.tensor == qwen.num_kv_heads == 8


def test_bad_override_is_named():
    with pytest.raises(ConfigError, match="grpo.group_size"):
        load_config(RLConfig, CONFIGS / "rl_tiny.yaml", ["grpo.group_size=1"])
    with pytest.raises(ConfigError, match="update.prompt_per_step"):
        load_config(RLConfig, CONFIGS / "rl_tiny.yaml", ["update.prompt_per_step=3"])


def test_sorft_ppo_paper_settings():
    ppo = load_config(RLConfig, CONFIGS / "sorft_ppo.yaml")
    assert ppo.algorithm == "ppo"
    assert (ppo.ppo.actor_lr, ppo.ppo.critic_lr, ppo.update.prompts_per_step, ppo.sampling.temperature, ppo.num_steps) == \
        (5e-7, 9e-6, 64, 1.0, 200)


def test_the_main_job_builds_only_the_subtasks_its_stages_read():
    from swe_rl_jax.pipeline.main_job import subtasks_read

    assert subtasks_read(load_config(MainConfig, CONFIGS / "main.yaml")) == ("file_localization",)
    assert subtasks_read(load_config(MainConfig, CONFIGS / "resolve_demo.yaml")) == ("edit_generation",)
    both = ["sft.subtasks=[edit_generation]", "rl.subtasks=[file_localization]", "eval.subtasks=[file_localization]"]
    assert subtasks_read(load_config(MainConfig, CONFIGS / "main.yaml", both)) == ("file_localization", "edit_generation")
    # a stage that names none reads every subtask: everything build.subtasks lists is built
    everything = load_config(MainConfig, CONFIGS / "main.yaml", ["eval.subtasks=[]"])
    assert subtasks_read(everything) == everything.build.subtasks
    with pytest.raises(ConfigError, match=r"build.subtasks.*leaves out \['edit_generation'\]"):
        load_config(MainConfig, CONFIGS / "main.yaml", ["build.subtasks=[file_localization]", "sft.subtasks=[edit_generation]"])
