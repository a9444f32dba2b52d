"""swe_rl_jax: JAX-native SoRFT and SWE-RL training for Qwen and Llama models."""
from setuptools import find_packages, setup

# Exact pins: the two README commands must give every machine the same environment.
# torch is not listed here on purpose: it must be installed first as `torch==2.13.0`
# (tools/env.sh does that) so pip takes the CPU wheel instead of a CUDA build.
INSTALL_REQUIRES = [
    # [tpu]: libtpu, which also compiles programs for TPU topologies ahead of time on a CPU host
    # (plan-memory --target v5p-32); CPU-only machines never start its runtime (platforms.py).
    "jax[tpu]==0.10.2",
    "jaxlib==0.10.2",
    "libtpu==0.0.42.1",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "transformers==5.23.0",
    "tokenizers==0.23.3",
    "tensorflow-datasets==4.9.10",
    "seqio==0.0.20",
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "numpy==2.4.6",
    "safetensors==0.8.0",
    "pyyaml==6.0.3",
    "unidiff==1.0.1",
    # Parquet instance files (also a tensorflow-datasets dependency); < 26 for apache-beam 2.77.
    "pyarrow==25.0.1",
    # build-data --beam: the build as a Beam pipeline (DirectRunner here; Dataflow, Flink, Spark
    # on clusters, docs/DATA.md). Caps protobuf < 7, which tensorflow 2.21 accepts.
    "apache-beam==2.77.0",
    # Checksums of the TFRecord files Beam writes (seqio's cache job; apache-beam's `tfrecord` extra).
    "google-crc32c==1.9.0",
    # seqio's tokenizer; 0.2.3's generated proto needs protobuf >= 7, which apache-beam excludes.
    "sentencepiece==0.2.2",
    "tqdm==4.70.1",
    "tensorboardX==2.6.5",
    "matplotlib==3.11.2",
    "bm25s==0.3.16",  # the BM25 file-localization baseline (eval/baselines.py); needs numpy and scipy
]

TEST_REQUIRES = [
    "pytest==9.2.0",
    # The suite's two workers (tools/run_tests.sh): one process leaves a 2-core machine a third idle.
    "pytest-xdist==3.8.0",
    "execnet==2.1.2",
    "hypothesis==6.170.15",
    "torch==2.13.0",
    "gguf==0.19.0",
    "accelerate==1.15.0",
    # LoRA parity: PEFT loads our exported adapter onto the transformers model (tests/test_lora_peft.py).
    "peft==0.21.0",
    # `transformers serve` (transformers' serving extras): the real OpenAI-compatible server of
    # tests/test_resolve_served.py.
    "fastapi==0.165.0",
    "uvicorn==0.54.0",
    "openai==3.57.0",
    # The Ray backend's tests (tests/test_agent_ray.py): a cluster of several nodes on this machine.
    "ray==2.60.0",
]

# agent.environments: ray (agent/ray_environments.py): the agent's sandboxes on a Ray cluster's nodes.
RAY_REQUIRES = ["ray==2.60.0"]

setup(
    name="swe_rl_jax",
    version="0.1.0",
    description="JAX-native SoRFT and SWE-RL training for Qwen and Llama models",
    packages=find_packages(include=["swe_rl_jax", "swe_rl_jax.*"]),
    python_requires=">=3.11",
    install_requires=INSTALL_REQUIRES,
    extras_require={"test": TEST_REQUIRES, "ray": RAY_REQUIRES},
    entry_points={"console_scripts": ["swe-rl-jax=swe_rl_jax.cli:main"]},
)
