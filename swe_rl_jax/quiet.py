"""Third-party log noise off by default: INFO logs and warnings of libraries that mean nothing to a
user of this project (Beam's runner chatter, gRPC, TensorFlow's C++ start-up lines, absl). The
global `--verbose` (`python -m swe_rl_jax.cli --verbose COMMAND ...`) leaves them on."""
from __future__ import annotations

import logging
import os

# Loggers whose INFO and WARNING lines are about the library's own plumbing, not the user's run.
NOISY_LOGGERS = ("apache_beam", "apitools", "grpc", "absl", "tensorflow", "tensorflow_datasets", "jax._src.xla_bridge")
# Read by native code at import (TensorFlow's and gRPC's C++ logging), and inherited by workers.
NOISY_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}


def quiet_third_party() -> None:
    for name, value in NOISY_ENV.items():
        os.environ.setdefault(name, value)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
