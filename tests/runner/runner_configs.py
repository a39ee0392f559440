"""A tiny config for end-to-end runner tests (seconds per run, mostly compilation)."""

import os

from rlscale.runner.config_files import load_config_file

DEFAULT = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "configs", "default.py")


def tiny_config(arg="smoke", **overrides):
  """The default config shrunk: 1-layer width-32 model, P=2, G=2, 4 RL steps."""
  config = load_config_file(DEFAULT, arg)
  config.model.hidden_size = 32
  config.model.intermediate_size = 64
  config.model.num_layers = 1
  config.model.num_heads = 2
  config.model.num_kv_heads = 1
  config.model.head_dim = 16
  config.sft.steps = 5
  config.sft.batch_size = 8
  config.rl.prompts_per_step = 2
  config.rl.group_size = 2
  config.rl.batch_size = 4
  config.rollout.max_new_tokens = 4
  config.task.eval_size = 4
  config.eval.pass_k = 2
  config.train.total_steps = 4
  config.train.eval_every = 2
  config.train.checkpoint_every = 2
  for dotted, value in overrides.items():
    section, field = dotted.split("__")
    config[section][field] = value
  return config


def comparable(records):
  """metrics.jsonl records without wall-clock fields (those differ between identical runs)."""
  return [{k: v for k, v in r.items() if not k.startswith(("wall/", "time/"))} for r in records]
