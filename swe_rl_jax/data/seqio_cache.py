"""Registers the seqio tasks at import, for seqio's own Beam cache job, which finds tasks by
importing a module (`--module_import`) and can pass them no arguments.

What to register comes from the environment (`seqio_tasks.register_tasks`'s arguments):

    SWE_RL_JAX_RECORDS    prompt records directory (RL tasks), e.g. a build-data --out
    SWE_RL_JAX_SFT        SFT examples directory (SFT tasks)           (at least one of the two)
    SWE_RL_JAX_TOKENIZER  tokenizer directory or GGUF file; "qwen": the shipped Qwen tokenizer
    SWE_RL_JAX_TFDS_DIR   TFDS data directory (default: <records>/tfds, <sft>/tfds)

and the job pre-tokenizes every task into sharded TFRecords (docs/DATA.md, "Building at scale"):

    SWE_RL_JAX_RECORDS=OUT SWE_RL_JAX_TOKENIZER=qwen python -m seqio.scripts.cache_tasks_main \
        --module_import=swe_rl_jax.data.seqio_cache --tasks='swe_rl_jax\\..*' \
        --output_cache_dir=CACHE --pipeline_options=--runner=DirectRunner

Training reads the cache with `seqio.add_global_cache_dirs([CACHE])` and `use_cached=True`.
"""
from __future__ import annotations

import os

from swe_rl_jax.data.seqio_tasks import Registration, register_tasks
from swe_rl_jax.tokenizer import qwen_tokenizer_dir

ENV_RECORDS, ENV_SFT, ENV_TOKENIZER, ENV_TFDS_DIR = (
    "SWE_RL_JAX_RECORDS", "SWE_RL_JAX_SFT", "SWE_RL_JAX_TOKENIZER", "SWE_RL_JAX_TFDS_DIR")


def register_from_environment() -> Registration:
    """`register_tasks` with the arguments the environment names (see the module docstring)."""
    records, sft = os.environ.get(ENV_RECORDS) or None, os.environ.get(ENV_SFT) or None
    tokenizer = os.environ.get(ENV_TOKENIZER, "")
    if not (records or sft) or not tokenizer:
        raise RuntimeError(f"swe_rl_jax.data.seqio_cache registers tasks from the environment: set {ENV_TOKENIZER} "
                           f"and {ENV_RECORDS} and/or {ENV_SFT} (docs/DATA.md)")
    return register_tasks(records, qwen_tokenizer_dir() if tokenizer == "qwen" else tokenizer, sft_dir=sft,
                          data_dir=os.environ.get(ENV_TFDS_DIR) or None)


REGISTRATION = register_from_environment()
