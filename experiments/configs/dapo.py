"""DAPO on the default task: clip-higher, token-mean, dynamic sampling and overlong shaping.

Run:

  python -m rlscale.main --config=experiments/configs/dapo.py --workdir=runs/dapo

Smoke run (about a minute): `--config=experiments/configs/dapo.py:smoke`.
"""

from rlscale.runner.config_files import load_config_file, sibling


def get_config(arg=None):
  """The default config with the DAPO preset (Yu et al. 2025; see rlscale.rl.presets)."""
  config = load_config_file(sibling(__file__, "default.py"), arg)
  # DAPO preset: eps_low 0.2, eps_high 0.28, token-mean, dynamic sampling, overlong shaping.
  config.rl.algorithm = "dapo"
  return config
