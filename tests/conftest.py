import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Nothing in the test suite may reach a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite runs on CPU: never start the TPU runtime that the installed libtpu offers (it logs
# errors and costs time in every process; child processes inherit this).
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _session_dir(variable: str, prefix: str) -> None:
    """`variable` names a fresh directory for this session (removed at its end) unless already set;
    the processes the tests start inherit it."""
    if variable not in os.environ:
        os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, os.environ[variable], True)


# One persistent XLA compilation cache per test session, shared with the processes the tests start:
# every CLI run, trainer and engine traces its programs anew, and the same tiny programs compile
# again and again (the main job's evaluations, resumed runs). Each program is compiled once; a
# cached executable is the one XLA compiled (same HLO, same options), so no result changes.
# min compile time 0: under load the tiny programs' compiles fall below jax's 1 s default.
_session_dir("JAX_COMPILATION_CACHE_DIR", "swe-rl-jax-xla-cache-")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# The package's own cache (converted GGUF tokenizers, swe_rl_jax.tokenizer.cache_root) likewise lives
# for the session, shared with the processes it starts, and never in the user's ~/.cache.
_session_dir("SWE_RL_JAX_CACHE", "swe-rl-jax-cache-")
# Cheaper CPU code generation for the whole session and the processes it starts (jax reads this
# when it is imported; XLA backend optimization level 0, expensive LLVM passes off): the suite's
# programs are tiny and compiling them is most of its time (the RL packing tests: 116 s -> 73 s).
# Same HLO passes, so what a test compares is unchanged; benchmarks (tools/) never run this way.
# A test module whose programs are big enough that running them costs more than compiling them
# (SmolLM2-135M itself) opts out with `pytestmark = pytest.mark.optimized_code` (see below).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# XLA:CPU's legacy kernel emitters instead of its newer MLIR fusion emitters, for the session and
# the processes it starts (XLA reads XLA_FLAGS when its CPU backend starts; an XLA_FLAGS that
# already names the flag is left as it is). The programs jax hands XLA are the same; XLA's CPU
# code generation for their fused kernels differs, so results agree to float rounding (the 8-device
# sharded rollouts: the same tokens, logprobs within 1.3e-6), and compiles take a third to a
# quarter of the time (the RL packing tests: 114 s -> 48 s of CPU; those sharded rollouts: 80 s ->
# 40 s). Running programs is no slower (tests/test_smollm2.py: 112 s either way).
_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters"
if _FUSION_EMITTERS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), f"{_FUSION_EMITTERS}=false"]))
sys.path.insert(0, str(Path(__file__).parent))

# The costliest test files, first: run_tests.sh schedules whole files on two workers in collection
# order (--no-loadscope-reorder; xdist's default sorts by test count, which put these few-test
# files last and left one worker idle through the last of them). Seconds of one quiet run,
# 2026-11-29 (test_smollm2.py now holds the SmolLM2 greedy rollouts); a file not named keeps its place after these.
# test_harness_images.py and test_agent_hostile.py (both in two modes since issue 58) placed by their
# time on a loaded machine, 2026-12-07.
COSTLIEST_FILES = ("test_agent_multihost.py", "test_main_job.py", "test_parallel_multihost.py",
                   "test_resolve_served.py", "test_rl_packing.py", "test_smollm2.py", "test_models_attention.py", "test_rl_ppo.py", "test_main_job_edit_stage.py",
                   "test_train_losses.py", "test_train_step.py", "test_sft_end_to_end.py", "test_lora_peft.py",
                   "test_sampling_sharded.py", "test_accelerator_check.py", "test_harness_images.py",
                   "test_harness_escape.py", "test_agent_hostile.py", "test_plan_tpu.py", "test_rl_sharded.py",
                   "test_parallel_sharding.py", "test_train_checkpointing.py", "test_rl_run.py", "test_sampling_parity.py",
                   "test_rl_agent_run.py", "test_agent_ray.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "optimized_code: compile this module's programs with XLA's full CPU "
                            "optimization (it runs SmolLM2-135M: less time running than the cheap code saves compiling)")


@pytest.fixture(autouse=True, scope="module")
def compile_mode(request):
    """XLA's optimization for this module's compiles: full under `optimized_code`, else the session's
    cheap default. jax reads the flag at every compile (the persistent cache keys on it), and
    processes the module starts inherit the environment variable."""
    import jax

    session = os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"]
    cheap = session == "1" and request.node.get_closest_marker("optimized_code") is None
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1" if cheap else "0"
    jax.config.update("jax_disable_most_optimizations", cheap)
    yield
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = session
    jax.config.update("jax_disable_most_optimizations", session == "1")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(COSTLIEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """One tiny random Llama checkpoint (SmolLM2 vocabulary) shared by the pipeline tests."""
    from hf_reference import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


# The execution harness's tests on the shipped sample (tests/test_harness*.py): per test module one
# set of the sample's clones, one scratch directory and one environment cache.
@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    from swe_rl_jax.data.sample import make_sample_repos

    root = tmp_path_factory.mktemp("repos")
    make_sample_repos(root)
    return root


@pytest.fixture(scope="module")
def open_dir():
    """A scratch directory the sandbox user can reach (pytest's tmp_path root is 0700)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="swe-harness-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def options(tmp_path_factory, open_dir):
    from swe_rl_jax.harness import EnvironmentOptions, HarnessOptions, Limits

    # The sample's three repositories share one spec, so one environment serves the module.
    return HarnessOptions(workers=2, limits=Limits(timeout_s=60),
                          env=EnvironmentOptions(cache_dir=str(tmp_path_factory.mktemp("envs"))),
                          work_dir=str(open_dir / "work"))


@contextlib.contextmanager
def unguarded(*args, **kwargs):
    """A stand-in for harness.runner.start_guard in counterfactuals: the test run without the
    in-process guard (harness/guard.py), to show what another defence catches on its own."""
    yield None
# Image mode's tests (tests/test_harness_images.py and the attack files' image runs): the sample's
# images, built from this host's files by tools/make_images.py once per machine and content
# (~/.cache/swe_rl_jax/test-images/<key>/), and unpacked into a cache beside them that later sessions reuse.
@pytest.fixture(scope="session")
def sample_images():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from make_images import sample_images as build

    return build()


@pytest.fixture(scope="session")
def image_options(sample_images):
    from swe_rl_jax.harness.images import ImageOptions

    return ImageOptions(dir=str(sample_images / "images"), cache=str(sample_images / "cache"))
