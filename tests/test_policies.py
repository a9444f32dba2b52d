"""Policy back ends: an OpenAI-compatible client against a scripted local server, and recorded answers."""
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swe_rl_jax.cli import main as cli
from swe_rl_jax.data.records import TaskRecord, records_file
from swe_rl_jax.policies import HttpPolicy, HttpPolicyConfig, PolicyRequest, RecordedAnswersError, RecordedPolicy

SECRET = "sk-test-DO-NOT-WRITE-7f3a9c"


class ScriptedServer:
    """Answers by the last user message: `ok:X`, `slow:X`, `flaky:X` (two 429s then ok),
    `broken` (always 500), `bad` (400), `hang` (longer than the client timeout), `redirect:X` (302
    to `redirect_to`), `truncated:X` (the first body cut short: IncompleteRead), `later:X` (a 429
    with `Retry-After: 3600`, then ok). A GET (what a followed 302 becomes) is answered with a completion too
    (but `GET /models` with 404: no context limit known)."""

    def __init__(self):
        self.redirect_to = ""
        self.calls: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.auth_headers: set[str] = set()
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.endswith("/models"):  # the policy's one query for a context limit: none here
                    self.send_response(404)
                    self.end_headers()
                    return
                with server.lock:
                    server.calls["GET"] = server.calls.get("GET", 0) + 1
                    server.auth_headers.add(self.headers.get("Authorization", ""))
                data = json.dumps({"choices": [{"message": {"content": "hijacked"}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                with server.lock:
                    server.calls[prompt] = server.calls.get(prompt, 0) + 1
                    server.bodies.append(body)
                    count = server.calls[prompt]
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.auth_headers.add(self.headers.get("Authorization", ""))
                try:
                    code, headers, data = self.reply(prompt, count)
                finally:
                    # Out of flight before a byte of the answer is sent: a client that has read its
                    # answer and sent the next request must never be counted twice.
                    with server.lock:
                        server.in_flight -= 1
                try:
                    self.send_response(code)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    if data:
                        self.wfile.write(data)
                    if prompt.startswith("truncated:") and count == 1:
                        self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

            def reply(self, prompt, count):
                """(status, headers, body) for one call, after the delay its kind asks for."""
                kind = prompt.split(":")[0]
                if kind == "slow":
                    time.sleep(0.25)
                if kind == "hang":
                    time.sleep(1.5)
                if kind == "broken" or (kind == "flaky" and count <= 2):
                    return (500 if kind == "broken" else 429), {"Retry-After": "0"}, b""
                if kind == "later" and count == 1:
                    return 429, {"Retry-After": "3600"}, b""
                if kind == "truncated" and count == 1:
                    return 200, {"Content-Length": "1000"}, b'{"choices": ['
                if kind == "bad":
                    return 400, {}, b""
                if kind == "redirect":
                    return 302, {"Location": server.redirect_to}, b""
                answer = {"choices": [{"message": {"role": "assistant", "content": f"answer to {prompt} #{count}"}}]}
                data = json.dumps(answer).encode()
                return 200, {"Content-Type": "application/json", "Content-Length": str(len(data))}, data

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def _teacher(server, tmp_path, **kw):
    cfg = dict(base_url=server.url, model="teacher", api_key_env="SWE_TEST_KEY", backoff_s=0.01,
               backoff_max_s=0.05, cache_dir=str(tmp_path / "cache"))
    return HttpPolicy(HttpPolicyConfig(**{**cfg, **kw}))


def _req(prompt, n=1):
    return PolicyRequest(task_id=prompt, messages=({"role": "user", "content": prompt},), n=n)


def test_samples_order_retries_and_failures(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SWE_TEST_KEY", SECRET)
    teacher = _teacher(server, tmp_path, max_retries=3)
    out = teacher.generate([_req("ok:a", n=3), _req("flaky:b"), _req("broken"), _req("bad")])
    assert [r.task_id for r in out] == ["ok:a", "flaky:b", "broken", "bad"]
    assert sorted(out[0].completions) == ["answer to ok:a #1", "answer to ok:a #2", "answer to ok:a #3"]
    assert out[1].completions == ("answer to flaky:b #3",) and server.calls["flaky:b"] == 3  # two 429s retried
    assert out[2].completions == () and "HTTP 500" in out[2].error and server.calls["broken"] == 4
    assert out[3].completions == () and "HTTP 400" in out[3].error and server.calls["bad"] == 1  # not retried
    assert server.auth_headers == {f"Bearer {SECRET}"}


def test_cache_means_a_rerun_never_pays_twice(server, tmp_path):
    first = _teacher(server, tmp_path).generate([_req("ok:x", n=2), _req("ok:y")])
    calls = dict(server.calls)
    again = _teacher(server, tmp_path)
    second = again.generate([_req("ok:x", n=2), _req("ok:y")])
    assert second == first and server.calls == calls and again.stats["cache_hits"] == 3
    # A third sample of the same prompt is a new call; the first two still come from the cache.
    third = _teacher(server, tmp_path).generate([_req("ok:x", n=3)])
    assert third[0].completions[:2] == first[0].completions and server.calls["ok:x"] == 3


def test_concurrency_is_bounded(server, tmp_path):
    t0 = time.time()
    _teacher(server, tmp_path, concurrency=2).generate([_req(f"slow:{i}") for i in range(6)])
    assert server.max_in_flight == 2
    assert time.time() - t0 >= 3 * 0.25 * 0.9  # 6 calls of 0.25 s, two at a time


def test_timeout_is_retried_then_reported(server, tmp_path):
    out = _teacher(server, tmp_path, timeout_s=0.3, max_retries=1).generate([_req("hang")])
    assert out[0].completions == () and "gave up after 2 attempts" in out[0].error
    assert server.calls["hang"] == 2


def test_api_key_never_written(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SWE_TEST_KEY", SECRET)
    out = _teacher(server, tmp_path, max_retries=1).generate([_req("ok:k", n=2), _req("broken")])
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files  # the cache did write something
    for p in files:
        assert SECRET not in p.read_text(encoding="utf-8", errors="replace")
    assert all(SECRET not in r.error for r in out)


def test_redirect_is_not_followed_so_the_key_stays_with_base_url(server, tmp_path, monkeypatch):
    other = ScriptedServer()  # another host (port) that would answer anything with a completion
    try:
        server.redirect_to = other.url + "/chat/completions"
        monkeypatch.setenv("SWE_TEST_KEY", SECRET)
        out = _teacher(server, tmp_path, max_retries=2).generate([_req("redirect:a", n=2)])
        assert other.calls == {} and other.auth_headers == set()
        assert out[0].completions == () and "HTTP 302" in out[0].error and "not followed" in out[0].error
        assert server.calls["redirect:a"] == 2  # one call per sample: a redirect is not retried
        assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # nothing cached
    finally:
        other.close()


def _records_dir(root):
    """One file-localization record, enough for rejection-sample to ask the teacher."""
    path = records_file(root, "train", "file_localization")
    path.parent.mkdir(parents=True)
    rec = TaskRecord(task_id="i1/file_localization", subtask="file_localization", instance_id="i1", repo="o/r",
                     messages=[{"role": "user", "content": "ok:which file?"}], ground_truth={"items": ["a.py"]},
                     candidates=["a.py"], context={}, meta={})
    path.write_text(rec.to_json() + "\n")
    return root


def _http_args(tmp_path, base_url):
    return ["rejection-sample", f"records_dir={_records_dir(tmp_path / 'records')}", f"out_dir={tmp_path / 'out'}",
            "teacher.kind=http", f"teacher.http={{base_url: '{base_url}', model: m, api_key_env: SWE_TEST_KEY, "
            f"cache_dir: '{tmp_path / 'cache'}', max_retries: 0}}", "splits=[train]"]


def test_key_with_a_newline_is_one_redacted_line_and_exit_2(server, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", *_http_args(tmp_path, server.url)],
                          env={**os.environ, "SWE_TEST_KEY": SECRET + "\n"}, capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and "$SWE_TEST_KEY" in proc.stderr
    assert server.calls == {}  # refused before any request
    outputs = [proc.stdout, proc.stderr] + [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert not any(SECRET in text for text in outputs)


def test_dead_endpoint_reports_its_error_and_fails(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli(_http_args(tmp_path, f"http://127.0.0.1:{port}/v1")) == 1  # a failed run, not bad input
    err = capsys.readouterr().err
    assert "every teacher request failed (1 of 1)" in err and "Connection refused" in err
    assert not (tmp_path / "out" / "report.json").exists()


def test_config_errors_name_the_key():
    from swe_rl_jax.config import ConfigError
    with pytest.raises(ConfigError, match="base_url"):
        HttpPolicyConfig(base_url="localhost:8000", model="m")
    with pytest.raises(ConfigError, match="concurrency"):
        HttpPolicyConfig(base_url="http://x", model="m", concurrency=0)


def test_jsonl_teacher(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"task_id": "a", "response": "r1"}\n\n{"task_id": "a", "responses": ["r2", "r3"]}\n'
                    '{"task_id": "b", "responses": []}\n')
    out = RecordedPolicy(path).generate([_req("a", n=2), _req("b"), _req("c")])
    assert out[0].completions == ("r1", "r2")
    assert out[1].completions == () and "no recorded answer for 'c'" in out[2].error


@pytest.mark.parametrize("content, needle", [
    ('{"task_id": "a"', ":1: malformed JSON"),
    ('{"task_id": 3, "response": "x"}', ":1: expected an object with a string task_id"),
    ('{"task_id": "a", "responses": "x"}', ":1: needs 'response'"),
])
def test_jsonl_teacher_bad_lines(tmp_path, content, needle):
    path = tmp_path / "t.jsonl"
    path.write_text(content + "\n")
    with pytest.raises(RecordedAnswersError, match=needle):
        RecordedPolicy(path)
    with pytest.raises(RecordedAnswersError, match="not found"):
        RecordedPolicy(tmp_path / "missing.jsonl")


def test_a_truncated_body_is_retried_not_raised(server, tmp_path):
    """http.client.IncompleteRead (a body cut short) used to escape the thread pool and abort the
    whole batch; it is a transient failure like a reset connection."""
    out = _teacher(server, tmp_path, max_retries=2).generate([_req("truncated:a"), _req("ok:b")])
    assert out[0].completions == ("answer to truncated:a #2",) and not out[0].error
    assert out[1].completions == ("answer to ok:b #1",)


def test_retry_after_is_capped(server, tmp_path, monkeypatch):
    """`Retry-After: 3600` waits backoff_max_s, not an hour."""
    import swe_rl_jax.policies.http as http_policy

    slept = []
    monkeypatch.setattr(http_policy.time, "sleep", slept.append)
    out = _teacher(server, tmp_path, max_retries=2, backoff_max_s=0.05).generate([_req("later:a")])
    assert out[0].completions == ("answer to later:a #2",)
    assert slept == [0.05]


def test_sampling_settings_are_passed_through(server, tmp_path):
    """temperature, top_p, max_tokens, stop go to the endpoint as given; each sample gets its own
    seed derived from the request's seed, so n = 1 calls do not repeat one sample."""
    from swe_rl_jax.policies import derive_seed

    request = PolicyRequest("t", ({"role": "user", "content": "ok:s"},), n=2, temperature=0.5, max_tokens=7,
                            top_p=0.9, stop=("</x>",), seed=11)
    _teacher(server, tmp_path).generate([request])
    bodies = sorted(server.bodies, key=lambda b: b["seed"])
    assert [b["seed"] for b in bodies] == sorted([derive_seed(11, 0), derive_seed(11, 1)])
    assert all((b["temperature"], b["top_p"], b["max_tokens"], b["stop"], b["n"]) == (0.5, 0.9, 7, ["</x>"], 1)
               for b in bodies)


def test_a_request_from_a_later_sample_sends_that_samples_seeds(server, tmp_path):
    """`first`: the request's samples are the task's first, first + 1 ... (resolve's greedy-first
    split): their seeds are the ones those samples get in one whole request."""
    from swe_rl_jax.policies import derive_seed

    request = PolicyRequest("t", ({"role": "user", "content": "ok:s"},), n=2, seed=11, first=3)
    _teacher(server, tmp_path).generate([request])
    assert sorted(b["seed"] for b in server.bodies) == sorted([derive_seed(11, 3), derive_seed(11, 4)])


# ---------------------------------------------------------------------------- the in-process sampler


@pytest.fixture(scope="module")
def tiny_sampler(tiny_llama):
    from swe_rl_jax.policies.config import PolicyConfig, make_policy
    from swe_rl_jax.model_source import ModelSource
    from swe_rl_jax.sampling.config import RolloutConfig

    model = ModelSource(checkpoint=str(tiny_llama), tokenizer="smollm2")
    return make_policy(PolicyConfig(kind="sampler", model=model), RolloutConfig(slots=8))


def _chat(text, **kw):
    return PolicyRequest(text[:20], ({"role": "user", "content": text},), **{"n": 2, "temperature": 1.0,
                                                                               "max_tokens": 5, **kw})


def test_sampler_answers_do_not_depend_on_the_batch(tiny_sampler):
    """A seeded request gets the same samples alone or beside others (of other prompt lengths,
    which run as their own length group: one engine call each)."""
    a = _chat("fix the bug in parse()", seed=7)
    long = _chat("a much longer prompt " * 40, seed=8)
    calls = tiny_sampler.stats["generate_calls"]
    [alone] = tiny_sampler.generate([a])
    together = tiny_sampler.generate([long, a, _chat("another short one", seed=9)])
    assert tiny_sampler.stats["generate_calls"] - calls == 1 + 2  # the long prompt is a group of its own
    assert together[1].completions == alone.completions and len(alone.completions) == 2
    assert alone.completions[0] != alone.completions[1]  # sample i draws with its own key
    assert tiny_sampler.generate([dataclasses.replace(a, seed=70)])[0].completions != alone.completions


def test_sampler_respects_the_model_context(tiny_sampler, monkeypatch):
    """A prompt that leaves no room in max_position_embeddings is not sent (skipped, with the
    reason); a prompt that fits gets at most what the context has left."""
    short = _chat("hi", n=1, max_tokens=50, seed=1)
    length = len(tiny_sampler.tokenizer.encode_prompt(list(short.messages)))
    monkeypatch.setattr(tiny_sampler, "config", dataclasses.replace(tiny_sampler.config,
                                                                    max_position_embeddings=length + 3))
    seen = []
    real = tiny_sampler.engine.run
    monkeypatch.setattr(tiny_sampler.engine, "run", lambda c, p, reqs, **kw: seen.extend(reqs) or real(c, p, reqs, **kw))
    fits, too_long = tiny_sampler.generate([short, _chat("a longer prompt " * 5, n=1, seed=2)])
    assert [r.sampling.max_new_tokens for r in seen] == [3]
    assert len(fits.completions) == 1 and not fits.skipped
    assert too_long.completions == () and "leaves no room in the model's context of" in too_long.skipped
    assert not too_long.failed  # a skip is not a failure: it never stops a run
