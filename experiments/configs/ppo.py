"""PPO on the default task: a critic (same architecture, scalar value head), GAE and value clipping.

Run:

  python -m rlscale.main --config=experiments/configs/ppo.py --workdir=runs/ppo

Smoke run (about a minute): `--config=experiments/configs/ppo.py:smoke`.
"""

from rlscale.runner.config_files import load_config_file, sibling


def get_config(arg=None):
  """The default config with the PPO preset (see rlscale.rl.presets)."""
  config = load_config_file(sibling(__file__, "default.py"), arg)
  # PPO preset: GAE advantages from a learned critic, clipped surrogate, clipped value loss.
  config.rl.algorithm = "ppo"
  # GAE discount and lambda over response tokens (reward on the last token).
  config.rl.gamma = 1.0
  config.rl.lam = 0.95
  # PPO needs no groups: G = 1 sample per prompt, with G times more prompts to keep B the same.
  config.rl.prompts_per_step = config.rl.prompts_per_step * config.rl.group_size
  config.rl.group_size = 1
  # Two passes over each rollout batch in two minibatches (the first pass has ratio 1).
  config.rl.epochs = 2
  config.rl.minibatches = 2
  return config
