import os
import sys
from pathlib import Path

import pytest

# Nothing in the test suite may reach a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite runs on CPU: never start the TPU runtime that the installed libtpu offers (it logs
# errors and costs time in every process; child processes inherit this).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """One tiny random Llama checkpoint (SmolLM2 vocabulary) shared by the pipeline tests."""
    from hf_reference import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
