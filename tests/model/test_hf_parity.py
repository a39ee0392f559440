"""Parity with transformers: tiny random Qwen3 / Qwen2 / Llama models built with transformers,
saved with save_pretrained, loaded with our loader; logits on a left-padded batch, greedy
generation, both config.json layouts, and our writer read back by transformers."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.model import hf_checkpoint as hc
from rlscale.model import transformer as tfm

torch = pytest.importorskip("torch", reason="parity tests need the hf extra (torch)")
transformers = pytest.importorskip("transformers", reason="parity tests need the hf extra (transformers)")

pytestmark = pytest.mark.hf

V, PROMPT, NEW = 64, 7, 6
SIZES = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=16)
CASES = {
    "qwen3_tied": ("Qwen3", dict(head_dim=16, tie_word_embeddings=True)),
    "qwen3_untied_bias": ("Qwen3", dict(head_dim=8, tie_word_embeddings=False, attention_bias=True)),
    "qwen2_untied": ("Qwen2", dict(tie_word_embeddings=False)),
    "qwen2_tied": ("Qwen2", dict(tie_word_embeddings=True)),
    "llama_llama3_rope": ("Llama", dict(tie_word_embeddings=False, rope_parameters=LLAMA3_ROPE)),
    "llama_tied_bias": ("Llama", dict(tie_word_embeddings=True, attention_bias=True)),
}


def _hf_model(family: str, overrides: dict, seed: int = 0):
  """A tiny float32 HF model with every weight random (HF zero-inits biases, ones-inits norms,
  which would hide a mis-mapped bias or norm), eager attention, no eos (generate runs to the end)."""
  torch.manual_seed(seed)
  config = getattr(transformers, f"{family}Config")(**SIZES, **overrides)
  model = getattr(transformers, f"{family}ForCausalLM")(config)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1.0 + 0.1 * torch.randn_like(p))
      else:
        p.copy_(torch.randn_like(p) / (1.0 if "embed" in name else np.sqrt(p.shape[-1])))
  model.config._attn_implementation = "eager"
  model.generation_config.eos_token_id = None
  return model.eval()


def _prompts():
  """[3, PROMPT] left-padded prompts (lengths 7, 4, 2) followed by NEW empty slots."""
  rng = np.random.default_rng(0)
  tokens = np.zeros((3, PROMPT + NEW), np.int64)
  mask = np.zeros((3, PROMPT + NEW), np.int64)
  for row, n in enumerate([7, 4, 2]):
    tokens[row, PROMPT - n:PROMPT] = rng.integers(1, V, size=n)
    mask[row, PROMPT - n:PROMPT] = 1
  return tokens, mask


def _greedy(params, config, tokens, mask):
  """Greedy decoding by full causal forwards over a fixed [B, PROMPT + NEW] buffer (one compile):
  empty slots are masked, so the logits at slot t depend on slots <= t only."""
  step = jax.jit(lambda t, m: tfm.forward(params, config, t, m).logits)
  tokens, mask = jnp.asarray(tokens, jnp.int32), jnp.asarray(mask, jnp.int32)
  prompt_logits = step(tokens, mask)[:, :PROMPT]
  for t in range(PROMPT, PROMPT + NEW):
    next_token = jnp.argmax(step(tokens, mask)[:, t - 1], axis=-1)
    tokens, mask = tokens.at[:, t].set(next_token), mask.at[:, t].set(1)
  return prompt_logits, np.asarray(tokens[:, PROMPT:])


def _hf_logits_and_greedy(model, tokens, mask):
  ids, attn = torch.tensor(tokens[:, :PROMPT]), torch.tensor(mask[:, :PROMPT])
  positions = torch.clamp(attn.cumsum(-1) - 1, min=0)  # the same positions as ours
  with torch.no_grad():
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits.numpy()
    generated = model.generate(ids, attention_mask=attn, max_new_tokens=NEW, min_new_tokens=NEW,
                               do_sample=False, pad_token_id=0)
  return logits, generated[:, PROMPT:].numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_greedy_and_layouts_match_transformers(case, tmp_path, v4_layout):
  family, overrides = CASES[case]
  model = _hf_model(family, overrides)
  model.save_pretrained(tmp_path / "v5")
  raw = json.loads((tmp_path / "v5" / "config.json").read_text())
  assert "rope_parameters" in raw and raw.get("rope_theta") is None  # really the new layout
  config, params = hc.load_hf_checkpoint(tmp_path / "v5")
  assert config.tie_embeddings == overrides["tie_word_embeddings"]
  assert ("lm_head" in params) != config.tie_embeddings

  tokens, mask = _prompts()
  logits, generated = _greedy(params, config, tokens, mask)
  hf_logits, hf_generated = _hf_logits_and_greedy(model, tokens, mask)
  real = mask[:, :PROMPT, None].astype(bool)
  np.testing.assert_allclose(np.where(real, logits, 0), np.where(real, hf_logits, 0), atol=1e-4, rtol=1e-4)
  assert np.abs(hf_logits).max() > 1.0  # logits are large enough for 1e-4 to be a real check
  np.testing.assert_array_equal(generated, hf_generated)

  model.save_pretrained(tmp_path / "v4")
  (tmp_path / "v4" / "config.json").write_text(json.dumps(v4_layout(raw)))
  assert hc.load_hf_config(tmp_path / "v4") == config

  # Our writer, read back by transformers: the same weights, hence the same logits.
  hc.save_hf_checkpoint(tmp_path / "ours", config, params)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours", attn_implementation="eager")
  assert type(reloaded) is type(model)
  reference = model.state_dict()
  for name, tensor in reloaded.state_dict().items():
    np.testing.assert_array_equal(tensor.numpy(), reference[name].numpy(), err_msg=name)
