"""rlscale.aot's parts that need no TPU compiler: the compiler's messages parsed, the kernels
chosen for the target, the model shapes, the sampler's layout, the advice for a step that does
not fit."""

import pytest

from experiments.configs.default import get_config
from rlscale.aot import measure, models, steps
from rlscale.aot.topology import (GIB, libtpu_unavailable_reason, parse_available_hbm,
                                 topology_devices)

REFUSAL = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
           "temporaries (34.04G) exceeds available HBM (15.75G).")


def test_the_compilers_refusal_gives_what_is_needed_and_what_is_there():
  required, available, what = measure.refusal_figures(REFUSAL)
  assert required == int(34.04 * GIB)
  assert available == int(15.75 * GIB) == parse_available_hbm(REFUSAL)
  assert what == "HLO temporaries"
  assert measure.refusal_figures("Used 20.5G of 15.75G hbm. Exceeded by 4.75G")[:2] == (
      int(20.5 * GIB), int(15.75 * GIB))
  assert measure.refusal_figures("RESOURCE_EXHAUSTED: something else") == (None, None,
                                                                          "the program")
  assert parse_available_hbm("no figure here") is None


def test_a_refusal_for_memory_is_told_apart_from_a_lowering_error():
  assert measure.is_out_of_memory(RuntimeError(REFUSAL))
  assert not measure.is_out_of_memory(RuntimeError("UNIMPLEMENTED: eig is not supported"))


def test_auto_kernels_follow_the_target_not_this_cpu():
  config = get_config()
  tpu = models.aot_model_config(config, platform="tpu")
  assert (tpu.attention_impl, tpu.remat_impl, tpu.moe_dispatch) == (
      "splash", "checkpoint", "ragged")
  assert models.aot_model_config(config, platform="gpu").attention_impl == "standard"  # float32
  config.model.dtype = "bfloat16"
  assert models.aot_model_config(config, platform="gpu").attention_impl == "cudnn"
  cpu = models.aot_model_config(config, platform="cpu")
  assert (cpu.attention_impl, cpu.remat_impl, cpu.moe_dispatch) == ("cpu", "custom_vjp", "dense")
  config.model.attention_impl = "cpu"  # an explicit choice is kept
  assert models.aot_model_config(config, platform="tpu").attention_impl == "cpu"


def test_the_builtin_model_is_the_runs_and_a_named_shape_replaces_it():
  config = get_config()
  builtin = models.aot_model_config(config)
  assert (builtin.vocab_size, builtin.hidden_size, builtin.num_layers) == (100, 128, 2)
  assert (builtin.param_dtype, builtin.remat) == ("float32", False)  # remat off: built-in
  qwen = models.aot_model_config(config, shape="Qwen3-8B", layers=2)
  assert (qwen.hidden_size, qwen.num_heads, qwen.num_kv_heads, qwen.vocab_size) == (
      4096, 32, 8, 151_936)
  assert qwen.num_layers == 2 and qwen.remat  # a real checkpoint's shape: remat on by default
  assert models.named_shape("qwen3-8b").num_params() == pytest.approx(8.19e9, rel=0.01)
  with pytest.raises(ValueError, match="not a known shape.*qwen3-0.6b"):
    models.named_shape("qwen4")
  with pytest.raises(ValueError, match="--layers must be an int >= 1"):
    models.with_layers(qwen, 0)


def test_a_moe_shape_keeps_its_dense_layers_within_fewer_layers():
  moe = models.named_shape("qwen3-30b-a3b").replace(mlp_only_layers=(0, 5))
  assert models.with_layers(moe, 2).mlp_only_layers == (0,)


@pytest.mark.parametrize("prompts, group, parts, processes, threads, expected", [
    (32, 8, 8, 1, 1, (32, 8, True)),    # the main job on 8 devices: prefill once per prompt
    (1, 8, 4, 1, 1, (1, 8, False)),     # one prompt: every device prefills it
    (4, 8, 8, 2, 1, (32, 1, True)),     # two hosts whose prompts do not split: repeated G times
    (32, 8, 1, 1, 2, (16, 8, True)),    # two host threads: half the prompts per call
])
def test_the_sampler_layout_is_the_samplers(prompts, group, parts, processes, threads, expected):
  assert steps.sampler_layout(prompts, group, parts, processes, threads) == expected


def test_a_name_that_is_no_topology_is_refused_before_libtpu_loads():
  with pytest.raises(ValueError, match="<chip>:<shape>, e.g. v5e:2x4"):
    topology_devices("v5e")


def test_without_libtpu_the_reason_says_how_to_install_it(monkeypatch):
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top

  def missing(*args, **kwargs):
    raise RuntimeError("JAX TPU support not installed; cannot generate TPU topology. See "
                       "https://github.com/jax-ml/jax#installation")

  monkeypatch.setattr(topologies, "get_topology_desc", missing)
  reason = libtpu_unavailable_reason()
  assert reason.startswith("no TPU compiler: JAX TPU support not installed")
  assert 'pip install "rlscale[tpu]"' in reason


def test_the_local_topology_compiles_for_this_process_with_its_own_kernels_and_memory():
  import os
  from rlscale.aot.run import compile_run
  compiled = compile_run(get_config(), "local", eval_steps=False)
  assert compiled.topology.platform == "cpu"
  assert compiled.topology.hbm_bytes == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  assert compiled.run.model_config.attention_impl == "cpu"  # the CPU's kernels, not a TPU's
  update = compiled.results[0]
  assert [r.step for r in compiled.results] == ["update", "sample"] and compiled.fits
  assert update.argument_bytes >= compiled.run.state_bytes  # the state is the update's argument
  assert "topology: local, 1 device(s) of cpu (cpu)" in compiled.table()
