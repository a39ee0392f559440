"""Text <-> the fixed-shape [prompt | response] token layout shared by SFT, rollouts and updates.

Prompts are left-padded to Tp tokens so every prompt ends at the same column and generation starts
at column Tp for every row; responses are right-padded to Tr tokens after their EOS.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlscale.tokenizers import encode_batch_left_padded


def bucket_length(length: int, buckets: Sequence[int]) -> int:
  """Smallest bucket >= length. Raises ValueError when it exceeds the largest bucket."""
  for b in sorted(buckets):
    if length <= b:
      return b
  raise ValueError(f"prompt of {length} tokens exceeds rollout.max_prompt_tokens={max(buckets)}; "
                   "raise it or shorten the prompt template")


def encode_prompts(tokenizer, texts: Sequence[str], buckets: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """Left-padded prompt tokens, padded to the smallest bucket that holds the longest prompt.

  Returns: tokens [P, Tp] int32 (pad_id on the left), mask [P, Tp] int32.
  Raises: ValueError when a prompt exceeds every bucket or encodes to no tokens.
  """
  width = bucket_length(max(len(tokenizer.encode(t)) for t in texts), buckets)
  return encode_batch_left_padded(tokenizer, texts, width)


def encode_responses(tokenizer, texts: Sequence[str], length: int) -> tuple[np.ndarray, np.ndarray]:
  """Right-padded response tokens, each followed by EOS (truncated to `length` tokens with EOS).

  Returns: tokens [B, Tr] int32, response_mask [B, Tr] int32 (1 up to and including EOS)."""
  tokens = np.full((len(texts), length), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(texts), length), np.int32)
  for row, text in enumerate(texts):
    seq = (list(tokenizer.encode(text)) + [tokenizer.eos_id])[:length]
    tokens[row, :len(seq)] = seq
    mask[row, :len(seq)] = 1
  return tokens, mask


def decode_responses(tokenizer, tokens: np.ndarray, response_mask: np.ndarray) -> list[str]:
  """Response texts from tokens [B, Tr] under response_mask [B, Tr] (EOS and padding dropped)."""
  out = []
  for row, mask in zip(np.asarray(tokens), np.asarray(response_mask)):
    ids = [int(t) for t, m in zip(row, mask) if m and int(t) != tokenizer.eos_id]
    out.append(tokenizer.decode(ids))
  return out


def response_bucket(length: int, max_new_tokens: int, parts: int = 4) -> int:
  """The response width to train on: the smallest multiple of ceil(max_new_tokens / parts) that
  holds `length` tokens, capped at max_new_tokens.

  A rollout batch is padded to the sampler's limit max_new_tokens; the update step only needs the
  longest response of the batch, and rounding it up to one of `parts` widths bounds the compiles
  of the update step to `parts` shapes (the same bucketing the sampler does for prompts).

  Raises: ValueError for length outside [0, max_new_tokens] or parts < 1.
  """
  if not 0 <= length <= max_new_tokens or parts < 1:
    raise ValueError(f"response length {length} must be in [0, max_new_tokens={max_new_tokens}] "
                     f"and parts={parts} >= 1")
  step = -(-max_new_tokens // parts)
  return min(max_new_tokens, max(step, -(-length // step) * step))


def trim_rollout(rollout, width: int):
  """The Rollout with its response columns cut to the first `width` (tokens [B, Tp + width],
  response_mask and logp [B, width]); exact for training when every response fits in `width`,
  since a causal model's positions never look at later columns.

  Raises: ValueError when a response is longer than `width` (its tokens would be lost)."""
  lengths = np.asarray(rollout.lengths)
  if lengths.size and int(lengths.max()) > width:
    raise ValueError(f"cannot trim responses of up to {int(lengths.max())} tokens to {width}")
  prompt_width = np.asarray(rollout.prompt_mask).shape[1]
  return rollout._replace(tokens=np.asarray(rollout.tokens)[:, :prompt_width + width],
                          response_mask=np.asarray(rollout.response_mask)[:, :width],
                          logp=np.asarray(rollout.logp)[:, :width])
