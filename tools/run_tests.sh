#!/usr/bin/env bash
# README command 2: set up the environment if needed, then run the whole test suite.
# Extra arguments go to pytest (e.g. `bash tools/run_tests.sh -k rewards`).
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
python -m pytest -q tests "$@"
