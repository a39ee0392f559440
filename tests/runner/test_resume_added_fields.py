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
  del saved["mesh"], saved["model"]["attention_impl"], saved["model"]["remat_impl"]
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


def test_a_checkpoint_resumes_on_another_mesh(tmp_path):
  """mesh.* are RESUMABLE_FIELDS: a run saved on {data: 4} may continue on {fsdp: 2, tensor: 2}
  (tests/runner/test_mesh_runner.py shows the continuation), not on another model width."""
  workdir = _old_workdir(tmp_path, tiny_config())
  check_resume_config(workdir, tiny_config(mesh__data=1, mesh__fsdp=2, mesh__tensor=2))
  with pytest.raises(ValueError, match=r"model.hidden_size: 32 -> 64"):
    check_resume_config(workdir, tiny_config(mesh__fsdp=2, model__hidden_size=64))
