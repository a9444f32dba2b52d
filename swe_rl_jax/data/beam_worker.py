"""A Beam SDK worker process of `build-data --beam --workers N` (`beam_build.pipeline_setup`): Beam's
own (`apache_beam.runners.worker.sdk_worker_main`), started

- quiet when the command is (`quiet.py`; else every worker logs some twenty INFO lines and
  Beam's apitools warning);
- deaf to SIGINT: a Ctrl-C reaches the whole process group, and the command, not each worker with
  a traceback of its own, ends the run;
- stopped by the command: it registers its process id in the directory `REGISTRY_ENV` names,
  and the command ends it with SIGTERM when interrupted (`beam_build.stopping_workers`), as a
  clean exit; Beam's runner would otherwise wait for a worker that waits for the runner.
"""
import os
import signal
import sys
from pathlib import Path

REGISTRY_ENV = "SWE_RL_JAX_BEAM_WORKERS"


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    registry = os.environ.get(REGISTRY_ENV)
    if registry:
        Path(registry, str(os.getpid())).touch()
    from swe_rl_jax.quiet import quiet_if_inherited

    quiet_if_inherited()  # before apache_beam's import logs its warning
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
