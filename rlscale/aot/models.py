"""The policy's architecture for an ahead-of-time compile: from the config, no weights read.

`aot_model_config(config, platform=...)` gives the `ModelConfig` the run would train
(`rlscale.runner.builders.build_model`'s: float32 master parameters, computation in
config.model.dtype, remat from `validate.model_remat`) from the built-in sizes in config.model,
or from an HF checkpoint's config.json alone (model.source "hf": only config.json is read), or
from a named release shape (`QWEN3_SHAPES`, e.g. "qwen3-8b", for sizing a model whose checkpoint
is not at hand). The model's "auto" kernel switches (attention, remat, MoE dispatch) choose by
the process's default backend, so a CPU process compiling for a TPU would get the CPU paths:
here they are resolved for the target `platform` instead, as the run on that platform would.
"""

from __future__ import annotations

from typing import Optional

from rlscale.model import moe
from rlscale.model.attention import resolve_attention_impl
from rlscale.model.config import MOE_FIELDS, ModelConfig, resolve_impl

# The Qwen3 releases' shapes (their config.json): head_dim 128, vocab 151,936, rope_theta 1e6,
# q/k norm, no biases.
QWEN3_COMMON = dict(vocab_size=151_936, head_dim=128, rope_theta=1_000_000.0, qk_norm=True,
                    model_type="qwen3")
QWEN3_SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16,
                       num_kv_heads=8, tie_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16,
                       num_kv_heads=8, tie_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32,
                     num_kv_heads=8, tie_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32,
                     num_kv_heads=8, tie_embeddings=False),
    "qwen3-14b": dict(hidden_size=5120, intermediate_size=17408, num_layers=40, num_heads=40,
                      num_kv_heads=8, tie_embeddings=False),
    "qwen3-32b": dict(hidden_size=5120, intermediate_size=25600, num_layers=64, num_heads=64,
                      num_kv_heads=8, tie_embeddings=False),
    "qwen3-30b-a3b": dict(hidden_size=2048, intermediate_size=6144, num_layers=48, num_heads=32,
                          num_kv_heads=4, tie_embeddings=False, num_experts=128,
                          num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                          model_type="qwen3_moe"),
}
# The built-in model's fields read from config.model (`runner.builders.MODEL_FIELDS` less the
# dtypes, which are set below as build_model sets them).
BUILTIN_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                  "head_dim")
# The built-in model's vocabulary: the character tokenizer's (`tokenizers.CharTokenizer`).
BUILTIN_VOCAB_TOKENIZER = "char"


def named_shape(name: str) -> ModelConfig:
  """The ModelConfig of the release shape `name` (a key of QWEN3_SHAPES, case-insensitive).

  Raises: ValueError for an unknown name (listing the known ones)."""
  key = name.lower()
  if key not in QWEN3_SHAPES:
    raise ValueError(f"--model={name!r} is not a known shape; known: {sorted(QWEN3_SHAPES)} "
                     "(or leave it unset for the config's model)")
  return ModelConfig(**{**QWEN3_COMMON, **QWEN3_SHAPES[key]})


def _config_architecture(config) -> tuple[ModelConfig, bool]:
  """(the architecture config.model names, whether it is a real checkpoint's shape)."""
  if config.model.source == "hf":
    from rlscale.model.hf_checkpoint import load_hf_config  # pylint: disable=g-import-not-at-top
    model_config = load_hf_config(config.model.checkpoint_path)
    if config.model.get("moe_dispatch") is not None:
      model_config = model_config.replace(moe_dispatch=config.model.moe_dispatch)
    return model_config, True
  from rlscale import tokenizers  # pylint: disable=g-import-not-at-top
  fields = {name: config.model[name] for name in BUILTIN_FIELDS}
  fields.update({name: config.model[name] for name in MOE_FIELDS if name in config.model})
  if fields.get("num_experts"):
    fields["model_type"] = "qwen3_moe"
  vocab = tokenizers.load_tokenizer(BUILTIN_VOCAB_TOKENIZER).vocab_size
  return ModelConfig(vocab_size=vocab, **fields), False


def for_platform(model_config: ModelConfig, platform: str) -> ModelConfig:
  """model_config with its "auto" kernel switches resolved for `platform` ("tpu", "gpu",
  "cpu"), as `ModelConfig.attention_impl` / `remat_impl` and `moe.resolve_dispatch` resolve
  them on that backend (a CPU process compiling for a TPU would otherwise get the CPU paths).
  Attention takes the training / prefill kernel (splash on TPU, cuDNN on GPU in 16 bits), which
  decode steps replace with the standard one (`attention.resolve_attention_impl`). Explicit
  choices are kept."""
  return model_config.replace(
      attention_impl=resolve_attention_impl(model_config.attention_impl, decode=False,
                                            dtype=model_config.dtype, platform=platform),
      remat_impl=resolve_impl(model_config.remat_impl, "custom_vjp", "checkpoint", platform),
      moe_dispatch=moe.resolve_dispatch(model_config.moe_dispatch, platform))


def with_layers(model_config: ModelConfig, layers: Optional[int]) -> ModelConfig:
  """model_config with `layers` decoder layers (None: unchanged); mlp_only_layers beyond them
  are dropped. A table row must say it was compiled with fewer layers than the model has.

  Raises: ValueError for layers < 1."""
  if layers is None:
    return model_config
  if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
    raise ValueError(f"--layers must be an int >= 1, got {layers!r}")
  return model_config.replace(num_layers=layers, mlp_only_layers=tuple(
      i for i in model_config.mlp_only_layers if i < layers))


def aot_model_config(config, *, platform: str = "tpu", shape: Optional[str] = None,
                     layers: Optional[int] = None) -> ModelConfig:
  """The policy's ModelConfig as the run on `platform` would build it, without weights.

  Args:
    config: a run config (experiments/configs/*.py): config.model gives the source (the
      built-in sizes, or model.checkpoint_path's config.json for source "hf"), dtype, remat and
      the kernel switches.
    platform: the target backend whose "auto" kernels to pick (`for_platform`).
    shape: a QWEN3_SHAPES name replacing the architecture (dtype, remat and switches still from
      config.model), or None.
    layers: compile with this many decoder layers (`with_layers`), or None for all.
  Returns: ModelConfig with param_dtype float32 (the master weights every run trains),
    dtype config.model.dtype, remat config.model.remat or, when None, on for an HF checkpoint
    or a named shape and off for the built-in model (`validate.model_remat`'s rule).
  Raises: ValueError for an unknown shape, bad model fields or layers; FileNotFoundError /
    ValueError from `hf_checkpoint.load_hf_config` for a missing or bad config.json.
  """
  if shape is not None:
    model_config, real = named_shape(shape), True
  else:
    model_config, real = _config_architecture(config)
  remat = config.model.get("remat")
  if remat is None:
    remat = real
  if not isinstance(remat, bool):
    raise ValueError(f"model.remat must be None, True or False, got {remat!r}")
  model_config = model_config.replace(
      param_dtype="float32", dtype=config.model.dtype, remat=remat,
      attention_impl=config.model.get("attention_impl", "auto"),
      remat_impl=config.model.get("remat_impl", "auto"))
  return with_layers(for_platform(model_config, platform), layers)
