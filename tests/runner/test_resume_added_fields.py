"""A run checkpointed before a config field existed resumes while the field keeps the value its
absence meant (`run_dir.ADDED_FIELD_DEFAULTS`), and is refused when it changes."""

import json
import os

import pytest

from rlscale.runner.run_dir import check_resume_config
from tests.runner.runner_configs import tiny_config


def _old_workdir(tmp_path, config):
  """A workdir with a checkpoint and a config.json written without the fields added since."""
  saved = config.to_dict()
  del saved["optim"]["schedule_unit"], saved["optim"]["warmup_samples"]
  del saved["train"]["measure_noise_scale"]
  os.makedirs(tmp_path / "checkpoints" / "4")
  with open(tmp_path / "config.json", "w", encoding="utf-8") as f:
    json.dump({"config": saved}, f, default=str)
  return str(tmp_path)


def test_old_checkpoint_resumes_with_the_fields_at_their_old_meaning(tmp_path):
  config = tiny_config()
  check_resume_config(_old_workdir(tmp_path, config), config)  # no error


def test_old_checkpoint_with_a_changed_added_field_is_refused(tmp_path):
  workdir = _old_workdir(tmp_path, tiny_config())
  changed = tiny_config(optim__schedule_unit="samples")
  with pytest.raises(ValueError, match=r"optim.schedule_unit: 'steps' -> 'samples'"):
    check_resume_config(workdir, changed)
