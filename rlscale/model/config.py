"""One configuration dataclass for the Qwen3, Qwen2 and Llama decoder families.

The three families differ only in switches this dataclass carries: Qwen2 adds biases to the q/k/v
projections (`qkv_bias`), Qwen3 adds a per-head RMSNorm on queries and keys (`qk_norm`), and small
models of every family tie the output projection to the input embedding (`tie_embeddings`). Qwen3 and
Llama checkpoints with `attention_bias` also put a bias on the output projection (`o_proj_bias`), and
Llama 3.1+ rescales the rotary frequencies (`rope_scaling`). Qwen3-MoE (`num_experts > 0`) replaces
the SwiGLU MLP of some layers by a top-k mixture of experts (`rlscale.model.moe`), with HF's field
names.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# Kernel switches (`ModelConfig.attention_impl` / `remat_impl`): "auto" picks the CPU-tuned path
# on the CPU backend and the standard one elsewhere (`resolve_impl`); for attention, the
# accelerator kernels on TPU and GPU (`attention.resolve_attention_impl`).
ATTENTION_IMPLS = ("auto", "cpu", "standard", "blockwise", "splash", "cudnn")
REMAT_IMPLS = ("auto", "custom_vjp", "checkpoint")
# The mixture-of-experts fields (HF Qwen3MoeConfig names, plus the dispatch switch); with
# num_experts == 0 they do not change the model (`ModelConfig.moe_fields_in_use`).
MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
              "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef", "moe_dispatch")
MOE_DISPATCHES = ("auto", "ragged", "dense")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Llama 3 rotary frequency rescaling (HF rope_type "llama3", used by Llama 3.1 and later).

  Wavelengths 2*pi/inv_freq longer than original_max_position / low_freq_factor are divided by
  `factor`, those shorter than original_max_position / high_freq_factor are kept, and the band in
  between is interpolated linearly in original_max_position / wavelength.

  Attributes:
    factor: divisor of the low frequencies (8 in Llama 3.1).
    low_freq_factor: 1 in Llama 3.1.
    high_freq_factor: 4 in Llama 3.1.
    original_max_position: context length of pre-training before extension (8192 in Llama 3.1).

  Raises:
    ValueError: when factor <= 0, original_max_position <= 0 or high_freq_factor <= low_freq_factor.
  """

  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_position: int

  def __post_init__(self):
    if self.factor <= 0 or self.original_max_position <= 0:
      raise ValueError("rope_scaling.factor and rope_scaling.original_max_position must be positive, "
                       f"got {self.factor!r} and {self.original_max_position!r}")
    if self.high_freq_factor <= self.low_freq_factor:
      raise ValueError(f"rope_scaling.high_freq_factor ({self.high_freq_factor}) must exceed "
                       f"rope_scaling.low_freq_factor ({self.low_freq_factor})")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture of a decoder-only transformer (RMSNorm, RoPE, GQA, SwiGLU).

  Attributes:
    vocab_size: V, number of token ids.
    hidden_size: model width.
    intermediate_size: SwiGLU hidden width.
    num_layers: number of decoder blocks.
    num_heads: query heads H.
    num_kv_heads: key/value heads K; H must be a multiple of K (grouped-query attention).
    head_dim: width D of one head (Qwen3 sets it independently of hidden_size / num_heads).
    rope_theta: base of the rotary frequencies, inv_freq_i = theta^(-2i/D).
    rope_scaling: None for plain RoPE, or a RopeScaling for Llama 3 style frequency rescaling.
    rms_norm_eps: epsilon inside every RMSNorm.
    tie_embeddings: reuse the embedding matrix as the output projection.
    qkv_bias: bias on the q/k/v projections (Qwen2; Qwen3 and Llama with attention_bias).
    o_proj_bias: bias on the attention output projection (Qwen3 and Llama with attention_bias).
    qk_norm: RMSNorm over head_dim on queries and keys before RoPE (Qwen3).
    param_dtype: "float32" or "bfloat16": storage dtype of the parameters.
    dtype: "float32" or "bfloat16": compute dtype; softmax, norms and logits stay float32.
    value_head: add a scalar value head (PPO critic) on the final hidden state.
    remat: rematerialise each decoder layer in the backward pass (gradient checkpointing): a
      layer keeps only its input for the backward pass and recomputes its activations there,
      about one more forward of compute for the activation memory of one layer instead of all.
      The numbers are unchanged; sampling (the KV-cached forward) ignores it.
    attention_impl: the attention kernel (`rlscale.model.attention`; all read segment ids and
      slots, `attention.AttentionSegments`). Dense, [B, heads, T, S] float32 scores: "cpu"
      (scores by einsum, a decode step's q . k as a multiply-reduce over the transposed key
      cache: tuned for XLA:CPU), "standard" (`jax.nn.dot_product_attention` with XLA; the cache
      keeps its layout and is transposed on read). Memory-bounded: "blockwise" (plain-JAX online
      softmax over key blocks with a recomputing backward, FlashAttention / Dao et al. 2022;
      any platform), "splash" (jax's Pallas TPU splash-attention kernel under shard_map;
      training and prefill, decode steps run "standard"), "cudnn" (cuDNN fused attention on
      NVIDIA GPUs, bfloat16/float16 only; decode steps run "standard"). "auto" (default): "cpu"
      on CPU; "splash" on TPU and "cudnn" on GPU with a 16-bit dtype for training and prefill,
      "standard" otherwise (`attention.resolve_attention_impl`). Equal up to float rounding
      (tests/model/test_kernel_switches.py, tests/model/test_attention.py).
    remat_impl: how `remat` recomputes a layer: "custom_vjp" (`transformer.rematerialised_layer`,
      whose backward is tied to the cotangent so XLA:CPU cannot merge it with the forward),
      "checkpoint" (`jax.checkpoint` with the nothing_saveable policy), or "auto" (default):
      "custom_vjp" on CPU, else "checkpoint". The same numbers.
    model_type: the HF family name this config came from ("qwen3", "qwen2", "llama",
      "qwen3_moe"), for saving.
    num_experts: E, experts per MoE layer; 0 = a dense model (every layer a SwiGLU MLP).
    num_experts_per_tok: k, experts each token is routed to (1 <= k <= E).
    moe_intermediate_size: I, SwiGLU hidden width of one expert.
    norm_topk_prob: renormalise the k chosen router probabilities to sum to 1 (Qwen3-MoE
      checkpoints: True; HF's class default False).
    decoder_sparse_step: layer i (0-based) is MoE iff (i + 1) % decoder_sparse_step == 0 and i is
      not in mlp_only_layers (HF Qwen3MoeDecoderLayer).
    mlp_only_layers: layer indices that keep a dense MLP of intermediate_size (a tuple; lists
      are converted).
    router_aux_loss_coef: coefficient of the load-balancing loss (`moe.load_balancing_loss`) in
      the RL update's loss (HF adds it to the LM loss with the same coefficient).
    moe_dispatch: "ragged" (sort + jax.lax.ragged_dot), "dense" (every expert, masked) or "auto"
      (dense on CPU, ragged elsewhere: `moe.resolve_dispatch`); the same numbers either way.

  Raises:
    ValueError: from `validate` when a field is out of range, naming the field.
  """

  vocab_size: int = 512
  hidden_size: int = 256
  intermediate_size: int = 768
  num_layers: int = 4
  num_heads: int = 8
  num_kv_heads: int = 4
  head_dim: int = 32
  rope_theta: float = 1_000_000.0
  rope_scaling: Optional[RopeScaling] = None
  rms_norm_eps: float = 1e-6
  tie_embeddings: bool = True
  qkv_bias: bool = False
  o_proj_bias: bool = False
  qk_norm: bool = True
  param_dtype: str = "float32"
  dtype: str = "float32"
  value_head: bool = False
  remat: bool = False
  model_type: str = "qwen3"
  attention_impl: str = "auto"
  remat_impl: str = "auto"
  num_experts: int = 0
  num_experts_per_tok: int = 2
  moe_intermediate_size: int = 0
  norm_topk_prob: bool = True
  decoder_sparse_step: int = 1
  mlp_only_layers: tuple = ()
  router_aux_loss_coef: float = 0.001
  moe_dispatch: str = "auto"

  def __post_init__(self):
    if isinstance(self.mlp_only_layers, (list, range)):
      # A config file's or config.json's list, stored as a tuple so the config stays hashable
      # (it is a static argument of jitted functions).
      object.__setattr__(self, "mlp_only_layers", tuple(self.mlp_only_layers))
    self.validate()

  def validate(self) -> None:
    """Checks every field; raises ValueError naming the first bad one."""
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads", "head_dim"):
      value = getattr(self, name)
      if not isinstance(value, int) or value <= 0:
        raise ValueError(f"model.{name} must be a positive int, got {value!r}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"model.num_heads ({self.num_heads}) must be a multiple of "
                       f"model.num_kv_heads ({self.num_kv_heads})")
    if self.head_dim % 2:
      raise ValueError(f"model.head_dim must be even for rotary embeddings, got {self.head_dim}")
    if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
      raise ValueError(f"model.rope_scaling must be None or a RopeScaling, got {self.rope_scaling!r}")
    if not isinstance(self.remat, bool):
      raise ValueError(f"model.remat must be True or False, got {self.remat!r}")
    for name, allowed in (("attention_impl", ATTENTION_IMPLS), ("remat_impl", REMAT_IMPLS)):
      if getattr(self, name) not in allowed:
        raise ValueError(f"model.{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
    for name in ("param_dtype", "dtype"):
      if getattr(self, name) not in DTYPES:
        raise ValueError(f"model.{name} must be one of {sorted(DTYPES)}, got {getattr(self, name)!r}")
    self._validate_moe()

  def _validate_moe(self) -> None:
    """The MoE fields; only num_experts, mlp_only_layers' type and moe_dispatch when dense."""
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    if not is_int(self.num_experts) or self.num_experts < 0:
      raise ValueError(f"model.num_experts must be an int >= 0 (0: dense), got {self.num_experts!r}")
    if self.moe_dispatch not in MOE_DISPATCHES:
      raise ValueError(f"model.moe_dispatch must be one of {MOE_DISPATCHES}, got "
                       f"{self.moe_dispatch!r}")
    if not isinstance(self.mlp_only_layers, tuple) or not all(
        is_int(i) for i in self.mlp_only_layers):
      raise ValueError(f"model.mlp_only_layers must be a tuple of layer indices, got "
                       f"{self.mlp_only_layers!r}")
    if not self.num_experts:
      return
    k = self.num_experts_per_tok
    if not is_int(k) or not 1 <= k <= self.num_experts:
      raise ValueError(f"model.num_experts_per_tok must be an int in [1, num_experts = "
                       f"{self.num_experts}], got {k!r}")
    for name in ("moe_intermediate_size", "decoder_sparse_step"):
      value = getattr(self, name)
      if not is_int(value) or value <= 0:
        raise ValueError(f"model.{name} must be a positive int when num_experts > 0, got {value!r}")
    bad = [i for i in self.mlp_only_layers if not 0 <= i < self.num_layers]
    if bad:
      raise ValueError(f"model.mlp_only_layers holds {bad}, outside the layers 0..{self.num_layers - 1}")
    if not isinstance(self.norm_topk_prob, bool):
      raise ValueError(f"model.norm_topk_prob must be True or False, got {self.norm_topk_prob!r}")
    coef = self.router_aux_loss_coef
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not coef >= 0:
      raise ValueError(f"model.router_aux_loss_coef must be a number >= 0, got {coef!r}")

  def is_moe_layer(self, layer: int) -> bool:
    """Whether decoder layer `layer` (0-based) is a mixture of experts: num_experts > 0,
    (layer + 1) % decoder_sparse_step == 0 and layer not in mlp_only_layers (HF Qwen3-MoE)."""
    return (self.num_experts > 0 and (layer + 1) % self.decoder_sparse_step == 0
            and layer not in self.mlp_only_layers)

  @property
  def moe_layers(self) -> tuple[int, ...]:
    """Indices of the MoE layers (empty for a dense model)."""
    return tuple(i for i in range(self.num_layers) if self.is_moe_layer(i))

  @property
  def moe_fields_in_use(self) -> bool:
    """Whether the MoE fields change the model (num_experts > 0 and some layer is MoE)."""
    return bool(self.moe_layers)

  @property
  def jnp_dtype(self) -> Any:
    return DTYPES[self.dtype]

  @property
  def jnp_param_dtype(self) -> Any:
    return DTYPES[self.param_dtype]

  def replace(self, **changes) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  def num_params(self, include_embedding: bool = True, active: bool = False) -> int:
    """Parameter count of `transformer.init_params(self)`: the embedding counted once when tied,
    the value head (kernel [hidden, 1] and bias [1]) when present.

    A MoE layer holds the router [hidden, E] and E experts of 3 * hidden * I; with active=True
    only the k experts one token uses are counted (router included): the parameters that
    touch a token, which set its FLOPs."""
    d, h, k, hd, f = (self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim,
                      self.intermediate_size)
    attn = d * h * hd + 2 * d * k * hd + h * hd * d
    if self.qkv_bias:
      attn += h * hd + 2 * k * hd
    if self.o_proj_bias:
      attn += d
    if self.qk_norm:
      attn += 2 * hd
    experts = self.num_experts_per_tok if active else self.num_experts
    moe_mlp = d * self.num_experts + experts * 3 * d * self.moe_intermediate_size
    mlps = sum(moe_mlp if self.is_moe_layer(i) else 3 * d * f for i in range(self.num_layers))
    total = self.num_layers * (attn + 2 * d) + mlps + d + (d + 1 if self.value_head else 0)
    if include_embedding:
      total += self.vocab_size * d * (1 if self.tie_embeddings else 2)
    return total

  def flops_per_token(self, context: int = 0) -> float:
    """Forward matmul FLOPs per token: 2 x active non-embedding params (`num_params(active=True)`:
    a MoE layer's router and the k experts a token uses) + the output projection, plus
    4 * layers * heads * head_dim * context for attention scores and values (Kaplan et al. 2020's
    2N per token). The dense dispatch's extra E - k experts are not counted (they are waste)."""
    dense = 2 * (self.num_params(include_embedding=False, active=True)
                 + self.vocab_size * self.hidden_size)
    attention = 4 * self.num_layers * self.num_heads * self.head_dim * context
    return float(dense + attention)


def tiny_config(**overrides) -> ModelConfig:
  """The built-in CPU model: Qwen3 layout at W1 size (about 2.6M params with vocab 512)."""
  return ModelConfig(**overrides)


def resolve_impl(setting: str, cpu_choice: str, standard_choice: str,
                 platform: Optional[str] = None) -> str:
  """A kernel switch's path: `setting` itself unless it is "auto", then `cpu_choice` on the CPU
  backend and `standard_choice` elsewhere (platform: "cpu", "gpu", "tpu"; default
  `jax.default_backend()`, read when the model is traced)."""
  if setting != "auto":
    return setting
  return cpu_choice if (platform or jax.default_backend()) == "cpu" else standard_choice
