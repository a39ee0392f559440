"""builders.held_out_examples: an explicit task.eval_size is required exactly; otherwise
task.default_eval_size is shrunk, with a warning, to what a data file holds. build_model: float32
master weights for every source, the exported policy in the source's dtype. build_run: held-out
sampling is the rollout's unless eval.sampling overrides it. Check once, build once: each config
check runs once per run, whether build_run checks or is handed preflight's result."""

import jax
import ml_collections
import numpy as np
import pytest
import safetensors.numpy

from rlscale.model.hf_checkpoint import load_hf_checkpoint, save_hf_checkpoint
from rlscale.model.transformer import init_params
from rlscale.parallel.shardings import put_on_mesh
from rlscale.runner import builders
from rlscale.runner import validate
from rlscale.runner.builders import build_model
from rlscale.runner.validate import model_remat
from rlscale.runner.run_dir import export_policy
from rlscale.sampler.strategies import SamplingConfig
from rlscale.train import passes
from rlscale.train import update as update_lib
from rlscale.train import update_fn as update_fn_lib
from rlscale.train.optimizer import make_optimizer
from rlscale.train.state import create_train_state
from tests.runner.runner_configs import tiny_config
from tests.train import update_problem as problem


class _FileTask:
  """A task with `num_eval` held-out rows, like LocalMathSource."""

  def __init__(self, num_eval):
    self.num_eval = num_eval

  def eval_examples(self, n):
    if n > self.num_eval:
      raise ValueError(f"task.eval_size={n} but the file has only {self.num_eval} held-out rows")
    return list(range(n))


class _GeneratorTask:
  """A task that generates prompts (no num_eval), like ReasoningGymSource."""

  def eval_examples(self, n):
    return list(range(n))


def _config(**task):
  return ml_collections.ConfigDict({"task": {"data_path": "/data/small.jsonl",
                                             "holdout_fraction": 0.1, **task}})


def test_explicit_eval_size_is_required_exactly():
  logs = []
  assert builders.held_out_examples(_config(eval_size=3), _FileTask(5), logs.append) == [0, 1, 2]
  with pytest.raises(ValueError, match="task.eval_size=8 but the file has only 5"):
    builders.held_out_examples(_config(eval_size=8, default_eval_size=2), _FileTask(5), logs.append)
  assert not logs


def test_default_eval_size_shrinks_with_a_warning():
  logs = []
  config = _config(eval_size=None, default_eval_size=4)
  assert builders.held_out_examples(config, _FileTask(2), logs.append) == [0, 1]
  assert logs == ["warning: /data/small.jsonl holds 2 held-out rows at task.holdout_fraction=0.1, "
                  "fewer than task.default_eval_size=4: evaluating on 2 (set task.eval_size to "
                  "require a number)"]
  logs.clear()
  assert builders.held_out_examples(config, _FileTask(9), logs.append) == [0, 1, 2, 3]
  assert not logs


def test_default_eval_size_without_a_field_is_256():
  config = ml_collections.ConfigDict({"task": {"eval_size": None}})
  assert len(builders.held_out_examples(config, _GeneratorTask(), print)) == 256


def test_no_held_out_rows_names_holdout_fraction():
  with pytest.raises(ValueError, match="no held-out rows at task.holdout_fraction=0.1; raise it"):
    builders.held_out_examples(_config(eval_size=None), _FileTask(0), print)


def _bf16_checkpoint(path):
  config = problem.MODEL.replace(param_dtype="bfloat16", dtype="bfloat16")
  save_hf_checkpoint(path, config, init_params(config, jax.random.key(0)))
  return str(path)


def test_bf16_hf_checkpoint_trains_float32_master_weights_and_exports_bf16(tmp_path):
  config = tiny_config(model__source="hf", model__checkpoint_path=_bf16_checkpoint(tmp_path / "ckpt"),
                       model__dtype="bfloat16")
  config.optim.learning_rate, config.optim.warmup_steps = 1e-6, 0  # the HF config's LR
  model_config, params, export_dtype = build_model(config, None, lambda _: None)
  assert (model_config.param_dtype, model_config.dtype, export_dtype) == ("float32", "bfloat16",
                                                                         "bfloat16")
  assert model_config.remat  # on by default for HF checkpoints
  assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype(np.float32)}
  rl = problem.rl_config("grpo", prompts=2, group=4)
  tx = make_optimizer(config.optim, **update_lib.optimizer_args(rl, rl_steps=1))
  host = problem.rollout_batch(8)
  host.pop("rewards")
  mesh = problem.one_device_mesh()
  update = update_fn_lib.make_update_fn(model_config, rl, tx, mesh)
  host["old_logp"] = np.asarray(passes.make_logp_fn(model_config, rl.temperature, mesh,
                                                    update.state_shardings.params)(params, host))
  host["advantages"] = np.array([1.0, -1.0] * 4, np.float32)
  state = put_on_mesh(jax.device_get(create_train_state(params, tx)), update.state_shardings)
  state, _ = update(state, host, jax.random.key(0))
  new = jax.device_get(state.params)
  # An update of ~1e-6 moves the RMSNorm scales (~1): in bf16 they would round back to 1.
  for name in ("input_layernorm", "post_attention_layernorm"):
    assert np.any(new["layers_0"][name]["weight"] != params["layers_0"][name]["weight"]), name
  assert np.any(new["norm"]["weight"] != params["norm"]["weight"])
  # The exported policy is stored in the checkpoint's dtype, holding the trained values.
  path = export_policy(str(tmp_path / "run"), model_config.replace(param_dtype=export_dtype), new)
  stored = safetensors.numpy.load_file(f"{path}/model.safetensors")
  assert {v.dtype.name for v in stored.values()} == {"bfloat16"}
  loaded_config, loaded = load_hf_checkpoint(path)
  assert loaded_config.param_dtype == "bfloat16"
  np.testing.assert_array_equal(np.asarray(loaded["norm"]["weight"], np.float32),
                                np.asarray(new["norm"]["weight"].astype(loaded["norm"]["weight"].dtype),
                                           np.float32))


def test_builtin_model_trains_float32_and_exports_model_param_dtype():
  config = tiny_config(model__param_dtype="bfloat16", model__dtype="bfloat16")
  tokenizer = type("Tok", (), {"vocab_size": 40})()
  model_config, params, export_dtype = build_model(config, tokenizer, lambda _: None)
  assert (model_config.param_dtype, model_config.dtype, export_dtype) == ("float32", "bfloat16",
                                                                         "bfloat16")
  assert not model_config.remat  # off by default for the built-in model
  assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype(np.float32)}


def test_model_remat_setting():
  assert model_remat(tiny_config(model__remat=True)) is True
  config = tiny_config()
  config.model.remat = None
  assert model_remat(config) is False


@pytest.mark.parametrize("source, sft_steps, label", [
    ("builtin", 30, "warm start"),
    ("builtin", 0, "base checkpoint (no SFT)"),
    ("hf", 30, "base checkpoint (no SFT)"),  # SFT never runs on an HF checkpoint
])
def test_starting_point_is_named_for_what_rl_starts_from(source, sft_steps, label):
  config = ml_collections.ConfigDict({"model": {"source": source}, "sft": {"steps": sft_steps}})
  assert builders.starting_point_label(config) == label


def test_held_out_sampling_is_the_rollouts_unless_eval_sampling_overrides_it(tmp_path):
  # The evaluator was built with the rollout temperature alone (top_k 0, top_p 1 for pass@k).
  config = tiny_config(sft__steps=0, rollout__top_k=5, rollout__top_p=0.9, rollout__min_p=0.05)
  run = builders.build_run(config, str(tmp_path / "a"), log=lambda _: None)
  rollout = SamplingConfig(temperature=0.5, top_k=5, top_p=0.9, min_p=0.05)
  assert run.sampler.sampling == rollout and run.evaluator.sampling == rollout
  config.eval.sampling.top_p, config.eval.sampling.temperature = 1.0, 1.0
  run = builders.build_run(config, str(tmp_path / "b"), log=lambda _: None)
  assert run.sampler.sampling == rollout
  assert run.evaluator.sampling == SamplingConfig(temperature=1.0, top_k=5, top_p=1.0, min_p=0.05)
  config.eval.sampling.min_p = 2.0
  with pytest.raises(ValueError, match=r"eval\.sampling\.min_p must be a float in \[0, 1\]"):
    builders.build_run(config, str(tmp_path / "c"), log=lambda _: None)
  with pytest.raises(ValueError, match=r"rollout\.min_p must be a float in \[0, 1\]"):
    builders.build_run(tiny_config(rollout__min_p=-0.5), str(tmp_path / "d"), log=lambda _: None)


# Every config check, by the module attributes it is looked up through (functions imported by
# name are looked up in the importing module).
_CHECKS = {
    "resolve_rl_config": ["rlscale.rl.presets", "rlscale.runner.validate",
                          "rlscale.train.update_fn"],
    "validate_rl_config": ["rlscale.rl.presets", "rlscale.runner.validate",
                           "rlscale.train.update_fn"],
    "check_model_source": ["rlscale.runner.validate"],
    "model_remat": ["rlscale.runner.validate"],
    "check_train_config": ["rlscale.runner.validate"],
    "rollout_sampling": ["rlscale.runner.validate"],
    "mesh_from_config": ["rlscale.runner.validate"],
    "resolve_total_steps": ["rlscale.runner.validate"],
    "routing_replay": ["rlscale.runner.validate"],
    "check_rl_config": ["rlscale.runner.hosts"],
    "check_finite": ["rlscale.runner.preflight"],
    "check_config": ["rlscale.runner.validate"],
}


def _count_checks(monkeypatch) -> dict[str, int]:
  """Wraps every check in `_CHECKS` with a counter; returns {name: calls}."""
  import importlib  # pylint: disable=g-import-not-at-top
  counts = dict.fromkeys(_CHECKS, 0)
  for name, modules in _CHECKS.items():
    for module_name in modules:
      module = importlib.import_module(module_name)
      original = getattr(module, name)

      def counted(*args, _name=name, _original=original, **kwargs):
        counts[_name] += 1
        return _original(*args, **kwargs)
      monkeypatch.setattr(module, name, counted)
  return counts


def test_build_run_checks_the_config_once(tmp_path, monkeypatch):
  counts = _count_checks(monkeypatch)
  run = builders.build_run(tiny_config(sft__steps=0), str(tmp_path), log=lambda _: None)
  assert counts == {**dict.fromkeys(_CHECKS, 1), "check_finite": 0}
  assert run.rl_config.old_logp in ("sampler", "recompute")


def test_build_run_given_preflights_result_checks_nothing_again(tmp_path, monkeypatch):
  from rlscale.runner import preflight  # pylint: disable=g-import-not-at-top
  config = tiny_config(sft__steps=0)
  counts = _count_checks(monkeypatch)
  checked = preflight.check_config(config)
  assert counts == dict.fromkeys(_CHECKS, 1)
  run = builders.build_run(config, str(tmp_path), log=lambda _: None, checked=checked)
  assert counts == dict.fromkeys(_CHECKS, 1)
  assert run.total_steps == checked.total_steps


def test_train_and_evaluate_hands_preflights_result_to_build_run(tmp_path, monkeypatch):
  from rlscale.runner import loop  # pylint: disable=g-import-not-at-top
  counts = _count_checks(monkeypatch)
  handed = []

  class _Stop(Exception):
    pass

  def build_run(config, workdir, log=print, checked=None):
    handed.append(checked)
    raise _Stop
  monkeypatch.setattr(builders, "build_run", build_run)
  with pytest.raises(_Stop):
    loop.train_and_evaluate(tiny_config(sft__steps=0), str(tmp_path / "run"))
  assert len(handed) == 1 and isinstance(handed[0], validate.CheckedConfig)
  assert counts == dict.fromkeys(_CHECKS, 1)


def test_raw_update_factory_resolves_and_validates_once(monkeypatch):
  counts = _count_checks(monkeypatch)
  checked = validate.check_config(tiny_config())
  counts.update(dict.fromkeys(_CHECKS, 0))
  mesh = problem.one_device_mesh()
  update_fn_lib.make_update_fn(problem.MODEL, tiny_config().rl, checked.optimizer, mesh)  # raw rl
  assert (counts["resolve_rl_config"], counts["validate_rl_config"]) == (1, 1)
  counts.update(dict.fromkeys(_CHECKS, 0))
  update_fn_lib.make_update_fn_from_checked(problem.MODEL, checked.rl, checked.optimizer, mesh)
  assert not any(counts.values())


def test_references_longer_than_the_verifier_reads_are_warned():
  """A held-out reference longer than task.max_answer_chars can never be answered right (the
  answer scores 0 unparsed): the run says how many, and which setting raises the limit."""
  import types  # pylint: disable=import-outside-toplevel
  examples = [types.SimpleNamespace(answer="x" * n) for n in (10, 600, 513, 512)]
  config = ml_collections.ConfigDict({"task": {}})
  assert builders.unscorable_references_warning(config, examples) == (
      "warning: 2 of 4 held-out reference answers are longer than task.max_answer_chars=512 "
      "(the longest 600 characters): a correct answer that long scores 0 unparsed; set "
      "config.task.max_answer_chars above it in the config file")
  config.task.max_answer_chars = 600
  assert builders.unscorable_references_warning(config, examples) is None
