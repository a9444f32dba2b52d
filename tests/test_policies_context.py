"""The endpoint's context limit: `HttpPolicy` asks `GET /models` once and does not send a request
whose prompt tokens + max_tokens exceed the served model's `max_model_len`.

The server here is a minimal stand-in that answers `GET /v1/models` in vLLM's documented shape:
`{"object": "list", "data": [ModelCard...]}`, each card with `id`, `object`, `created`, `owned_by`,
`root`, `parent`, `max_model_len`, `permission` (vllm-project/vllm,
vllm/entrypoints/openai/protocol.py, classes `ModelCard` and `ModelList`; SGLang's
python/sglang/srt/entrypoints/openai/protocol.py has the same `max_model_len` field). A real
server that reports no limit (`transformers serve`, whose cards have no such field) is checked in
tests/test_resolve_served.py.
"""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from transformers import AutoTokenizer

from swe_rl_jax.cli import main as cli
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.policies import HttpPolicy, HttpPolicyConfig, PolicyRequest
from swe_rl_jax.tokenizer import qwen_tokenizer_dir


class ModelsServer:
    """`GET /v1/models` answers `cards`; `POST /v1/chat/completions` answers "ok" and keeps the
    prompts it was sent."""

    def __init__(self, cards):
        self.cards, self.prompts, self.models_calls = cards, [], 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, data):
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path != "/v1/models":
                    self.send_response(404)
                    self.end_headers()
                    return
                server.models_calls += 1
                self._json({"object": "list", "data": server.cards})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.prompts.append(body["messages"][-1]["content"])
                self._json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def vllm_card(model_id, max_model_len):
    """One entry of vLLM's `ModelList.data` (the fields of its `ModelCard`)."""
    return {"id": model_id, "object": "model", "created": 1764115200, "owned_by": "vllm", "root": model_id,
            "parent": None, "max_model_len": max_model_len, "permission": []}


@pytest.fixture
def serve():
    servers = []

    def start(cards):
        servers.append(ModelsServer(cards))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _policy(server, tmp_path, **kw):
    return HttpPolicy(HttpPolicyConfig(base_url=server.url, model="m", api_key_env="SWE_TEST_UNSET_KEY",
                                       cache_dir=str(tmp_path / "cache"), max_retries=0, **kw))


def _req(text, max_tokens):
    return PolicyRequest(text[:10], ({"role": "user", "content": text},), max_tokens=max_tokens)


def test_estimated_prompt_over_the_reported_context_is_skipped_not_sent(serve, tmp_path):
    """No tokenizer: the prompt is estimated as characters / 6 (a lower estimate). Limit 100:
    60 characters (10 tokens) + 90 fits exactly; 600 characters (100 tokens) + 10 does not."""
    server = serve([vllm_card("other", 10**6), vllm_card("m", 100)])
    policy = _policy(server, tmp_path)
    assert policy.context == 100 and server.models_calls == 1  # the card of `model`, asked once
    fits, over = policy.generate([_req("a" * 60, 90), _req("b" * 600, 10)])
    assert fits.completions == ("ok",) and not fits.skipped
    assert over.completions == () and not over.failed  # a skip, not a failure: it never stops a run
    assert over.skipped == ("prompt of 100 tokens (estimated) + max_tokens 10 > the endpoint's context of 100 "
                            "(max_model_len)")
    assert server.prompts == ["a" * 60] and policy.stats["prompts_too_long"] == 1
    assert server.models_calls == 1  # not asked again per batch


def test_tokenizer_counts_the_chat_template_tokens(serve, tmp_path):
    """With `tokenizer`, the prompt is counted as the chat template renders it; the reference is
    transformers' own tokenizer of the same checkpoint, and the boundary is exact."""
    reference = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "def f(x): return x +"}]
    length = len(reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"])
    request = PolicyRequest("t", tuple(messages), max_tokens=20)
    policy = _policy(serve([vllm_card("m", length + 20)]), tmp_path, tokenizer=str(qwen_tokenizer_dir()))
    assert policy.generate([request])[0].completions == ("ok",)
    policy.context = length + 19  # one token less (a second tokenizer load costs seconds)
    assert policy.generate([request])[0].skipped == (f"prompt of {length} tokens + max_tokens 20 > the endpoint's "
                                                     f"context of {length + 19} (max_model_len)")


@pytest.mark.parametrize("cards", [
    [{"id": "m", "object": "model", "created": 0, "owned_by": "me"}],  # no field (transformers serve, hosted APIs)
    [vllm_card("another-model", 10)],  # `model` not listed
    [vllm_card("m", None)],  # vLLM's default when unknown
    "not a list",
])
def test_no_reported_limit_sends_everything(serve, tmp_path, cards):
    server = serve(cards)
    policy = _policy(server, tmp_path)
    assert policy.context is None
    assert policy.generate([_req("c" * 6000, 4096)])[0].completions == ("ok",)


def test_an_endpoint_without_models_is_no_error(tmp_path):
    """The query failing (here: nobody listens) is not an error: no limit known."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = HttpPolicy(HttpPolicyConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0,
                                         cache_dir=str(tmp_path / "cache")))
    assert policy.context is None


def test_resolve_names_the_skipped_stages_in_its_trace(serve, tmp_path, capsys):
    """`resolve` against an endpoint whose context no prompt fits: nothing is sent, each stage's
    request is counted under `skipped` and named in the instance's trace, and the run ends (exit 0)
    with the fallbacks, as for a prompt over the in-process model's context."""
    server = serve([vllm_card("m", 64)])
    make_sample_repos(tmp_path / "repos")
    out = tmp_path / "pred.jsonl"
    assert cli(["resolve", "--instances", str(SAMPLE_DIR / "instances.jsonl"), "--repos", str(tmp_path / "repos"),
                "--out", str(out), "--endpoint", server.url, "--served-model", "m", "limit=1", "progress=false",
                "agentless.num_samples=2", "localization.max_new_tokens=16", "repair.max_new_tokens=16",
                f"endpoint.cache_dir={tmp_path / 'cache'}"]) == 0
    summary = json.loads(capsys.readouterr().out)
    [trace] = [json.loads(line) for line in (tmp_path / "pred.trace.jsonl").read_text().splitlines()]
    assert server.prompts == [] and summary["requests"] == summary["skipped"] and summary["failed"] == {}
    assert set(trace["skipped"]) == set(summary["skipped"]) >= {"file", "repair"}
    assert all("> the endpoint's context of 64 (max_model_len)" in why for why in trace["skipped"].values())
