"""`convert`: HF directory or GGUF file -> HF directory (optionally re-typed), verified by re-import.

The export is written in a temporary directory beside --out that replaces --out whole when it is
complete: a failed or interrupted conversion leaves an earlier export as it was, and no shard of
an earlier export stays beside the new ones. --out must be new, empty or an earlier export (a
directory holding other files is refused), and not the source. Paths and --max-shard-gb are
checked before the checkpoint is read.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.checkpoints import load_hf, save_hf
from swe_rl_jax.checkpoints.hf import EXPORT_FILES
from swe_rl_jax.data.sources import InputError
from swe_rl_jax.files import absolute, replacing_dir, result_dir
from swe_rl_jax.model_source import resolve_checkpoint


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli convert", description=__doc__)
    parser.add_argument("--src", required=True, help="HF checkpoint dir, a .gguf file, or 'smollm2'")
    parser.add_argument("--out", required=True, help="output HF directory")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer dir or .gguf to copy (default: the source when it has one)")
    parser.add_argument("--max-shard-gb", type=float, default=2.0,
                        help="largest safetensors shard, in GiB (a positive number; default %(default)s)")
    parser.add_argument("--no-verify", action="store_true", help="skip the bit-exact re-import check")
    args = parser.parse_args(argv)

    if not (math.isfinite(args.max_shard_gb) and args.max_shard_gb > 0):
        raise InputError(f"--max-shard-gb must be a positive number of GiB, got {args.max_shard_gb}")
    src = resolve_checkpoint(args.src)
    tokenizer = resolve_checkpoint(args.tokenizer) if args.tokenizer else None
    if tokenizer and not tokenizer.exists():
        raise InputError(f"--tokenizer: no such file or directory: {absolute(tokenizer)}")
    out = result_dir(args.out, "--out", EXPORT_FILES, inputs=[src, tokenizer])
    dtype = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    # Bad input (a missing source, a wrong-shaped tensor, a damaged GGUF) raises CheckpointError,
    # which the CLI reports in one line with exit status 2.
    with _stage(f"reading {src}"):
        config, params = load_hf(src, dtype=dtype)
    with _stage(f"writing {out} ({config.num_params() / 1e6:.1f}M params, {args.dtype})"), replacing_dir(out) as tmp:
        save_hf(tmp, config, params, tokenizer_dir=tokenizer or _source_tokenizer(src),
                max_shard_bytes=int(args.max_shard_gb * 1024**3))
    if not args.no_verify:
        with _stage("verifying: re-importing the export"):
            _, again = load_hf(out, dtype=dtype)
            same = all(np.array_equal(np.asarray(a), np.asarray(b))
                       for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again)))
        if not same:
            print("error: re-imported export differs from the source", file=sys.stderr)
            return 1
    print(f"wrote {out} ({config.family}, {config.num_params() / 1e6:.1f}M params, {args.dtype})")
    return 0


@contextlib.contextmanager
def _stage(what: str) -> Iterator[None]:
    """Progress on stderr: each stage of a conversion can take seconds to minutes."""
    print(f"{what} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    yield
    print(f"  done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def _source_tokenizer(src):
    if src.suffix == ".gguf":
        return src
    if src.is_dir() and any((src / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return src
    return None
