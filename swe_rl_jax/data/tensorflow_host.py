"""TensorFlow for the host-side input pipeline, imported without its CUDA probe noise.

TensorFlow's wheel probes for CUDA when it is imported and again when it first lists devices. On a
machine without a GPU driver that prints "Could not find cuda drivers on your machine" and
"failed call to cuInit" to stderr, at levels `TF_CPP_MIN_LOG_LEVEL` does not hide (the first lines
come before absl logging is set up, so no environment variable reaches them). In this project JAX
owns the accelerators and TensorFlow only reads and tokenizes records on the host, so TensorFlow
is imported with file descriptor 2 captured and its device list fixed to the CPU (on a GPU
machine it would otherwise reserve GPU memory); captured lines other than the known start-up
notices are written back to stderr.
"""
from __future__ import annotations

import os
import sys
import tempfile
from types import ModuleType

# Start-up notices of TensorFlow's C++ runtime that say nothing about this run.
_STARTUP_NOTICES = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "cudart_stub.cc", "cuda_platform.cc", "cuda_driver.cc", "failed call to cuInit",
    "oneDNN custom operations are on", "cpu_feature_guard.cc",
    "rebuild TensorFlow with the appropriate compiler flags",
)


def import_tensorflow() -> ModuleType:
    """`tensorflow`, imported once per process as described above."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.set_visible_devices([], "GPU")
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode("utf-8", "replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not any(n in line for n in _STARTUP_NOTICES)))
    return tf
