"""Pieces every benchmark script shares: machine description, load average, model-size flags."""

from __future__ import annotations

import argparse
import os
import platform

import jax

from rlscale.model import ModelConfig

MODEL_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "vocab_size")


def load_average() -> list[float]:
  """The 1, 5 and 15 minute load averages (runnable processes; above the CPU count means the
  machine is shared and every timing is slowed)."""
  return [round(x, 2) for x in os.getloadavg()]


def machine_info() -> dict:
  """Platform, CPU model, CPU count, jax devices, XLA_FLAGS and the peer libraries' versions
  (None when not installed)."""
  info = {"platform": platform.platform(), "processor": platform.processor(),
          "cpu_count": os.cpu_count(), "jax": jax.__version__,
          "devices": [str(d) for d in jax.local_devices()],
          "xla_flags": os.environ.get("XLA_FLAGS", "")}
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      info["cpu"] = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
  except (OSError, StopIteration):
    pass
  for name in ("torch", "transformers", "trl"):
    try:
      info[name] = __import__(name).__version__
    except ImportError:
      info[name] = None
  return info


def add_model_args(parser: argparse.ArgumentParser) -> None:
  """--hidden_size, --num_layers, ... defaulting to W1 (`ModelConfig()`), and --dtype (compute
  dtype; parameters stay float32)."""
  w1 = ModelConfig()
  for field in MODEL_FIELDS:
    parser.add_argument(f"--{field}", type=int, default=getattr(w1, field),
                        help=f"model {field} (W1: {getattr(w1, field)})")
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                      help="compute dtype (parameters and Adam moments stay float32)")


def model_config_from_args(args) -> ModelConfig:
  """The ModelConfig the add_model_args flags describe."""
  return ModelConfig(dtype=args.dtype, **{f: getattr(args, f) for f in MODEL_FIELDS})
