"""A tiny config for end-to-end runner tests (seconds per run, mostly compilation), and what
those tests share: records compared without timings, a Ctrl-C sent from inside a run."""

import os
import signal
import time

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
  """metrics.jsonl records without wall-clock fields (those differ between identical runs):
  wall/*, time/* and asynchronous rollouts' rollout/*_seconds."""
  return [{k: v for k, v in r.items() if not k.startswith(("wall/", "time/"))
           and not (k.startswith("rollout/") and k.endswith("_seconds"))} for r in records]


def multihost_config(sft_cache: str, total_steps: int):
  """The tiny config for the multi-process runner tests: P = 4 prompts x G = 2 (so 2 processes
  draw 2 prompts each), REINFORCE++ (advantages whitened over the whole batch) with the KL to
  the reference in the reward and old_logp recomputed (both gathered across processes), DAPO's
  overlong shaping and a 40-step warm start so response lengths and rewards vary from row to
  row (with 5 steps every response runs to the limit and only the KL term varies), a learning
  rate of 1e-3 so a step moves the parameters well above float32 noise, a checkpoint every step, and the warm start cached in `sft_cache` (shared by every process and run)."""
  return tiny_config(rl__algorithm="reinforce_pp", rl__kl_coef=0.05, rl__old_logp="recompute",
                     rl__overlong_buffer_frac=0.5, rl__prompts_per_step=4, rl__batch_size=8,
                     train__total_steps=total_steps, train__checkpoint_every=1,
                     train__keep_checkpoints=5, sft__cache_dir=sft_cache,
                     optim__learning_rate=1e-3, sft__steps=40)


def signal_self_on(monkeypatch, module, name, call_index):
  """Makes the `call_index`-th call (1-based) of module.name send SIGINT to this process first,
  and wait until the stop flag's watcher thread has printed its acknowledgement."""
  original = getattr(module, name)
  calls = []

  def wrapped(*args, **kwargs):
    calls.append(1)
    if len(calls) == call_index:
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.5)
    return original(*args, **kwargs)
  monkeypatch.setattr(module, name, wrapped)
