"""One entry point: `python -m swe_rl_jax.cli COMMAND ...`.

Each command lives in its own module and exposes `main(argv: list[str]) -> int`; this file only
dispatches, importing the command's module lazily so that, say, `convert` never imports
TensorFlow and `--help` is instant. It is also the error boundary: bad input is one line and exit
status 2, any other failure a traceback and exit status 1, both with registered secrets (API keys)
masked (`swe_rl_jax.redaction`).
"""
from __future__ import annotations

import importlib
import signal
import sys
import traceback

from swe_rl_jax.redaction import redact

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "main": ("swe_rl_jax.commands.main_job", "run the main job on its embedded default config"),
    "convert": ("swe_rl_jax.commands.convert", "convert HF or GGUF checkpoints to an HF directory"),
    "demo": ("swe_rl_jax.commands.demo", "load a model, check it against transformers, chat greedily"),
    "build-data": ("swe_rl_jax.commands.build_data", "build SoRFT subtasks and SWE-RL tasks from issues"),
    "rejection-sample": ("swe_rl_jax.commands.rejection_sample", "teacher samples -> subtask filters -> SFT examples"),
    "sft": ("swe_rl_jax.commands.sft", "sharded SFT on rejection-sampled examples, eval, HF export"),
    "rl": ("swe_rl_jax.commands.rl", "GRPO on task records with rule-based rewards, resumable, HF export"),
    "agent-rl": ("swe_rl_jax.commands.agent_rl", "GRPO over agent episodes in the sandbox, judged by the harness, "
                 "resumable, HF export"),
    "generate": ("swe_rl_jax.commands.generate", "sample answers to chat prompts with the rollout engine"),
    "eval": ("swe_rl_jax.commands.eval", "greedy subtask evaluation: format, hit, precision/recall, F-beta, applied"),
    "resolve": ("swe_rl_jax.commands.resolve", "Agentless-style inference: localize, repair, filter, vote -> predictions"),
    "evaluate": ("swe_rl_jax.commands.evaluate", "run instances' tests on predicted patches -> %applied, %resolved"),
    "rerank": ("swe_rl_jax.commands.rerank", "apply a selection rule again to a finished resolve run's trace -> predictions"),
    "curate": ("swe_rl_jax.commands.curate", "SWE-RL instances: merged PRs and linked issues from GitHub's event archive + clones"),
    "synthesize": ("swe_rl_jax.commands.synthesize", "validated tasks from a repository with tests: injected bugs its tests catch"),
    "plan-memory": ("swe_rl_jax.commands.plan_memory", "per-chip memory, fit and roofline of a run's programs on CPU or TPU targets"),
}


# What an interrupted run (Ctrl-C, SIGTERM) leaves behind and how to go on; one line each.
INTERRUPTED: dict[str, str] = {
    "main": "SFT and RL checkpoints already saved under out_dir are kept; the same command runs the job again, "
            "SFT and RL resuming from their last checkpoints (the other stages are redone)",
    "sft": "checkpoints already saved are kept; the same command resumes from the last",
    "rl": "checkpoints already saved are kept; the same command resumes from the last",
    "agent-rl": "checkpoints already saved are kept; the same command resumes from the last (the step in progress "
                "is sampled again)",
    "resolve": "instances of finished chunks (`chunk` at a time) are kept in --out and its trace, finished test runs "
               "in the verification cache; the same command resumes with the rest",
    "synthesize": "validated tasks are written only at the end: nothing was written; the same command starts again",
}
_NOTHING_KEPT = "outputs are written whole at the end, so nothing was written and earlier results are as they were"


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: python -m swe_rl_jax.cli [--verbose] COMMAND [args...]", "",
             "--verbose: keep third-party libraries' INFO logs and warnings (off by default)", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from swe_rl_jax import quiet
    if argv and argv[0] == "--verbose":
        argv = argv[1:]
        quiet.verbose()
    else:
        quiet.quiet_third_party()
    if argv and argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if not argv:  # no command: usage, but as the error it is
        print(f"error: no command given\n\n{usage()}", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    sandbox = sys.modules.get("swe_rl_jax.harness.sandbox")
    if sandbox is not None:  # an earlier command of this process may have been interrupted
        sandbox.allow_runs()
    from swe_rl_jax.policies.base import PolicyError
    # SIGTERM (a scheduler's stop, `kill`) ends the run the way Ctrl-C does: one line, no traceback.
    # SIGINT too even where the parent left it ignored (a script's `command &`), so `kill -INT` stops a run.
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:
        sandbox = sys.modules.get("swe_rl_jax.harness.sandbox")
        if sandbox is not None:  # test runs in their own sessions, out of the terminal's reach
            sandbox.stop_all_runs()
        print(f"interrupted: {INTERRUPTED.get(name, _NOTHING_KEPT)}", file=sys.stderr)
        return 130
    except user_errors() as e:  # bad input: one clear line, no traceback
        print(redact(f"error: {e}"), file=sys.stderr)
        return 2
    except PolicyError as e:  # the model answered nothing (a dead endpoint): one line, a failed run
        print(redact(f"error: {e}"), file=sys.stderr)
        return 1
    except Exception:  # a bug: the traceback, with secrets masked
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that report bad input (config, files, checkpoints) rather than a bug."""
    from swe_rl_jax.checkpoints.hf_config import CheckpointError
    from swe_rl_jax.config import ConfigError
    from swe_rl_jax.data.records import RecordFormatError
    from swe_rl_jax.data.sources import InputError
    from swe_rl_jax.synth.repos import SynthRepoError
    from swe_rl_jax.policies.recorded import RecordedAnswersError
    from swe_rl_jax.tokenizer import TokenizerError

    return (ConfigError, CheckpointError, RecordFormatError, RecordedAnswersError, TokenizerError, FileNotFoundError,
            InputError, SynthRepoError)


if __name__ == "__main__":
    sys.exit(main())
