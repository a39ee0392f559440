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
