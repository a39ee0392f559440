"""Building a run with a mixture-of-experts policy: the built-in model takes the model section's
MoE fields and exports as Qwen3-MoE; rl.old_logp defaults to "recompute" when the policy has
experts; a dense model's warm-start cache key does not see the MoE fields; a MoE run logs the
sampler-trainer routing mismatch, and routing replay zeroes it."""

import json
import os

import pytest

from rlscale.model.config import MOE_FIELDS
from rlscale.model.hf_checkpoint import load_hf_config
from rlscale.rl.presets import resolve_rl_config
from rlscale.runner import builders
from rlscale.runner import validate
from rlscale.runner.config_files import load_config_file
from tests.runner.runner_configs import tiny_config

MOE_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "configs", "moe.py")


def _moe_tiny(**overrides):
  config = tiny_config(**overrides)
  moe = load_config_file(MOE_CONFIG, "smoke").model
  for name in MOE_FIELDS:
    config.model[name] = moe[name]
  config.model.moe_intermediate_size = 32
  return config


def test_builtin_model_takes_the_moe_fields_and_exports_as_qwen3_moe(tmp_path):
  from rlscale.runner.loop import export_policy  # pylint: disable=g-import-not-at-top
  tokenizer = type("Tok", (), {"vocab_size": 40})()
  model_config, params, _ = builders.build_model(_moe_tiny(), tokenizer, lambda _: None)
  assert (model_config.num_experts, model_config.num_experts_per_tok,
          model_config.moe_intermediate_size, model_config.model_type) == (8, 2, 32, "qwen3_moe")
  assert params["layers_0"]["mlp"]["experts"]["gate_proj"].shape == (8, 32, 32)
  path = export_policy(str(tmp_path / "run"), model_config, params)
  assert load_hf_config(path) == model_config.replace(remat=False, moe_dispatch="auto")


@pytest.mark.parametrize("experts, explicit, expected", [
    (8, None, "recompute"), (0, None, "sampler"), (8, "sampler", "sampler")])
def test_old_logp_defaults_to_recompute_with_experts(experts, explicit, expected):
  config = _moe_tiny()
  config.model.num_experts = experts
  config.rl.old_logp = explicit
  rl = validate.default_old_logp(config, resolve_rl_config(config.rl))
  assert rl.old_logp == expected


def test_old_logp_default_reads_an_hf_checkpoints_config(tmp_path):
  (tmp_path / "config.json").write_text(
      '{"model_type": "qwen3_moe", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 32,'
      ' "num_hidden_layers": 2, "num_attention_heads": 2, "num_experts": 4,'
      ' "moe_intermediate_size": 8, "num_experts_per_tok": 2}')
  config = tiny_config(model__source="hf", model__checkpoint_path=str(tmp_path))
  assert validate.model_has_experts(config)
  assert validate.default_old_logp(config, resolve_rl_config(config.rl)).old_logp == "recompute"


def test_a_dense_models_model_section_without_moe_fields_builds_dense():
  config = tiny_config()
  assert not any(name in config.model for name in MOE_FIELDS)
  tokenizer = type("Tok", (), {"vocab_size": 40})()
  model_config, params, _ = builders.build_model(config, tokenizer, lambda _: None)
  assert model_config.num_experts == 0 and model_config.model_type == "qwen3"
  assert "experts" not in params["layers_0"]["mlp"]


def test_a_moe_run_logs_the_routing_mismatch_and_routing_replay_zeroes_it(tmp_path):
  from rlscale.runner.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top
  mismatch = {}
  for replay in (False, True):
    config = _moe_tiny(sft__cache_dir=str(tmp_path / "sft"))
    config.model.moe_routing_replay = replay
    workdir = tmp_path / f"replay_{replay}"
    train_and_evaluate(config, str(workdir))
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    mismatch[replay] = [r["train/moe/routing_mismatch"] for r in records
                        if "train/moe/aux_loss" in r]
  assert len(mismatch[False]) == 4 and all(0.0 <= m <= 1.0 for m in mismatch[False])
  assert mismatch[True] == [0.0] * 4


def test_routing_replay_needs_a_model_with_experts():
  config = tiny_config()
  config.model.moe_routing_replay = True
  with pytest.raises(ValueError, match="model.moe_routing_replay=True needs a model with experts"):
    validate.routing_replay(config)
  with pytest.raises(ValueError, match="model.moe_routing_replay=True needs a model with experts"):
    validate.check_config(config)  # before anything is built
