"""Packing plans: which tokens of a padded batch go where in rows of packed sequences (host side,
numpy).

A padded batch holds one sequence per row: tokens [B, T] with input_mask [B, T] (1 for real
prompt and response tokens, each row's real tokens contiguous: the left-padded prompt, then the
response up to its end) and per-token response arrays [B, Tr] (the last Tr columns). Packing puts
several sequences into each row of `width` tokens (first-fit decreasing: Johnson 1973, the bin
packing of verl's `rearrange_micro_batches` and tunix), each sequence a segment 1, 2, ... of its
row, and groups the rows into microbatches of `rows_per_microbatch` rows. A plan is three index
arrays; the gathers that apply it run on the device (`rlscale.packing.gather`):

  token_src   [..., width] int32: the flat index b * T + t of the padded token at each packed
              column, -1 for padding;
  segment_ids [..., width] int32: 1, 2, ... per sequence within its row, 0 for padding (the
              model's input_mask of a packed row: `transformer.forward`);
  target_src  [..., width - 1] int32: at packed column c, the flat index b * Tr + j of the
              response token that the output at c predicts (the token at column c + 1 is
              response token j of row b), -1 where that token is not a response token.

Every packed microbatch then holds the same real tokens at the same rotary positions, attending to
the same earlier tokens, as in the padded batch (`attention.positions_from_segments` counts only
real tokens of a segment, in both layouts), so every per-token output is the padded one up to
float summation order.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PackingPlan:
  """Index arrays of a packed layout (see the module docstring), leading axes [..., K, r]: K
  microbatches of r rows (an update step's plan adds [U] updates in front).

  Attributes:
    token_src: [..., K, r, width] int32. segment_ids: [..., K, r, width] int32.
    target_src: [..., K, r, width - 1] int32.
    rows: [U, B / M] int32, the padded rows of each update's minibatch (update plans only), else
      None.
  """
  token_src: np.ndarray
  segment_ids: np.ndarray
  target_src: np.ndarray
  rows: Optional[np.ndarray] = None

  def arrays(self) -> dict[str, np.ndarray]:
    """The plan as a dict of its arrays (rows only when set)."""
    out = {"token_src": self.token_src, "segment_ids": self.segment_ids,
           "target_src": self.target_src}
    if self.rows is not None:
      out["rows"] = self.rows
    return out

  @property
  def microbatches(self) -> int:
    """K, microbatches per update (or per pass)."""
    return self.token_src.shape[-3]

  @property
  def rows_per_microbatch(self) -> int:
    """r, packed rows per microbatch."""
    return self.token_src.shape[-2]


def real_spans(input_mask: np.ndarray) -> np.ndarray:
  """[B, 2] int: each row's real tokens as [start, stop) columns of input_mask [B, T] {0,1}.

  Raises: ValueError when a row's real tokens are not contiguous (a padded batch's rows are: the
    left-padded prompt, then the response), naming the row."""
  real = np.asarray(input_mask) > 0
  lengths = real.sum(axis=1)
  starts = np.where(lengths > 0, real.argmax(axis=1), 0)
  stops = starts + lengths
  for b in np.flatnonzero(lengths):
    if not real[b, starts[b]:stops[b]].all():
      raise ValueError(f"packing: row {b}'s real tokens (input_mask) are not contiguous")
  return np.stack([starts, stops], axis=1)


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
  """Bins of at most `capacity` tokens: sequences by decreasing length, each into the first bin
  with room (Johnson 1973; at most 11/9 OPT + 1 bins). Sequences of length 0 go nowhere.

  Args: lengths: tokens per sequence (ints >= 0). capacity: tokens per bin (a packed row's width).
  Returns: the bins, lists of sequence indices in packing order (longest first).
  Raises: ValueError for a sequence longer than `capacity` (naming train.max_tokens_per_row)."""
  lengths = [int(n) for n in lengths]
  if lengths and max(lengths) > capacity:
    raise ValueError(f"train.max_tokens_per_row={capacity} is shorter than a sequence of "
                     f"{max(lengths)} tokens (prompt + response): set it >= the longest "
                     "rollout.max_prompt_tokens + rollout.max_new_tokens")
  bins: list[list[int]] = []
  room: list[int] = []
  for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
    if lengths[index] == 0:
      continue
    for b, free in enumerate(room):
      if free >= lengths[index]:
        bins[b].append(index)
        room[b] -= lengths[index]
        break
    else:
      bins.append([index])
      room.append(capacity - lengths[index])
  return bins


def _fill_row(token_src, segment_ids, target_src, sequences, spans, total_len: int,
              response_len: int) -> None:
  """Writes `sequences` (padded rows) one after another into one packed row's arrays."""
  column = 0
  response_start = total_len - response_len
  for segment, b in enumerate(sequences, start=1):
    start, stop = spans[b]
    n = stop - start
    token_src[column:column + n] = b * total_len + np.arange(start, stop)
    segment_ids[column:column + n] = segment
    # The output at packed column c predicts the token at c + 1: padded column t + 1.
    predicted = np.arange(start + 1, stop)
    is_response = predicted >= response_start
    target_src[column:column + n - 1][is_response] = (b * response_len + predicted[is_response]
                                                      - response_start)
    column += n


def pack_rows(input_mask: np.ndarray, response_len: int, sequences: Sequence[int], *,
              width: int, rows_per_microbatch: int,
              microbatches: Optional[int] = None) -> PackingPlan:
  """Packs the padded rows `sequences` of a batch into microbatches of packed rows.

  The sequences are packed into rows of `width` tokens by `first_fit_decreasing`; packed row i
  goes to microbatch i mod K (rows of decreasing fill dealt round the microbatches, so their token
  counts stay close); padding rows fill each microbatch to `rows_per_microbatch` rows.

  Args:
    input_mask: [B, T] {0,1} of the padded batch (real tokens contiguous per row).
    response_len: Tr, the response columns (the last Tr of T).
    sequences: the padded rows to pack (e.g. one minibatch's).
    width: tokens per packed row (train.max_tokens_per_row).
    rows_per_microbatch: r.
    microbatches: K; None: the fewest that hold the packed rows, ceil(rows / r) (at least 1).
  Returns: PackingPlan with arrays [K, r, width] and [K, r, width - 1].
  Raises: ValueError for a sequence longer than width, a row with non-contiguous real tokens, or
    more packed rows than K x r."""
  input_mask = np.asarray(input_mask)
  total_len = input_mask.shape[1]
  spans = real_spans(input_mask)
  sequences = list(sequences)
  bins = first_fit_decreasing([spans[b, 1] - spans[b, 0] for b in sequences], width)
  count = max(1, -(-len(bins) // rows_per_microbatch)) if microbatches is None else microbatches
  if len(bins) > count * rows_per_microbatch:
    raise ValueError(f"packing: {len(bins)} packed rows do not fit {count} microbatches of "
                     f"{rows_per_microbatch} rows")
  token_src = np.full((count, rows_per_microbatch, width), -1, np.int32)
  segment_ids = np.zeros((count, rows_per_microbatch, width), np.int32)
  target_src = np.full((count, rows_per_microbatch, width - 1), -1, np.int32)
  for i, members in enumerate(bins):
    k, r = i % count, i // count
    _fill_row(token_src[k, r], segment_ids[k, r], target_src[k, r],
              [sequences[m] for m in members], spans, total_len, response_len)
  return PackingPlan(token_src, segment_ids, target_src)


def packed_row_count(input_mask: np.ndarray, sequences: Sequence[int], width: int) -> int:
  """Rows of `width` tokens that first-fit decreasing packs `sequences` of the batch into."""
  spans = real_spans(input_mask)
  return len(first_fit_decreasing([spans[b, 1] - spans[b, 0] for b in sequences], width))


def stack_plans(plans: Sequence[PackingPlan], rows: np.ndarray) -> PackingPlan:
  """One update step's plan from its updates' plans (equal shapes) and minibatch rows [U, B/M]."""
  return PackingPlan(np.stack([p.token_src for p in plans]),
                     np.stack([p.segment_ids for p in plans]),
                     np.stack([p.target_src for p in plans]), np.asarray(rows, np.int32))
