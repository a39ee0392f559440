"""Fixtures shared by the model tests."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import transformer
from rlscale.model.config import ModelConfig


def _random_params(config: ModelConfig, seed: int = 0) -> dict:
  """Random params in the layout of `transformer.init_params`: unit-scale embeddings so logits
  are O(1) and small differences show up, norm weights near 1, nonzero biases (init_params zeroes
  them, which would hide a mis-mapped bias). numpy-filled: jitting the init costs ~2 s per config."""
  shapes = jax.eval_shape(lambda key: transformer.init_params(config, key), jax.random.PRNGKey(0))
  rng = np.random.default_rng(seed)

  def fill(path, leaf):
    name = jax.tree_util.keystr(path)
    if "norm" in name:
      values = 1.0 + 0.1 * rng.standard_normal(leaf.shape)
    elif "embedding" in name:
      values = rng.standard_normal(leaf.shape)
    else:
      values = rng.standard_normal(leaf.shape) / np.sqrt(leaf.shape[0])
    return jnp.asarray(values, leaf.dtype)

  return jax.tree_util.tree_map_with_path(fill, shapes)


@pytest.fixture
def random_params():
  """`random_params(config, seed=0) -> params` (see `_random_params`)."""
  return _random_params


def _v4_layout(raw: dict) -> dict:
  """The transformers-4 spelling of a transformers-5 config.json dict: top-level rope_theta and
  rope_scaling (null for plain RoPE) instead of rope_parameters, torch_dtype instead of dtype."""
  raw = dict(raw)
  rope = dict(raw.pop("rope_parameters"))
  raw["rope_theta"] = rope.pop("rope_theta")
  raw["rope_scaling"] = None if rope["rope_type"] == "default" else rope
  raw["torch_dtype"] = raw.pop("dtype")
  return raw


@pytest.fixture
def v4_layout():
  """`v4_layout(config_dict) -> config_dict` (see `_v4_layout`)."""
  return _v4_layout
