"""Hugging Face checkpoints (config.json + safetensors) <-> ModelConfig and Flax params.

Reads the Qwen3, Qwen2, Llama and Qwen3-MoE causal-LM checkpoints written by transformers 4 (top-level
`rope_theta`, `rope_scaling`, `torch_dtype`) and transformers 5 (`rope_parameters: {rope_theta,
rope_type, ...}`, `dtype`), from one `model.safetensors` or shards listed in
`model.safetensors.index.json`. Tensor names map one to one onto the Flax parameter tree of
`rlscale.model.transformer.Transformer` (`model.layers.0.self_attn.q_proj.weight` <->
`layers_0/self_attn/q_proj/kernel`); torch Linear weights are [out, in] and Flax Dense kernels are
[in, out], so 2-D projection weights are transposed. Qwen3-MoE stores each expert separately
(`model.layers.1.mlp.experts.3.gate_proj.weight` [I, hidden]); they are stacked into the expert
kernels `layers_1/mlp/experts/gate_proj` [E, hidden, I] (expert 3 at index 3), and the router
`mlp.gate.weight` [E, hidden] is `mlp/gate/kernel` [hidden, E]. Writing produces a checkpoint that
`transformers.AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
from typing import Any, Optional, Union

import jax
import numpy as np
import safetensors
import safetensors.numpy

from rlscale import inputs
from rlscale.model import transformer
from rlscale.model.config import DTYPES, ModelConfig, RopeScaling

PathLike = Union[str, os.PathLike]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe")
SUPPORTED_ROPE_TYPES = ("default", "llama3")
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "qwen3_moe": "Qwen3MoeForCausalLM"}
# transformers' Qwen3MoeConfig defaults, for fields a qwen3_moe config.json omits (transformers 5
# writes num_experts as num_local_experts).
QWEN3_MOE_DEFAULTS = dict(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                          norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
                          router_aux_loss_coef=0.001)
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# HF defaults when config.json omits a field (the same in the three families).
DEFAULT_ROPE_THETA = 10_000.0
DEFAULT_RMS_NORM_EPS = 1e-6


def family_switches(model_type: str, attention_bias: bool) -> dict:
  """The ModelConfig switches a HF family implies.

  Qwen2 always has q/k/v bias and no output bias; Qwen3, Qwen3-MoE and Llama put
  `attention_bias` on all of q/k/v/o; only Qwen3 and Qwen3-MoE have q/k RMSNorm.

  Raises:
    ValueError: model_type not in SUPPORTED_MODEL_TYPES.
  """
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"model_type {model_type!r} is not supported; supported model types: "
                     f"{', '.join(SUPPORTED_MODEL_TYPES)}")
  if model_type == "qwen2":
    return dict(qkv_bias=True, o_proj_bias=False, qk_norm=False)
  return dict(qkv_bias=attention_bias, o_proj_bias=attention_bias,
              qk_norm=model_type in ("qwen3", "qwen3_moe"))


def _moe_from_hf(raw: dict) -> dict:
  """The ModelConfig MoE fields of a qwen3_moe config.json (QWEN3_MOE_DEFAULTS for omitted ones;
  num_experts also read as num_local_experts)."""
  fields = {}
  for name, default in QWEN3_MOE_DEFAULTS.items():
    value = raw.get(name)
    if value is None and name == "num_experts":
      value = raw.get("num_local_experts")
    fields[name] = default if value is None else value
  fields["mlp_only_layers"] = tuple(fields["mlp_only_layers"])
  fields["router_aux_loss_coef"] = float(fields["router_aux_loss_coef"])
  return fields


def _read_json(path: pathlib.Path, what: str) -> dict:
  if not path.is_file():
    raise FileNotFoundError(f"{what}: {path} not found (expected a Hugging Face checkpoint directory "
                            f"with {CONFIG_FILE} and {WEIGHTS_FILE} or {INDEX_FILE})")
  try:
    return inputs.read_json(path)
  except ValueError as e:
    raise ValueError(f"{what}: {e}") from None


def _checkpoint_dir(path: PathLike) -> pathlib.Path:
  directory = pathlib.Path(path)
  if not directory.is_dir():
    raise FileNotFoundError(f"checkpoint directory {directory} not found (expected a directory "
                            f"with {CONFIG_FILE} and {WEIGHTS_FILE} or {INDEX_FILE})")
  return directory


def _rope_from_hf(raw: dict) -> tuple[float, Optional[RopeScaling]]:
  """(rope_theta, rope_scaling) from either config layout.

  transformers 5: `rope_parameters` holds rope_theta, rope_type and the scaling fields;
  transformers 4: top-level `rope_theta` and a `rope_scaling` dict (or null) with `rope_type`
  (older files: `type`)."""
  params = dict(raw.get("rope_scaling") or {})
  params.update(raw.get("rope_parameters") or {})
  theta = params.get("rope_theta", raw.get("rope_theta"))
  theta = DEFAULT_ROPE_THETA if theta is None else float(theta)
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type not in SUPPORTED_ROPE_TYPES:
    raise ValueError(f"config.json rope type {rope_type!r} is not supported; supported rope types: "
                     f"{', '.join(SUPPORTED_ROPE_TYPES)}")
  partial = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
  if partial != 1.0:
    raise ValueError(f"config.json partial_rotary_factor {partial!r} is not supported (only 1.0)")
  if rope_type == "default":
    return theta, None
  try:
    scaling = RopeScaling(factor=float(params["factor"]),
                          low_freq_factor=float(params["low_freq_factor"]),
                          high_freq_factor=float(params["high_freq_factor"]),
                          original_max_position=int(params["original_max_position_embeddings"]))
  except KeyError as e:
    raise ValueError(f"config.json llama3 rope parameters lack {e.args[0]!r}") from None
  return theta, scaling


def config_from_hf_dict(raw: dict) -> ModelConfig:
  """ModelConfig from the parsed config.json of a Qwen3, Qwen2, Llama or Qwen3-MoE causal LM
  (the MoE fields of qwen3_moe by their HF names, `_moe_from_hf`).

  `head_dim` defaults to hidden_size / num_attention_heads, `num_key_value_heads` to
  num_attention_heads, `tie_word_embeddings` to False (the default of all three families). The
  stored dtype (`dtype`, or `torch_dtype` in transformers 4) becomes param_dtype and dtype when
  it is float32/bfloat16/float16, float32 otherwise.

  Raises:
    ValueError: unknown model_type, unsupported rope type, hidden_act other than silu, mlp_bias,
      sliding-window attention, or a missing required field; the message names it and what is
      supported.
  """
  model_type = raw.get("model_type")
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"config.json model_type {model_type!r} is not supported; supported model "
                     f"types: {', '.join(SUPPORTED_MODEL_TYPES)}")
  if raw.get("hidden_act", "silu") != "silu":
    raise ValueError(f"config.json hidden_act {raw['hidden_act']!r} is not supported (only 'silu')")
  if raw.get("mlp_bias"):
    raise ValueError("config.json mlp_bias=true is not supported (only bias-free SwiGLU)")
  if raw.get("use_sliding_window"):
    raise ValueError("config.json use_sliding_window=true is not supported (only full attention)")
  required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads")
  for key in required:
    if raw.get(key) is None:
      raise ValueError(f"config.json lacks the required field {key!r}")
  theta, scaling = _rope_from_hf(raw)
  dtype = raw.get("dtype") or raw.get("torch_dtype")
  dtype = dtype if dtype in DTYPES else "float32"
  heads = raw["num_attention_heads"]
  return ModelConfig(
      vocab_size=raw["vocab_size"],
      hidden_size=raw["hidden_size"],
      intermediate_size=raw["intermediate_size"],
      num_layers=raw["num_hidden_layers"],
      num_heads=heads,
      num_kv_heads=raw.get("num_key_value_heads") or heads,
      head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
      rope_theta=theta,
      rope_scaling=scaling,
      rms_norm_eps=float(raw.get("rms_norm_eps") or DEFAULT_RMS_NORM_EPS),
      tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
      param_dtype=dtype,
      dtype=dtype,
      model_type=model_type,
      **family_switches(model_type, bool(raw.get("attention_bias", False))),
      **(_moe_from_hf(raw) if model_type == "qwen3_moe" else {}),
  )


def load_hf_config(path: PathLike) -> ModelConfig:
  """ModelConfig from `<path>/config.json` (see `config_from_hf_dict` for the rules).

  Raises:
    FileNotFoundError: the directory or its config.json does not exist (names the path).
    ValueError: config.json is not valid JSON (names the path), or as `config_from_hf_dict`.
  """
  return config_from_hf_dict(_read_json(_checkpoint_dir(path) / CONFIG_FILE, "config"))


def config_to_hf_dict(config: ModelConfig) -> dict:
  """config.json contents (transformers-4 keys, read by transformers 4 and 5) for `config`.

  Raises:
    ValueError: config.model_type is unsupported, or its bias/norm switches are not those of its
      family (e.g. qwen2 without q/k/v bias), or it has experts but is not qwen3_moe, so no HF
      class could load it.
  """
  if config.num_experts and config.model_type != "qwen3_moe":
    raise ValueError(f"model.num_experts={config.num_experts} needs model.model_type 'qwen3_moe' "
                     f"to be saved as a HF checkpoint, got {config.model_type!r}")
  switches = family_switches(config.model_type, config.qkv_bias)
  actual = {name: getattr(config, name) for name in switches}
  if actual != switches:
    raise ValueError(f"model.model_type {config.model_type!r} requires {switches}, but the config has "
                     f"{actual}; pick the model_type whose layout matches")
  rope_scaling = None
  if config.rope_scaling is not None:
    s = config.rope_scaling
    rope_scaling = dict(rope_type="llama3", factor=s.factor, low_freq_factor=s.low_freq_factor,
                        high_freq_factor=s.high_freq_factor,
                        original_max_position_embeddings=s.original_max_position)
  raw = dict(
      architectures=[ARCHITECTURES[config.model_type]],
      model_type=config.model_type,
      vocab_size=config.vocab_size,
      hidden_size=config.hidden_size,
      intermediate_size=config.intermediate_size,
      num_hidden_layers=config.num_layers,
      num_attention_heads=config.num_heads,
      num_key_value_heads=config.num_kv_heads,
      head_dim=config.head_dim,
      hidden_act="silu",
      rms_norm_eps=config.rms_norm_eps,
      rope_theta=config.rope_theta,
      rope_scaling=rope_scaling,
      tie_word_embeddings=config.tie_embeddings,
      torch_dtype=config.param_dtype,
  )
  if config.model_type != "qwen2":
    raw["attention_bias"] = config.qkv_bias
  if config.model_type == "qwen3_moe":
    raw.update(num_experts=config.num_experts, num_experts_per_tok=config.num_experts_per_tok,
               moe_intermediate_size=config.moe_intermediate_size,
               norm_topk_prob=config.norm_topk_prob, decoder_sparse_step=config.decoder_sparse_step,
               mlp_only_layers=list(config.mlp_only_layers),
               router_aux_loss_coef=config.router_aux_loss_coef)
  return raw


TensorEntry = tuple[tuple[str, ...], bool, Optional[int]]


def tensor_map(config: ModelConfig) -> dict[str, TensorEntry]:
  """HF tensor name -> (Flax param path, transpose?, expert index or None) for every tensor of a
  HF checkpoint; an expert index e means the tensor is slice [e] of the stacked [E, ...] param.

  The value head (not part of HF causal LMs) is not listed."""
  names: dict[str, TensorEntry] = {
      "model.embed_tokens.weight": (("embed_tokens", "embedding"), False, None),
      "model.norm.weight": (("norm", "weight"), False, None),
  }
  if not config.tie_embeddings:
    names["lm_head.weight"] = (("lm_head", "kernel"), True, None)
  projections = [("self_attn", p, config.qkv_bias) for p in ("q_proj", "k_proj", "v_proj")]
  projections += [("self_attn", "o_proj", config.o_proj_bias)]
  mlp = [("mlp", p, False) for p in ("gate_proj", "up_proj", "down_proj")]
  norms = ["input_layernorm", "post_attention_layernorm"]
  norms += ["self_attn.q_norm", "self_attn.k_norm"] if config.qk_norm else []
  for i in range(config.num_layers):
    layer, prefix = f"layers_{i}", f"model.layers.{i}"
    for block, proj, bias in projections + ([] if config.is_moe_layer(i) else mlp):
      names[f"{prefix}.{block}.{proj}.weight"] = ((layer, block, proj, "kernel"), True, None)
      if bias:
        names[f"{prefix}.{block}.{proj}.bias"] = ((layer, block, proj, "bias"), False, None)
    if config.is_moe_layer(i):
      names[f"{prefix}.mlp.gate.weight"] = ((layer, "mlp", "gate", "kernel"), True, None)
      for e in range(config.num_experts):
        for proj in ("gate_proj", "up_proj", "down_proj"):
          names[f"{prefix}.mlp.experts.{e}.{proj}.weight"] = ((layer, "mlp", "experts", proj),
                                                               True, e)
    for norm in norms:
      names[f"{prefix}.{norm}.weight"] = ((layer, *norm.split("."), "weight"), False, None)
  return names


def _param_shapes(config: ModelConfig) -> dict:
  """Abstract parameter tree of `config` (shapes and dtypes, no computation)."""
  return jax.eval_shape(lambda key: transformer.init_params(config, key), jax.random.PRNGKey(0))


def _get(tree: Any, path: tuple[str, ...]) -> Any:
  for key in path:
    tree = tree[key]
  return tree


def _set(tree: dict, path: tuple[str, ...], value: Any) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def _weight_files(directory: pathlib.Path) -> dict[str, pathlib.Path]:
  """HF tensor name -> safetensors file holding it, from the index or the single file."""
  index_path = directory / INDEX_FILE
  if index_path.is_file():
    weight_map = _read_json(index_path, "safetensors index").get("weight_map")
    if not isinstance(weight_map, dict):
      raise ValueError(f"{index_path} has no 'weight_map' object")
    files = {name: directory / shard for name, shard in weight_map.items()}
    for shard in sorted(set(files.values())):
      if not shard.is_file():
        raise FileNotFoundError(f"shard {shard} listed in {index_path} not found")
    return files
  single = directory / WEIGHTS_FILE
  if not single.is_file():
    raise FileNotFoundError(f"no weights in {directory}: looked for {WEIGHTS_FILE} and {INDEX_FILE}")
  with safetensors.safe_open(single, framework="numpy") as f:
    return {name: single for name in f.keys()}


def _is_ignorable(name: str, config: ModelConfig) -> bool:
  """Tensors a checkpoint may carry that the model does not use: rotary caches of old Llama
  exports, and an lm_head duplicated next to tied embeddings."""
  return name.endswith("rotary_emb.inv_freq") or (config.tie_embeddings and name == "lm_head.weight")


def load_hf_checkpoint(path: PathLike, *, dtype: Optional[str] = None,
                       value_head: bool = False) -> tuple[ModelConfig, dict]:
  """(config, params) from a Hugging Face checkpoint directory.

  Args:
    path: directory with config.json and model.safetensors or model.safetensors.index.json + shards.
    dtype: storage dtype of the returned params and compute dtype of the returned config,
      "float32" or "bfloat16" (or "float16"); None keeps the dtype recorded in config.json.
    value_head: add a zero-initialised scalar value head (PPO critic) to config and params.

  Returns:
    config: ModelConfig. params: nested dict of host numpy arrays (ml_dtypes.bfloat16 for bf16)
    in the layout of `transformer.init_params`; device_put or replicate them before use.

  Raises:
    FileNotFoundError: the directory, config.json, the weights file or a listed shard is missing.
    ValueError: config.json or the index is not valid JSON (named); config.json is unsupported
      (see `config_from_hf_dict`); a tensor the config needs is missing (named), also from the
      shard the index names for it; a tensor has the wrong shape (named, with both shapes); the
      checkpoint holds tensors this model would not use (named: a config mismatch such as missing
      q/k norms); `dtype` is not one of the supported names.
  """
  directory = _checkpoint_dir(path)
  config = load_hf_config(directory)
  if dtype is not None:
    if dtype not in DTYPES:
      raise ValueError(f"dtype must be one of {sorted(DTYPES)} or None, got {dtype!r}")
    config = config.replace(param_dtype=dtype, dtype=dtype)
  config = config.replace(value_head=value_head)
  files = _weight_files(directory)
  names = tensor_map(config)
  for name in names:
    if name not in files:
      raise ValueError(f"checkpoint {directory} is missing tensor {name!r} (model_type "
                       f"{config.model_type}, {config.num_layers} layers)")
  unexpected = sorted(n for n in files if n not in names and not _is_ignorable(n, config))
  if unexpected:
    raise ValueError(f"checkpoint {directory} has {len(unexpected)} tensors this {config.model_type} "
                     f"config does not use, e.g. {unexpected[:5]}; config.json and weights disagree")
  shapes = _param_shapes(config)
  storage = np.dtype(config.jnp_param_dtype)
  params: dict = {}
  by_file: dict[pathlib.Path, list[str]] = {}
  for name in names:
    by_file.setdefault(files[name], []).append(name)
  for file, file_names in by_file.items():
    with safetensors.safe_open(file, framework="numpy") as f:
      absent = sorted(set(file_names) - set(f.keys()))
      if absent:  # only an index can point at the wrong file
        raise ValueError(f"tensor {absent[0]!r} is not in {file}, the shard {INDEX_FILE} names for it")
      for name in file_names:
        param_path, transpose, expert = names[name]
        expected = tuple(_get(shapes, param_path).shape)
        one = expected if expert is None else expected[1:]
        expected_hf = one[::-1] if transpose else one
        found = tuple(f.get_slice(name).get_shape())
        if found != expected_hf:
          raise ValueError(f"tensor {name!r} in {file} has shape {found}, expected {expected_hf} "
                           f"from config.json")
        array = f.get_tensor(name)
        array = (array.T if transpose else array).astype(storage)
        if expert is None:
          _set(params, param_path, np.ascontiguousarray(array))
          continue
        # Expert e's [out, in] weight is slice [e] of the stacked [E, in, out] kernel.
        try:
          stacked = _get(params, param_path)
        except KeyError:
          stacked = np.zeros(expected, storage)
          _set(params, param_path, stacked)
        stacked[expert] = array
  if value_head:
    head = shapes["value_head"]
    params["value_head"] = {k: np.zeros(v.shape, v.dtype) for k, v in head.items()}
  return config, params


def save_hf_checkpoint(path: PathLike, config: ModelConfig, params: dict) -> None:
  """Writes `<path>/config.json` and `<path>/model.safetensors` loadable by transformers.

  Tensors are stored in config.param_dtype; the value head, which HF causal LMs lack, is not
  written. Tokenizer files are not written (`Tokenizer.save` does that). Both files get the usual
  umask-derived mode. The directory is created if needed.

  Raises:
    ValueError: the config cannot be expressed as a HF family (see `config_to_hf_dict`), or a
      param is missing or has the wrong shape (named, with both shapes).
  """
  raw = config_to_hf_dict(config)
  shapes = _param_shapes(config)
  storage = np.dtype(config.jnp_param_dtype)
  tensors = {}
  gathered: dict = {}
  for name, (param_path, transpose, expert) in tensor_map(config).items():
    if param_path not in gathered:
      try:
        value = np.asarray(jax.device_get(_get(params, param_path)))
      except (KeyError, TypeError):
        raise ValueError(f"params lack {'/'.join(param_path)} (for tensor {name!r})") from None
      expected = tuple(_get(shapes, param_path).shape)
      if value.shape != expected:
        raise ValueError(f"param {'/'.join(param_path)} has shape {value.shape}, expected {expected}")
      gathered[param_path] = value
    value = gathered[param_path] if expert is None else gathered[param_path][expert]
    value = value.T if transpose else value
    tensors[name] = np.ascontiguousarray(value.astype(storage))
  directory = pathlib.Path(path)
  directory.mkdir(parents=True, exist_ok=True)
  safetensors.numpy.save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
  with open(directory / CONFIG_FILE, "w") as f:
    json.dump(raw, f, indent=2)
  # safetensors writes through a private temporary file (mode 0600); give the weights the mode
  # open() gave config.json under the user's umask, so others can read them as usual.
  os.chmod(directory / WEIGHTS_FILE, stat.S_IMODE(os.stat(directory / CONFIG_FILE).st_mode))
