"""Bad input to the data commands (`curate`, `build-data`, `convert`): one clear line and a non-zero
exit before work where it can be known then, never exit 0 with nothing made, never an earlier
result lost; Ctrl-C stops every worker; third-party noise off unless `--verbose`; progress shown."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swe_rl_jax.cli import main as cli_main
from swe_rl_jax.data.records import SPLITS, SUBTASKS
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos

HOUR = Path(__file__).parent / "data" / "gharchive" / "2015-01-01-12.excerpt.json.gz"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample's clones, and instance files of it: none, one, and 480 (the sample's 12, renamed 40 times)."""
    root = tmp_path_factory.mktemp("bad_input_data")
    make_sample_repos(root / "repos")
    rows = [json.loads(line) for line in (SAMPLE_DIR / "instances.jsonl").read_text().splitlines()]
    (root / "empty.jsonl").write_text("")
    (root / "one.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (root / "many.jsonl").write_text("".join(json.dumps(dict(r, instance_id=f"{r['instance_id']}-{k}")) + "\n"
                                             for k in range(40) for r in rows))
    return root


def _error_lines(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error: ")]


def _files(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _events(tmp_path: Path, kind: str) -> Path:
    """An archive hour with nothing usable in it."""
    path = tmp_path / ("hour.jsonl" if kind in ("empty", "garbage") else "hour.json.gz")
    path.write_bytes({"empty": b"", "garbage": b"not json\n{\"half\": \n",
                      "binary": bytes(range(256)) * 8,
                      "truncated": HOUR.read_bytes()[:40]}[kind])
    return path


@pytest.mark.parametrize("command", [
    *(f"curate-{kind}" for kind in ("empty", "garbage", "binary", "truncated")),
    "build-data", "build-data --workers 2", "build-data --beam", "build-data --beam --workers 2",
])
def test_a_run_that_makes_nothing_says_why_and_exits_2(command, sample, tmp_path, capsys):
    """Input with nothing usable in it (an events file that is empty, garbled, binary or cut short;
    an empty instances file, whatever the engine) is one line saying why and exit 2, with no output
    made: never exit 0 with nothing produced."""
    out = tmp_path / "out"
    if command.startswith("curate"):
        argv = ["curate", "--events", str(_events(tmp_path, command.split("-")[1])), "--repos",
                str(sample / "repos"), "--out", str(out), "--no-progress"]
        why = "no pull request or issue event"
    else:
        argv = ["build-data", "--instances", str(sample / "empty.jsonl"), "--repos", str(sample / "repos"),
                "--out", str(out), "--no-progress", *command.split()[1:]]
        why = "nothing to build: no instances in --instances"
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in _error_lines(err)[0], err
    assert not out.exists()


@pytest.mark.parametrize("argv, flag", [
    (["convert", "--max-shard-gb", "-1"], "--max-shard-gb"),
    (["convert", "--max-shard-gb", "0"], "--max-shard-gb"),
    (["convert", "--max-shard-gb", "nan"], "--max-shard-gb"),
    (["convert", "--max-shard-gb", "inf"], "--max-shard-gb"),
    (["build-data", "--sample", "--workers", "-2"], "--workers"),
    (["build-data", "--sample", "--renamed-copies", "-1"], "--renamed-copies"),
    (["curate", "--events", str(HOUR), "--repos", ".", "--related-files", "-1"], "related_files"),
])
def test_numbers_out_of_range_are_one_line_before_work(argv, flag, tmp_path, capsys):
    """A numeric setting out of its range (negative, zero where a size is meant, nan, inf) is one line
    naming it and exit 2, checked before any input is read: `convert --max-shard-gb -1` used to
    write one shard per tensor and exit 0. (The source named does not exist: the setting is
    checked first.)"""
    extra = ["--src", str(tmp_path / "no-such-checkpoint")] if argv[0] == "convert" else []
    assert cli_main(argv + extra + ["--out", str(tmp_path / "out")]) == 2
    errors = _error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and flag in errors[0], errors
    assert not (tmp_path / "out").exists()


def test_a_run_replaces_an_earlier_result_whole_or_leaves_it_as_it_was(sample, tmp_path, capsys):
    """An output directory holding an earlier result: a run of fewer subtasks replaces it whole (no
    old file left beside the new summary), a failing run leaves it byte for byte, and a directory
    holding files the command does not write is refused, not replaced."""
    out = tmp_path / "records"
    build = ["build-data", "--instances", str(SAMPLE_DIR / "instances.jsonl"), "--repos", str(sample / "repos"),
             "--out", str(out), "--no-progress"]
    assert cli_main(build) == 0
    assert {p.stem for p in (out / "train").iterdir()} == set(SUBTASKS)
    assert cli_main(build + ["--subtasks", "file_localization"]) == 0
    assert sorted(_files(out)) == ["summary.json", *(f"{split}/file_localization.jsonl" for split in SPLITS)]
    before = _files(out)
    failing = ["build-data", "--instances", str(sample / "empty.jsonl"), "--repos", str(sample / "repos"),
               "--out", str(out), "--no-progress"]
    assert cli_main(failing) == 2 and _files(out) == before
    # curate failing into a directory of an earlier curation: instances.jsonl is not truncated.
    curated = tmp_path / "curated"
    curated.mkdir()
    (curated / "instances.jsonl").write_text('{"instance_id": "earlier"}\n')
    (curated / "report.json").write_text('{"instances": 1}\n')
    before = _files(curated)
    assert cli_main(["curate", "--events", str(_events(tmp_path, "garbage")), "--repos", str(sample / "repos"),
                     "--out", str(curated), "--no-progress"]) == 2
    assert _files(curated) == before
    # A directory of other files is never replaced.
    (out / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    assert cli_main(build) == 2
    assert "notes.txt" in _error_lines(capsys.readouterr().err)[0] and (out / "notes.txt").read_text() == "mine\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary directory left


@pytest.mark.parametrize("argv, flag", [
    (["build-data", "--instances", "ONE", "--repos", "REPOS", "--out", "FILE"], "--out"),
    (["build-data", "--instances", "DIR", "--repos", "REPOS", "--out", "OUT"], "--instances"),
    (["build-data", "--instances", "ONE", "--repos", "FILE", "--out", "OUT"], "--repos"),
    (["curate", "--events", "HOUR", "--repos", "REPOS", "--out", "FILE"], "--out"),
    (["curate", "--events", "HOUR", "--repos", "FILE", "--out", "OUT"], "--repos"),
    (["convert", "--src", "MISSING", "--out", "FILE"], "--out"),
    (["convert", "--src", "DIR", "--tokenizer", "MISSING", "--out", "OUT"], "--tokenizer"),
])
def test_paths_of_the_wrong_kind_are_one_line_before_work(argv, flag, sample, tmp_path, capsys):
    """A file where a directory is meant, a directory where a file is meant, a path that does not
    exist: one line naming the option, exit 2, before any work (nothing written; `convert` never
    reads its source, `build-data` used to end in a NotADirectoryError traceback)."""
    (tmp_path / "a_file").write_text("x\n")
    (tmp_path / "a_dir").mkdir()
    paths = {"ONE": sample / "one.jsonl", "REPOS": sample / "repos", "HOUR": HOUR, "FILE": tmp_path / "a_file",
             "DIR": tmp_path / "a_dir", "MISSING": tmp_path / "missing", "OUT": tmp_path / "out"}
    assert cli_main([str(paths.get(a, a)) for a in argv] + (["--no-progress"] if argv[0] != "convert" else [])) == 2
    errors = _error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and errors[0].startswith(f"error: {flag}:"), errors
    assert (tmp_path / "a_file").read_text() == "x\n" and list((tmp_path / "a_dir").iterdir()) == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["config without num_attention_heads", "config with a string hidden_size",
                                  "unknown Beam runner", "Beam options with an open quote"])
def test_a_bad_setting_in_a_checkpoint_or_pipeline_config_is_one_line(case, sample, tmp_path, capsys):
    """A checkpoint's config.json missing a required key (or holding one of the wrong type), Beam
    options naming a runner Beam does not know or not splitting: one line naming the key and the
    file (or the option), exit 2, not a KeyError or ValueError traceback."""
    if case.startswith("config"):
        config = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                  "num_hidden_layers": 1, "num_attention_heads": 2}
        if "without" in case:
            del config["num_attention_heads"]
        else:
            config["hidden_size"] = "16"
        (tmp_path / "ckpt").mkdir()
        (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
        argv = ["convert", "--src", str(tmp_path / "ckpt"), "--out", str(tmp_path / "out")]
        needle = f"{tmp_path / 'ckpt' / 'config.json'}: " + ("missing required key 'num_attention_heads'"
                                                             if "without" in case else "hidden_size must be an integer")
    else:
        options = "--runner=NoSuchRunner" if "runner" in case else "--runner='DirectRunner"
        argv = ["build-data", "--instances", str(sample / "one.jsonl"), "--repos", str(sample / "repos"),
                "--out", str(tmp_path / "out"), "--beam", f"--beam-options={options}", "--no-progress"]
        needle = "--beam-options"
    assert cli_main(argv) == 2
    errors = _error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and needle in errors[0], errors
    assert not (tmp_path / "out").exists()


def _group(pgid: int) -> list[int]:
    """The processes of a process group (Linux /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")
def test_sigint_to_the_main_process_stops_every_worker_and_the_run(sample, tmp_path):
    """SIGINT to the main process of `build-data --beam --workers 2` (started as a script's `cmd &`
    starts it: with SIGINT ignored) ends the run and every worker within seconds, with one line
    and exit 130: no worker left running, no traceback, no output."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swe_rl_jax.cli", "build-data", "--instances", str(sample / "many.jsonl"),
         "--repos", str(sample / "repos"), "--out", str(out), "--beam", "--workers", "2", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 120
        while len(_group(proc.pid)) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # until both workers run
        assert proc.poll() is None, proc.communicate()
        time.sleep(1.0)  # into the workers' bundles
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert stderr.startswith("interrupted: ") and stderr.count("\n") == 1, stderr
    deadline = time.monotonic() + 10
    while _group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group(proc.pid) == []
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_third_party_noise_is_off_by_default_and_back_with_verbose(sample, tmp_path, capfd, monkeypatch):
    """Beam's apitools warning, its workers' INFO logs and TFDS's "Downloading and preparing dataset"
    (of a dataset built from local files) are off by default, in the command and in the worker
    processes it starts; `python -m swe_rl_jax.cli --verbose` brings them back."""
    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", *argv], capture_output=True, text=True,
                              timeout=300)

    quiet = run("build-data", "--instances", str(sample / "one.jsonl"), "--repos", str(sample / "repos"),
                "--out", str(tmp_path / "q"), "--beam", "--workers", "2", "--no-progress")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    # --verbose: Beam's import warning is back (the empty input then ends the run at once).
    verbose = run("--verbose", "build-data", "--instances", str(sample / "empty.jsonl"), "--repos",
                  str(sample / "repos"), "--out", str(tmp_path / "v"), "--beam", "--no-progress")
    assert verbose.returncode == 2 and "apitools not found" in verbose.stderr
    # TFDS's own lines on stdout, under the setting a command and its workers share.
    tb = pytest.importorskip("swe_rl_jax.data.tfds_builder")
    from swe_rl_jax import quiet as quiet_setting

    record = {"task_id": "t/file_localization", "subtask": "file_localization", "instance_id": "t", "repo": "o/r",
              "messages": [{"role": "user", "content": "x"}], "ground_truth": {"files": ["a.py"]}}
    (tmp_path / "records" / "train").mkdir(parents=True)
    (tmp_path / "records" / "train" / "file_localization.jsonl").write_text(json.dumps(record) + "\n")
    capfd.readouterr()
    monkeypatch.setenv(quiet_setting.QUIET_ENV, "1")
    tb.prepare(tmp_path / "records", tmp_path / "tfds_quiet", "rl", "file_localization")
    assert "Downloading and preparing" not in capfd.readouterr().out
    quiet_setting.verbose()
    tb.prepare(tmp_path / "records", tmp_path / "tfds_verbose", "rl", "file_localization")
    assert "Downloading and preparing" in capfd.readouterr().out


def test_curate_shows_progress_through_the_archive_and_the_pull_requests(tmp_path, capsys):
    """`curate` reads a day of the archive for minutes: a bar over the archive's bytes, then one over
    the pull requests, on stderr (here the hour's pull requests have no clone, so the run then
    ends with the reason)."""
    (tmp_path / "clones").mkdir()
    assert cli_main(["curate", "--events", str(HOUR), "--repos", str(tmp_path / "clones"),
                     "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    # tqdm's bars, each at its end: "100%|██████████| 6.21k/6.21k [...]" (the archive's size), "3/3".
    read = re.search(r"curate: reading events: 100%\|[^|]*\| (\S+)/(\S+) ", err)
    assert read and read[1] == read[2] == f"{HOUR.stat().st_size / 1000:.2f}k", err
    assert re.search(r"curate: pull requests: 100%\|[^|]*\| ([1-9]\d*)/\1 ", err), err
    assert _error_lines(err)[0].startswith("error: no instance: ")


def test_an_sft_subtask_none_of_whose_examples_fits_is_named_not_waited_on(tiny_llama, tmp_path, capsys):
    """Each example too long for the rows is dropped by the seqio pipeline; a subtask left with none
    was an empty task in the mixture, and seqio's repeated sampling waited on it forever."""
    sft_dir = tmp_path / "sft_data"
    for subtask, response in (("file_localization", "```\na.py\n```"), ("line_localization", "line 7\n" * 40)):
        path = sft_dir / "train" / f"{subtask}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"task_id": f"o__r-1/{subtask}", "subtask": subtask, "instance_id": "o__r-1",
                                    "repo": "o/r", "messages": [{"role": "user", "content": "Fix it."}],
                                    "ground_truth": {}, "candidates": [], "context": {}, "meta": {},
                                    "response": response}) + "\n")
    rc = cli_main(["sft", f"sft_dir={sft_dir}", f"out_dir={tmp_path / 'out'}", f"model.checkpoint={tiny_llama}",
                   "model.tokenizer=smollm2", "subtasks=[file_localization,line_localization]", "inputs_length=64",
                   "targets_length=32", "batch_size=1", "num_steps=1", "progress=false"])
    errors = _error_lines(capsys.readouterr().err)
    assert rc == 2 and len(errors) == 1, errors
    assert "no line_localization SFT example fits" in errors[0] and "response_too_long=1" in errors[0]
