"""HF config parsing, safetensors save/load and clear errors for bad checkpoints (no torch needed;
parity with transformers itself is in test_hf_parity.py)."""

import json
import os
import re
import stat

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from rlscale.model import hf_checkpoint as hc
from rlscale.model.config import ModelConfig, RopeScaling

QWEN3_V5 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 40, "hidden_size": 16,
    "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "hidden_act": "silu", "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "rope_theta": None,
    "tie_word_embeddings": True, "attention_bias": False, "dtype": "bfloat16",
    "use_sliding_window": False, "sliding_window": None,
}
QWEN3_CONFIG = ModelConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=1e6, rms_norm_eps=1e-6,
                           tie_embeddings=True, qkv_bias=False, o_proj_bias=False, qk_norm=True,
                           param_dtype="bfloat16", dtype="bfloat16", model_type="qwen3")
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def test_qwen3_config_both_layouts(v4_layout):
  assert hc.config_from_hf_dict(QWEN3_V5) == QWEN3_CONFIG
  assert hc.config_from_hf_dict(v4_layout(QWEN3_V5)) == QWEN3_CONFIG


def test_qwen2_and_llama_switches_defaults_and_llama3_rope(v4_layout):
  qwen2 = dict(QWEN3_V5, model_type="qwen2", tie_word_embeddings=False)
  del qwen2["attention_bias"]
  config = hc.config_from_hf_dict(qwen2)
  assert (config.qkv_bias, config.o_proj_bias, config.qk_norm, config.tie_embeddings) == (
      True, False, False, False)
  # Llama: no head_dim / num_key_value_heads / tie_word_embeddings / rope -> HF defaults.
  llama = {k: QWEN3_V5[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                    "num_hidden_layers", "num_attention_heads")}
  config = hc.config_from_hf_dict(dict(llama, model_type="llama", attention_bias=True))
  assert (config.head_dim, config.num_kv_heads, config.tie_embeddings) == (16 // 4, 4, False)
  assert (config.qkv_bias, config.o_proj_bias, config.qk_norm) == (True, True, False)
  assert (config.rope_theta, config.rope_scaling, config.param_dtype) == (10000.0, None, "float32")
  expected = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                         original_max_position=8192)
  v5 = dict(llama, model_type="llama", rope_parameters=dict(LLAMA3_ROPE, rope_theta=5e5), dtype="float32")
  for raw in (v5, v4_layout(v5)):
    config = hc.config_from_hf_dict(raw)
    assert (config.rope_theta, config.rope_scaling) == (5e5, expected)
  # Old transformers-4 files spell rope_type as "type".
  old = dict(v4_layout(v5), rope_scaling={("type" if k == "rope_type" else k): v for k, v in LLAMA3_ROPE.items()})
  assert hc.config_from_hf_dict(old).rope_scaling == expected


@pytest.mark.parametrize("change, message", [
    (dict(model_type="gemma"), r"model_type 'gemma' is not supported; supported model types: llama, qwen2, qwen3"),
    (dict(rope_parameters={"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0}),
     r"rope type 'yarn' is not supported; supported rope types: default, llama3"),
    (dict(rope_parameters={"rope_theta": 1e4, "rope_type": "llama3", "factor": 4.0}),
     r"lack 'low_freq_factor'"),
    (dict(hidden_act="gelu"), r"hidden_act 'gelu'.*only 'silu'"),
    (dict(use_sliding_window=True), r"use_sliding_window"),
    (dict(mlp_bias=True), r"mlp_bias"),
    (dict(hidden_size=None), r"required field 'hidden_size'"),
])
def test_unsupported_configs_name_the_field(change, message):
  with pytest.raises(ValueError, match=message):
    hc.config_from_hf_dict(dict(QWEN3_V5, **change))


def _save(directory, config, params):
  hc.save_hf_checkpoint(directory, config, params)
  return directory


def _assert_trees_equal(a, b):
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  jax.tree_util.tree_map(lambda x, y: np.testing.assert_array_equal(np.asarray(x, np.float32),
                                                                    np.asarray(y, np.float32)), a, b)


@pytest.mark.parametrize("overrides", [
    dict(), dict(tie_embeddings=False, qkv_bias=True, o_proj_bias=True),
    dict(model_type="qwen2", qk_norm=False, qkv_bias=True, tie_embeddings=False),
    dict(model_type="llama", qk_norm=False, rope_scaling=RopeScaling(8.0, 1.0, 4.0, 64)),
])
def test_save_load_round_trip_is_exact(tmp_path, random_params, overrides):
  config = QWEN3_CONFIG.replace(param_dtype="float32", dtype="float32", **overrides)
  params = random_params(config)
  loaded_config, loaded = hc.load_hf_checkpoint(_save(tmp_path, config, params))
  assert loaded_config == config
  _assert_trees_equal(loaded, params)
  written = json.loads((tmp_path / "config.json").read_text())
  assert written["architectures"] == [hc.ARCHITECTURES[config.model_type]]


def test_bf16_storage_and_dtype_override(tmp_path, random_params):
  config = QWEN3_CONFIG  # bfloat16 params
  params = random_params(config)
  directory = _save(tmp_path, config, params)
  with safetensors.safe_open(directory / "model.safetensors", framework="numpy") as f:
    assert f.get_slice("model.norm.weight").get_dtype() == "BF16"
  loaded_config, loaded = hc.load_hf_checkpoint(directory)
  assert loaded_config.param_dtype == "bfloat16"
  assert loaded["norm"]["weight"].dtype == ml_dtypes.bfloat16
  _assert_trees_equal(loaded, params)
  f32_config, f32 = hc.load_hf_checkpoint(directory, dtype="float32", value_head=True)
  assert (f32_config.param_dtype, f32_config.dtype, f32_config.value_head) == ("float32", "float32", True)
  assert f32["norm"]["weight"].dtype == np.float32
  np.testing.assert_array_equal(f32["value_head"]["kernel"], np.zeros((16, 1), np.float32))
  _assert_trees_equal({k: v for k, v in f32.items() if k != "value_head"}, params)
  with pytest.raises(ValueError, match=r"dtype must be one of .*'float64'"):
    hc.load_hf_checkpoint(directory, dtype="float64")


def test_sharded_checkpoint_loads(tmp_path, random_params):
  config = QWEN3_CONFIG.replace(param_dtype="float32")
  params = random_params(config)
  single = _save(tmp_path / "single", config, params)
  tensors = safetensors.numpy.load_file(single / "model.safetensors")
  sharded = tmp_path / "sharded"
  sharded.mkdir()
  (sharded / "config.json").write_text((single / "config.json").read_text())
  names = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": names[:7], "model-00002-of-00002.safetensors": names[7:]}
  for shard, shard_names in shards.items():
    safetensors.numpy.save_file({n: tensors[n] for n in shard_names}, sharded / shard)
  weight_map = {n: shard for shard, shard_names in shards.items() for n in shard_names}
  (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
  _, loaded = hc.load_hf_checkpoint(sharded)
  _assert_trees_equal(loaded, params)
  # The index names a shard that does not hold the tensor (a stale index after re-sharding).
  first = sharded / "model-00001-of-00002.safetensors"
  safetensors.numpy.save_file({n: tensors[n] for n in names[1:7]}, first)
  with pytest.raises(ValueError, match=rf"tensor '{re.escape(names[0])}' is not in .*"
                                       r"model-00001-of-00002\.safetensors, the shard "
                                       r"model\.safetensors\.index\.json names for it"):
    hc.load_hf_checkpoint(sharded)
  (sharded / "model-00002-of-00002.safetensors").unlink()
  with pytest.raises(FileNotFoundError, match=r"shard .*model-00002-of-00002.safetensors listed in"):
    hc.load_hf_checkpoint(sharded)
  (sharded / "model.safetensors.index.json").write_text('{"weight_map": ')  # truncated
  with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json:\d+:\d+: not valid JSON"):
    hc.load_hf_checkpoint(sharded)


def test_missing_directory_config_or_weights(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"checkpoint directory .*nowhere not found"):
    hc.load_hf_checkpoint(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError, match=r"config\.json not found"):
    hc.load_hf_checkpoint(tmp_path)
  (tmp_path / "config.json").write_text("{'model_type': 'qwen3'}")  # Python, not JSON
  with pytest.raises(ValueError, match=r"config\.json:\d+:\d+: not valid JSON"):
    hc.load_hf_checkpoint(tmp_path)
  (tmp_path / "config.json").write_text(json.dumps(QWEN3_V5))
  with pytest.raises(FileNotFoundError, match=r"looked for model\.safetensors and model\.safetensors\.index\.json"):
    hc.load_hf_checkpoint(tmp_path)


def _rewrite(directory, edit):
  path = directory / "model.safetensors"
  tensors = safetensors.numpy.load_file(path)
  edit(tensors)
  safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})


def test_missing_wrong_shape_and_unexpected_tensors(tmp_path, random_params):
  config = QWEN3_CONFIG.replace(param_dtype="float32")
  directory = _save(tmp_path, config, random_params(config))
  _rewrite(directory, lambda t: t.pop("model.layers.1.self_attn.k_norm.weight"))
  with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.1\.self_attn\.k_norm\.weight'"):
    hc.load_hf_checkpoint(directory)
  _rewrite(directory, lambda t: t.update({"model.layers.1.self_attn.k_norm.weight": np.ones(8, np.float32),
                                          "model.layers.0.mlp.up_proj.weight": np.ones((24, 15), np.float32)}))
  with pytest.raises(ValueError, match=r"'model\.layers\.0\.mlp\.up_proj\.weight' .* shape \(24, 15\), expected \(24, 16\)"):
    hc.load_hf_checkpoint(directory)
  _rewrite(directory, lambda t: t.update({"model.layers.0.mlp.up_proj.weight": np.ones((24, 16), np.float32)}))
  hc.load_hf_checkpoint(directory)  # repaired
  # A llama config.json over qwen3 weights: the q/k norms would be silently dropped.
  (directory / "config.json").write_text(json.dumps(dict(QWEN3_V5, model_type="llama")))
  with pytest.raises(ValueError, match=r"tensors this llama config does not use, e\.g\. .*q_norm"):
    hc.load_hf_checkpoint(directory)


def test_save_rejects_configs_no_hf_family_has(tmp_path, random_params):
  config = QWEN3_CONFIG.replace(model_type="qwen2", qk_norm=False)  # qwen2 always has q/k/v bias
  with pytest.raises(ValueError, match=r"model_type 'qwen2' requires .*'qkv_bias': True"):
    hc.save_hf_checkpoint(tmp_path, config, random_params(config))
  params = random_params(QWEN3_CONFIG)
  del params["layers_1"]["mlp"]
  with pytest.raises(ValueError, match=r"params lack layers_1/mlp/gate_proj/kernel"):
    hc.save_hf_checkpoint(tmp_path, QWEN3_CONFIG, params)


def test_saved_weights_get_the_umask_mode(tmp_path, random_params):
  """model.safetensors was 0600 (safetensors' temporary file); now the mode open() gives under the
  umask, as config.json has."""
  old = os.umask(0o022)
  try:
    hc.save_hf_checkpoint(tmp_path, QWEN3_CONFIG, random_params(QWEN3_CONFIG))
  finally:
    os.umask(old)
  assert stat.S_IMODE(os.stat(tmp_path / "model.safetensors").st_mode) == 0o644
  assert stat.S_IMODE(os.stat(tmp_path / "config.json").st_mode) == 0o644
