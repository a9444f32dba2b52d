"""`convert`: HF directory or GGUF file -> HF directory (optionally re-typed), verified by re-import."""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.checkpoints import load_hf, save_hf
from swe_rl_jax.policy import resolve_checkpoint


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli convert", description=__doc__)
    parser.add_argument("--src", required=True, help="HF checkpoint dir, a .gguf file, or 'smollm2'")
    parser.add_argument("--out", required=True, help="output HF directory")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer dir or .gguf to copy (default: the source when it has one)")
    parser.add_argument("--max-shard-gb", type=float, default=2.0)
    parser.add_argument("--no-verify", action="store_true", help="skip the bit-exact re-import check")
    args = parser.parse_args(argv)

    src = resolve_checkpoint(args.src)
    dtype = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    # Bad input (a missing source, a wrong-shaped tensor, a damaged GGUF) raises CheckpointError,
    # which the CLI reports in one line with exit status 2.
    with _stage(f"reading {src}"):
        config, params = load_hf(src, dtype=dtype)
    tokenizer = args.tokenizer or _source_tokenizer(src)
    with _stage(f"writing {args.out} ({config.num_params() / 1e6:.1f}M params, {args.dtype})"):
        out = save_hf(args.out, config, params, tokenizer_dir=tokenizer,
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
