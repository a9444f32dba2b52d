"""A scripted agent for the agent's tests and benchmark: per instance, turns that look around, write
the gold fix with shell commands only (a heredoc per file: no patch is handed over), run the
repository's tests and submit. Served as recorded answers (`recorded_rows`, for `answers=FILE`) or by
`ScriptedServer`, an OpenAI-compatible chat endpoint on 127.0.0.1 that answers each request after
a fixed delay, as a served model does; it finds the instance by its issue text in the task message
and the turn by the number of assistant messages so far.

    python tools/lib/scripted_agent.py --instances data/sample/instances.jsonl --repos DIR --out answers.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from swe_rl_jax.agent.actions import SUBMIT_MARKER  # noqa: E402
from swe_rl_jax.agent.episode import task_id  # noqa: E402
from swe_rl_jax.data.patches import apply_file_change, parse_patch  # noqa: E402
from swe_rl_jax.data.sources import GitRepo, Instance, RepoLocator, load_instances  # noqa: E402

TEST_COMMAND = "python -m pytest -q -p no:cacheprovider 2>&1 | tail -5"
SUBMIT_COMMAND = f"echo {SUBMIT_MARKER} && git add -A && git diff --cached"
_EOF = "SWE_RL_JAX_EOF"


def turn(thought: str, command: str) -> str:
    """One answer in the bash-only format."""
    return f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```"


def gold_fix_turns(instance: Instance, repo_dir: Path, test_command: str = TEST_COMMAND) -> list[str]:
    """The scripted episode of `instance`: look, read and rewrite each file of its gold patch, run the
    tests, submit."""
    changes = parse_patch(instance.patch)
    base = GitRepo(repo_dir).snapshot(instance.base_commit).read_text([c.old_path for c in changes if c.old_path])
    answers = [turn("Look at the repository first.", "ls -R | head -60 && git log --oneline | head -3")]
    for change in changes:
        path = change.new_path or change.old_path
        if change.new_path is None:
            answers.append(turn(f"{path} must go.", f"rm -- {path}"))
            continue
        text = apply_file_change(base.get(change.old_path) or "" if change.old_path else "", change)
        if _EOF in text or not text.endswith("\n"):
            raise ValueError(f"{instance.instance_id}: {path} cannot be written with a heredoc")
        if change.old_path:
            answers.append(turn(f"Read {path}.", f"grep -n 'def \\|class ' {path} | head -40"))
        answers.append(turn(f"Write the fix to {path}.", f"mkdir -p \"$(dirname {path})\" && "
                                                         f"cat > {path} <<'{_EOF}'\n{text}{_EOF}"))
    answers.append(turn("Run the tests.", test_command))
    answers.append(turn("Submit.", SUBMIT_COMMAND))
    return answers


def related_tests_command(instance: Instance, repo_dir: Path) -> str:
    """The repository's own tests that its test patch will change (those files as they are at the
    base commit: the patch itself is hidden), quietly, for a repository whose whole suite is long."""
    files = GitRepo(repo_dir).tree(instance.base_commit)
    tests = [c.old_path for c in parse_patch(instance.test_patch) if c.old_path in files]
    return f"python -m pytest -q -p no:cacheprovider {' '.join(tests)} 2>&1 | tail -5" if tests else TEST_COMMAND


def recorded_rows(instances: Sequence[Instance], locator: RepoLocator, sample: int = 0,
                  related_tests: bool = False) -> list[dict[str, Any]]:
    """Recorded answers (policies/recorded.py) that drive each instance's scripted episode (the test
    command: the whole suite, or with `related_tests` the files of the test patch)."""
    rows = []
    for i in instances:
        repo = locator.find(i.repo)
        command = related_tests_command(i, repo) if related_tests else TEST_COMMAND
        rows.append({"task_id": task_id(i.instance_id, sample), "responses": gold_fix_turns(i, repo, command)})
    return rows


class ScriptedServer:
    """An OpenAI-compatible `/v1/chat/completions` endpoint serving scripted episodes (module
    docstring), each answer after `delay_s`. `script`: issue text -> the episode's answers; a
    request past the last answer gets the submission command again. Use as a context manager;
    `url` is its base URL, `requests` counts what it answered."""

    def __init__(self, script: dict[str, list[str]], delay_s: float = 0.0):
        self.script, self.delay_s = script, delay_s
        self.requests = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:  # /v1/models: no context length reported
                self._reply(200, {"data": [{"id": "scripted", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                messages = body["messages"]
                task = next(m["content"] for m in messages if m["role"] == "user")
                answers = next((a for issue, a in server.script.items() if issue in task), None)
                if answers is None:
                    self._reply(400, {"error": {"message": "no script for this task"}})
                    return
                done = sum(m["role"] == "assistant" for m in messages)
                time.sleep(server.delay_s)
                with server._lock:
                    server.requests += 1
                text = answers[done] if done < len(answers) else turn("Submit.", SUBMIT_COMMAND)
                self._reply(200, {"object": "chat.completion", "model": body.get("model", "scripted"),
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": text}}]})

            def _reply(self, status: int, data: dict[str, Any]) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client went away (a killed run)
                    return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


class ScriptedTokens:
    """A token policy (the in-process sampler's kind of answer: `Sampled` ids ending with an EOS) that
    plays each (instance, sample)'s script from `script`, a dict (instance id, sample) -> answers;
    a sample without a script gives up at once. Log-probs are 0: it is no model's."""

    def __init__(self, tokenizer: Any, script: dict[tuple[str, int], list[str]]):
        self.tokenizer, self.script = tokenizer, script

    def generate(self, requests: Sequence[Any]) -> list[Any]:
        from swe_rl_jax.policies import PolicyResponse, Sampled

        out = []
        for r in requests:
            instance_id, _, sample = r.task_id.rsplit("/", 2)
            answers = self.script.get((instance_id, int(sample)), [turn("Give up.", SUBMIT_COMMAND)])
            text = answers[min(r.first, len(answers) - 1)]
            ids = tuple(self.tokenizer.hf.encode(text, add_special_tokens=False)) + (self.tokenizer.eos_ids[0],)
            out.append(PolicyResponse(r.task_id, (text,), samples=(Sampled(ids, (0.0,) * len(ids), "eos"),)))
        return out


def run_scripted_agent_rl(overrides: Sequence[str],
                          test_command: str = "python -m pytest -q -p no:cacheprovider >/dev/null 2>&1; "
                                              "echo tests exit $?", give_up: Sequence[str] = ()) -> dict[str, Any]:
    """`agent-rl` (config from `key=value` overrides) with `ScriptedTokens` in the sampler's stead:
    sample 0 of every instance writes its gold fix, the others give up, and so does every sample of
    the instances named in `give_up` (their groups all earn 0). The default test command
    prints no timing, so the environment's outputs, and the episodes' tokens, are the same on every
    run (pytest's "passed in 0.04s" would not be)."""
    from swe_rl_jax.config import load_config
    from swe_rl_jax.rl.agent_run import AgentRLConfig, run_agent_rl
    from swe_rl_jax.model_source import tokenizer_source
    from swe_rl_jax.tokenizer import load_tokenizer

    config = load_config(AgentRLConfig, None, overrides)
    locator = RepoLocator(config.repos)
    script = {(i.instance_id, 0): gold_fix_turns(i, locator.find(i.repo), test_command)
              for path in config.instances for i in load_instances(path) if i.instance_id not in give_up}
    tokenizer = load_tokenizer(tokenizer_source(config.model))
    return run_agent_rl(config, policy=ScriptedTokens(tokenizer, script))


def script_for(instances: Sequence[Instance], locator: RepoLocator) -> dict[str, list[str]]:
    """`ScriptedServer`'s script: each instance's issue text -> its scripted episode."""
    return {i.problem_statement: gold_fix_turns(i, locator.find(i.repo)) for i in instances}


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", required=True)
    p.add_argument("--repos", required=True)
    p.add_argument("--out", required=True, help="recorded answers JSONL to write")
    p.add_argument("--related-tests", action="store_true", help="run the test patch's files, not the whole suite")
    args = p.parse_args(argv)
    rows = recorded_rows(load_instances(args.instances), RepoLocator(args.repos), related_tests=args.related_tests)
    Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} scripted episodes to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
