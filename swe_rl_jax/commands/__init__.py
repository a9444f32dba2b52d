"""CLI command modules; each exposes `main(argv) -> int` (see swe_rl_jax/cli.py)."""
