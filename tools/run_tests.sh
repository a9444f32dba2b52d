#!/usr/bin/env bash
# README command 2: set up the environment if needed, then run the whole test suite.
# Extra arguments go to pytest (e.g. `bash tools/run_tests.sh -k rewards`).
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# Two workers, each test file whole on one (its module fixtures built once); SWE_RL_JAX_TEST_WORKERS
# changes the count (0: one process, no workers).
python -m pytest -q --durations=20 -n "${SWE_RL_JAX_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder tests "$@"
