"""Training metrics: FLOP counts and MFU, and a writer to TensorBoard event files plus JSONL."""
from __future__ import annotations

import json
import math
import resource
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import jax

from swe_rl_jax.models import lora
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.params import param_specs
from swe_rl_jax.plan.chips import chip_of_kind

def peak_flops_per_device(device_kind: Optional[str] = None) -> Optional[float]:
    """The datasheet dense bf16 peak of a device kind (default: this process's first device), from
    the chip table (`plan.chips`); None when unknown (CPUs), in which case MFU is not reported
    unless a peak is configured."""
    kind = device_kind if device_kind is not None else jax.devices()[0].device_kind
    chip = chip_of_kind(kind)
    return chip.peak_flops if chip is not None else None


def train_flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Forward+backward FLOPs per trained token: 6·N for the matmul weights (the input
    embedding is a lookup, so it counts only when tied to the output projection) plus
    12·L·H·hd·S for the attention scores and values (full S×S, as the decoder computes it).
    With LoRA (`config.lora`) the base is frozen: its weights get no gradient, so the backward
    through them computes activation gradients only, 4·N in all, and the adapters add their own
    6·N_adapters."""
    n = config.num_params()
    if not config.tie_word_embeddings:
        n -= config.vocab_size * config.hidden_size
    attention = 12 * config.num_layers * config.num_heads * config.head_dim_ * seq_len
    if config.lora is None:
        return 6.0 * n + attention
    adapters = sum(math.prod(shape) for path, (shape, _) in param_specs(config).items() if lora.is_adapter(path))
    return 4.0 * n + 6.0 * adapters + attention


def mfu(flops: float, seconds: float, num_devices: int, peak_per_device: Optional[float]) -> Optional[float]:
    """Model FLOP utilisation: achieved FLOP/s over the devices' combined peak."""
    if not peak_per_device or seconds <= 0:
        return None
    return flops / seconds / (num_devices * peak_per_device)


def host_memory_gb() -> dict[str, float]:
    """This process's resident memory now and at its peak, in GiB: on a CPU host the model, the
    optimizer and every compiled program's buffers live there, so these are the numbers that
    decide whether a run is killed for memory."""
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    peak = peak_kib / (2**30 if sys.platform == "darwin" else 2**20)
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):  # no procfs (macOS): the peak alone
        return {"host/peak_rss_gb": peak}
    rss = pages * resource.getpagesize() / 2**30
    # The kernel updates its high-water mark lazily, so it can trail the current size.
    return {"host/rss_gb": rss, "host/peak_rss_gb": max(peak, rss)}


class MetricsWriter:
    """Scalars to `<logdir>/metrics.jsonl` (one JSON object per step, appended across restarts)
    and TensorBoard event files under `logdir`. Only process 0 writes."""

    def __init__(self, logdir: str | Path, enabled: Optional[bool] = None) -> None:
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.logdir = Path(logdir)
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter

        self.logdir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.logdir / "metrics.jsonl", "a", encoding="utf-8")
        self._tb = SummaryWriter(str(self.logdir))

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": int(step)}
        for key, value in metrics.items():
            if value is None:
                continue
            value = float(value)
            record[key] = value
            if math.isfinite(value):
                self._tb.add_scalar(f"train/{key}", value, int(step))
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()

    def close(self) -> None:
        if self.enabled:
            self._jsonl.close()
            self._tb.close()


def metric_series(path: Path, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` in a MetricsWriter's metrics.jsonl (empty when the file or key is absent)."""
    if not path.is_file():
        return [], []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if key in r]
    return [r["step"] for r in rows], [r[key] for r in rows]


def plot_metric_panels(panels: Sequence[tuple[Path, Sequence[str], str]], out: Path) -> None:
    """One PNG of side-by-side panels, each (metrics.jsonl, keys, title): the keys' curves over steps;
    a key never logged is named on its panel rather than silently missing."""
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (path, keys, title) in zip(axes[0], panels):
        series = [(key, *metric_series(path, key)) for key in keys]
        for key, x, y in series:
            ax.plot(x, y, marker="o", markersize=3, label=key)
        missing = [key for key, x, _ in series if not x]  # e.g. KL with kl_coef 0 (no reference model)
        if missing:
            ax.text(0.5, 0.9, f"not logged: {', '.join(missing)}", ha="center", va="center", transform=ax.transAxes,
                    fontsize=8)
        if len(keys) - len(missing) > 1:
            ax.legend(fontsize=8)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
