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


def longest_prompt(tokenizer, texts: Sequence[str]) -> int:
  """Tokens in the longest of the prompts `texts` (`tokenizer.encode_prompt`: chat template and
  BOS included)."""
  return max(len(tokenizer.encode_prompt(t)) for t in texts)


def encode_prompts(tokenizer, texts: Sequence[str], buckets: Sequence[int], *,
                   longest: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Left-padded prompt tokens, padded to the smallest bucket that holds the longest prompt, or
  `longest` tokens when given (a length the processes of a multi-host run agree on, so their
  batches share one width; it must be at least this batch's longest prompt).

  Returns: tokens [P, Tp] int32 (pad_id on the left), mask [P, Tp] int32.
  Raises: ValueError when a prompt exceeds every bucket or encodes to no tokens, or `longest` is
  shorter than a prompt.
  """
  own = longest_prompt(tokenizer, texts)
  if longest is not None and longest < own:
    raise ValueError(f"longest={longest} is shorter than a prompt of {own} tokens")
  width = bucket_length(own if longest is None else longest, buckets)
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


def width_bucket(length: int, limit: int, parts: int = 4) -> int:
  """A width to train on: the smallest multiple of ceil(limit / parts) that holds `length`
  tokens, capped at `limit`.

  A rollout batch is padded to the sampler's widths (the prompt bucket, and max_new_tokens for
  responses); the update step only needs the batch's longest prompt and longest response, and
  rounding each up to one of `parts` widths bounds the compiles of the update step to
  `parts` x `parts` shapes per prompt bucket.

  Raises: ValueError for length outside [0, limit] or parts < 1.
  """
  if not 0 <= length <= limit or parts < 1:
    raise ValueError(f"length {length} must be in [0, limit={limit}] and parts={parts} >= 1")
  step = -(-limit // parts)
  return min(limit, max(step, -(-length // step) * step))


def train_widths(rollout) -> tuple[int, int]:
  """(prompt width, response width) to train a rollout batch on: its longest prompt and longest
  response, each bucketed by `width_bucket` within the sampler's widths."""
  prompt_mask = np.asarray(rollout.prompt_mask)
  longest_prompt = int(prompt_mask.sum(axis=1).max()) if prompt_mask.size else 0
  return (width_bucket(longest_prompt, prompt_mask.shape[1]),
          width_bucket(int(np.max(rollout.lengths)), np.asarray(rollout.response_mask).shape[1]))


def trim_rollout(rollout, width: int, prompt_width: int | None = None):
  """The Rollout with its response columns cut to the first `width` (tokens [B, Tp' + width],
  response_mask, logp [B, width] and experts [B, width, ...] when present) and, with
  prompt_width, its prompt to the last `prompt_width` columns (Tp' = prompt_width; else
  Tp' = Tp). Exact for training when every response fits in `width` (a causal model's positions
  never look at later columns) and every dropped prompt column is left padding (positions count real tokens only, and padding keys are
  masked out of attention, so dropping them changes no real position's output).

  Raises: ValueError when a response is longer than `width`, or a dropped prompt column holds a
  real token (their tokens would be lost)."""
  lengths = np.asarray(rollout.lengths)
  if lengths.size and int(lengths.max()) > width:
    raise ValueError(f"cannot trim responses of up to {int(lengths.max())} tokens to {width}")
  prompt_mask = np.asarray(rollout.prompt_mask)
  tp = prompt_mask.shape[1]
  drop = 0 if prompt_width is None else tp - prompt_width
  if not 0 <= drop <= tp or prompt_mask[:, :drop].any():
    raise ValueError(f"cannot trim prompts of {tp} columns to their last {prompt_width}: "
                     "only all-padding leading columns can be dropped")
  trimmed = rollout._replace(tokens=np.asarray(rollout.tokens)[:, drop:tp + width],
                             prompt_mask=prompt_mask[:, drop:],
                             response_mask=np.asarray(rollout.response_mask)[:, :width],
                             logp=np.asarray(rollout.logp)[:, :width])
  if getattr(rollout, "experts", None) is not None:  # a model with experts: their routing too
    trimmed = trimmed._replace(experts=np.asarray(rollout.experts)[:, :width])
  return trimmed
