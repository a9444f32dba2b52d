#!/usr/bin/env bash
# README command 1: set up the environment if needed, then run the main job on its
# embedded default. Extra arguments are `key=value` config overrides.
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
python -m swe_rl_jax.cli main "$@"
