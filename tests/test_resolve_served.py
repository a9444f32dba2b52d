"""`resolve` against a real OpenAI-compatible server that this project did not write:
`transformers serve` (the pinned transformers, its `serving` extras in the test requirements)
serving the exported SmolLM2 checkpoint on CPU, compared with the in-process JAX sampler.

What equality to expect: both sides are greedy (temperature 0) and float32, on the same chat
template (the export carries the tokenizer and template), so both pick the argmax token at every
step from logits that differ only by float rounding between XLA's and torch's kernels (relative
~1e-6). Answers can then differ only where two tokens' logits tie to within that rounding, which
does not happen on these few short answers; so the test asks for the same answer text at every
stage of every instance, and hence the same predictions. (Sampled answers are not comparable: the
server's torch RNG is not the sampler's key.)
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

# The in-process side samples SmolLM2-135M: compiled with XLA's full CPU optimization (tests/conftest.py).
pytestmark = pytest.mark.optimized_code
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from swe_rl_jax.cli import main as cli  # noqa: E402
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos  # noqa: E402
from swe_rl_jax.policies import HttpPolicy, HttpPolicyConfig  # noqa: E402

INSTANCES = SAMPLE_DIR / "instances.jsonl"
# Small enough for the suite on 2 cores: short trees, few shown lines, short greedy answers.
# One instance: four requests to each side.
SETTINGS = ["limit=1", "agentless.num_samples=1", "agentless.top_files=1", "agentless.tree_max_tokens=300",
            "agentless.max_shown_lines=30", "localization.max_new_tokens=10", "repair.max_new_tokens=10",
            "repair.temperature=0", "progress=false"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(exported checkpoint dir, base_url) of a running `transformers serve`."""
    export = tmp_path_factory.mktemp("smollm2_hf")
    assert cli(["convert", "--src", "smollm2", "--out", str(export)]) == 0
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    server = subprocess.Popen([str(Path(sys.executable).parent / "transformers"), "serve", str(export),
                               "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not start: {server.stderr.read().decode()[-2000:]}")
            time.sleep(1)
        yield export, f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_resolve_on_a_served_checkpoint_matches_the_in_process_sampler(served, tmp_path):
    export, base_url = served
    # transformers serve's `GET /v1/models` cards carry no `max_model_len`: no context limit known
    # (tests/test_policies_context.py checks one that does, in vLLM's shape).
    assert HttpPolicy(HttpPolicyConfig(base_url, str(export), cache_dir=str(tmp_path / "probe"))).context is None
    repos = make_sample_repos(tmp_path / "repos")
    common = ["resolve", "--instances", str(INSTANCES), "--repos", str(next(iter(repos.values())).parent),
              "model_name=smollm2", *SETTINGS]
    assert cli([*common, "--out", str(tmp_path / "served.jsonl"), "--endpoint", base_url,
                "--served-model", str(export), f"endpoint.cache_dir={tmp_path / 'cache'}"]) == 0
    assert cli([*common, "--out", str(tmp_path / "local.jsonl"), f"model.checkpoint={export}"]) == 0
    served_trace = _rows(tmp_path / "served.trace.jsonl")
    local_trace = _rows(tmp_path / "local.trace.jsonl")
    assert len(served_trace) == 1 and all(not t["errors"] and not t["skipped"] for t in served_trace)
    for s, l in zip(served_trace, local_trace):
        assert set(s["responses"]) >= {"file", "repair"}
        assert s["responses"] == l["responses"], s["instance_id"]
    assert _rows(tmp_path / "served.jsonl") == _rows(tmp_path / "local.jsonl")
