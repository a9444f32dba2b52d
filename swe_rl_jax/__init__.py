"""swe_rl_jax: JAX-native SoRFT and SWE-RL training for Qwen and Llama models."""
from swe_rl_jax.platforms import skip_absent_tpu

# Before anything imports jax: a CPU-only machine must not start the TPU runtime libtpu brings
# (seconds of errors per process; swe_rl_jax/platforms.py).
skip_absent_tpu()
