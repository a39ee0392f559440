"""train.measure_noise_scale in build_run: checked, and one warning line when the batch cannot give
the noise scale's two slices (the split rule itself: tests/train/test_update.py)."""

import jax
import pytest

from rlscale.runner import builders
from rlscale.runner import validate
from tests.runner.runner_configs import tiny_config


def test_unmeasurable_batch_warns_once(tmp_path):
  if jax.device_count() != 1:
    pytest.skip("on several devices each device's part is a small batch")
  logs = []
  # P 2 x G 2 = 4 rows, rl.microbatches = 1: one slice, no small batch.
  config = tiny_config(train__measure_noise_scale=True, rl__microbatches=1)
  builders.build_run(config, str(tmp_path), log=logs.append)
  warnings = [line for line in logs if "measure_noise_scale" in line]
  assert warnings == ["warning: train.measure_noise_scale: the gradient noise scale cannot be "
                      "measured at this batch: rl.microbatches=1 gives one slice "
                      "(unset it, or set it >= 2)"]
  logs.clear()
  builders.build_run(tiny_config(train__measure_noise_scale=True), str(tmp_path), log=logs.append)
  assert not [line for line in logs if "measure_noise_scale" in line]  # unset: 2 x 2 rows


def test_flag_must_be_a_bool():
  config = tiny_config()
  config.train.measure_noise_scale = None
  with pytest.raises(ValueError, match=r"train.measure_noise_scale must be True or False, got None"):
    validate.check_train_config(config)
