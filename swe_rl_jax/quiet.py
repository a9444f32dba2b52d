"""Third-party log noise off by default: INFO logs and warnings of libraries that mean nothing to a
user of this project (Beam's runner chatter, gRPC, TensorFlow's C++ start-up lines, absl, Beam's
"apitools not found" warning, TFDS's "Downloading and preparing dataset" of a dataset built
offline). The global `--verbose` (`python -m swe_rl_jax.cli --verbose COMMAND ...`) leaves them on.

Worker processes inherit the setting: `quiet_third_party` marks it in the environment
(`QUIET_ENV`), and a worker this project starts (`--workers` processes, Beam's SDK workers:
`data/beam_worker.py`) calls `quiet_if_inherited()` before it imports anything noisy.
"""
from __future__ import annotations

import logging
import os
import threading

# Loggers whose INFO and WARNING lines are about the library's own plumbing, not the user's run.
NOISY_LOGGERS = ("apache_beam", "apitools", "grpc", "absl", "tensorflow", "tensorflow_datasets", "jax._src.xla_bridge")
# Packages that log on the root logger itself (apache_beam warns at import that apitools is
# missing, through `logging.warning`): their records are dropped there by the file they come from,
# since a level on the root logger would silence this project's own warnings too.
NOISY_PACKAGES = ("apache_beam", "apitools", "tensorflow_datasets")
# Read by native code at import (TensorFlow's and gRPC's C++ logging), and inherited by workers.
NOISY_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}
QUIET_ENV = "SWE_RL_JAX_QUIET"  # "1" in a quiet command and the workers it starts


class _NoisyPackageOnRoot(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(f"{os.sep}{package}{os.sep}" in record.pathname for package in NOISY_PACKAGES)


def quiet_third_party() -> None:
    os.environ[QUIET_ENV] = "1"
    for name, value in NOISY_ENV.items():
        os.environ.setdefault(name, value)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    root = logging.getLogger()
    if not any(isinstance(f, _NoisyPackageOnRoot) for f in root.filters):
        root.addFilter(_NoisyPackageOnRoot())


def verbose() -> None:
    """`--verbose`: this command and its workers keep third-party logs (a quiet parent's mark is dropped)."""
    os.environ.pop(QUIET_ENV, None)


def is_quiet() -> bool:
    return os.environ.get(QUIET_ENV) == "1"


def quiet_if_inherited() -> None:
    """In a worker process: quiet when the command that started it is."""
    if is_quiet():
        quiet_third_party()


def quiet_interrupted_beam() -> None:
    """Called when an interrupt stops a Beam pipeline, in a quiet command: the runner tears its gRPC
    servers down while its reader threads (`beam_control_read`, `read_grpc_client_inputs`) still
    wait on them, and each dies with a grpc.RpcError traceback (`threading.excepthook`) and an ERROR
    line of Beam's data plane, before or after the command's one line depending on timing. They say
    only that the run was stopped, which that line says. Other threads' exceptions are reported as
    before; with `--verbose` nothing changes."""
    if not is_quiet():
        return
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    report = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if not type(args.exc_value).__module__.startswith("grpc"):
            report(args)

    threading.excepthook = hook
