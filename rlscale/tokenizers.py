"""Tokenizers: a fixed character vocabulary for the built-in tasks, and HF `tokenizers` for
checkpoints, behind one small interface (`Tokenizer`), plus left-padded batch encoding.

Left padding puts every prompt's last token in the same column, so the sampler can prefill a
[B, T] batch and start decoding all rows at slot T (see rlscale.model.transformer).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import string
from typing import Optional, Protocol, Sequence, Union

import numpy as np
# The HF library: imports are absolute, so this module's own name does not shadow it.
import tokenizers as hf_tokenizers

PathLike = Union[str, os.PathLike]

# End-of-sequence spellings of common chat/base vocabularies, tried when no config names an eos id.
KNOWN_EOS_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<eos>")
# Files of a HF checkpoint that describe its tokenizer (and generation_config.json, which names the
# eos ids generation stops at); `HFTokenizer.save` copies those present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "chat_template.jinja", "chat_template.json", "generation_config.json")


class Tokenizer(Protocol):
  """What the rest of rlscale needs from a tokenizer.

  Attributes:
    vocab_size: number of ids the tokenizer can produce (the model's vocab may be larger).
    pad_id: id written into padding slots (always masked out, so any valid id works).
    bos_id: beginning-of-sequence id, or None when the vocabulary has none (Qwen).
    eos_id: the primary end-of-sequence id; eos_ids: every id that ends a response.
  """
  vocab_size: int
  pad_id: int
  bos_id: Optional[int]
  eos_id: int
  eos_ids: tuple[int, ...]

  def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
    ...

  def decode(self, ids: Sequence[int]) -> str:
    ...

  def save(self, directory: PathLike) -> None:
    """Writes tokenizer files into `directory` so that `load_tokenizer(directory)` and
    transformers' `AutoTokenizer.from_pretrained(directory)` load an equivalent tokenizer."""


class CharTokenizer:
  """One id per character of a fixed printable vocabulary, for the built-in arithmetic tasks.

  Ids: 0 pad, 1 bos, 2 eos, 3 unk, then digits, ASCII letters, ASCII punctuation, space and newline
  (4..99, vocab_size 100). Characters outside the vocabulary encode to `unk_id` (never raise).
  """

  SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
  CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"
  pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3
  eos_ids = (2,)
  # What an unknown (or out-of-vocabulary model) id decodes to: U+FFFD REPLACEMENT CHARACTER.
  UNK_TEXT = "\ufffd"

  def __init__(self):
    self._ids = {c: i + len(self.SPECIALS) for i, c in enumerate(self.CHARS)}

  @property
  def vocab_size(self) -> int:
    return len(self.SPECIALS) + len(self.CHARS)

  def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
    """Characters -> ids (unknown characters -> unk_id), optionally after bos_id."""
    ids = [self._ids.get(c, self.unk_id) for c in text]
    return [self.bos_id] + ids if add_bos else ids

  def decode(self, ids: Sequence[int]) -> str:
    """Ids -> text, ending at the first eos and skipping pad/bos; unk and ids outside the
    vocabulary (a model vocab can be larger) become UNK_TEXT."""
    out = []
    for i in (int(i) for i in ids):
      if i == self.eos_id:
        break
      if i in (self.pad_id, self.bos_id):
        continue
      index = i - len(self.SPECIALS)
      out.append(self.CHARS[index] if 0 <= index < len(self.CHARS) else self.UNK_TEXT)
    return "".join(out)

  def to_hf(self) -> "hf_tokenizers.Tokenizer":
    """The same vocabulary as a HF `tokenizers.Tokenizer`: a word-level model over single
    characters (every character is its own pre-token), the four specials as special added tokens,
    and a decoder that joins characters without spaces. It encodes text with the same ids as
    `encode`, except that the literal text "<eos>" (etc.) becomes its special id."""
    vocab = {token: i for i, token in enumerate(self.SPECIALS)}
    vocab.update(self._ids)
    tokenizer = hf_tokenizers.Tokenizer(
        hf_tokenizers.models.WordLevel(vocab, unk_token=self.SPECIALS[self.unk_id]))
    tokenizer.pre_tokenizer = hf_tokenizers.pre_tokenizers.Split(
        hf_tokenizers.Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = hf_tokenizers.decoders.Fuse()
    tokenizer.add_special_tokens(list(self.SPECIALS))
    return tokenizer

  def save(self, directory: PathLike) -> None:
    """Writes tokenizer.json (see `to_hf`) and tokenizer_config.json (PreTrainedTokenizerFast with
    the special tokens) into `directory`, so `load_tokenizer(directory)` and transformers'
    `AutoTokenizer.from_pretrained(directory)` load this vocabulary (e.g. next to an exported
    policy)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    self.to_hf().save(str(directory / "tokenizer.json"))
    pad, bos, eos, unk = self.SPECIALS
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as f:
      json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": pad, "bos_token": bos,
                 "eos_token": eos, "unk_token": unk, "add_bos_token": False}, f, indent=2)


def _read_json_if_exists(path: pathlib.Path) -> dict:
  if not path.is_file():
    return {}
  with open(path) as f:
    return json.load(f)


def _as_id_list(value) -> list[int]:
  if value is None:
    return []
  return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _token_content(value) -> Optional[str]:
  """tokenizer_config.json spells special tokens as a string or {"content": ...}."""
  return value.get("content") if isinstance(value, dict) else value


class HFTokenizer:
  """A HF `tokenizers.Tokenizer` (tokenizer.json) with the `Tokenizer` interface.

  `encode` never adds the tokenizer's own post-processing specials; pass add_bos=True for a bos.
  """

  def __init__(self, tokenizer, *, eos_ids: Sequence[int], pad_id: int, bos_id: Optional[int] = None):
    """Args: tokenizer: a tokenizers.Tokenizer; eos_ids: ids that end a response (first is the
    primary); pad_id: padding id; bos_id: beginning-of-sequence id or None.

    Raises:
      ValueError: eos_ids is empty.
    """
    if not eos_ids:
      raise ValueError("eos_ids must name at least one id")
    self._tokenizer = tokenizer
    self.eos_ids = tuple(int(i) for i in eos_ids)
    self.eos_id = self.eos_ids[0]
    self.pad_id = int(pad_id)
    self.bos_id = None if bos_id is None else int(bos_id)
    self.source_dir: Optional[pathlib.Path] = None  # set by from_dir; `save` copies its files

  @classmethod
  def from_dir(cls, path: PathLike) -> "HFTokenizer":
    """Loads `<path>/tokenizer.json`; special ids come from, in order of precedence,
    generation_config.json, config.json, then tokenizer_config.json tokens; eos falls back to the
    first of KNOWN_EOS_TOKENS in the vocabulary, pad to eos.

    Raises:
      FileNotFoundError: no tokenizer.json in `path`.
      ValueError: no eos id can be found (names the files searched).
    """
    directory = pathlib.Path(path)
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
      raise FileNotFoundError(f"tokenizer file {tokenizer_file} not found")
    tokenizer = hf_tokenizers.Tokenizer.from_file(str(tokenizer_file))
    generation = _read_json_if_exists(directory / "generation_config.json")
    model = _read_json_if_exists(directory / "config.json")
    tokenizer_config = _read_json_if_exists(directory / "tokenizer_config.json")

    def special(key: str) -> list[int]:
      for source in (generation, model):
        ids = _as_id_list(source.get(f"{key}_token_id"))
        if ids:
          return ids
      token = _token_content(tokenizer_config.get(f"{key}_token"))
      found = None if token is None else tokenizer.token_to_id(token)
      return [] if found is None else [found]

    eos_ids = special("eos")
    if not eos_ids:
      eos_ids = [i for i in map(tokenizer.token_to_id, KNOWN_EOS_TOKENS) if i is not None][:1]
    if not eos_ids:
      raise ValueError(f"no eos id for {directory}: none in generation_config.json, config.json or "
                       f"tokenizer_config.json, and none of {KNOWN_EOS_TOKENS} is in the vocabulary")
    pad_ids, bos_ids = special("pad"), special("bos")
    loaded = cls(tokenizer, eos_ids=eos_ids, pad_id=(pad_ids or eos_ids)[0],
                 bos_id=bos_ids[0] if bos_ids else None)
    loaded.source_dir = directory
    return loaded

  def save(self, directory: PathLike) -> None:
    """Copies the tokenizer files of the checkpoint it was loaded from (TOKENIZER_FILES present
    there) into `directory`; a tokenizer built in code writes its tokenizer.json and a
    tokenizer_config.json naming the eos and pad tokens."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if self.source_dir is not None:
      for name in TOKENIZER_FILES:
        if (self.source_dir / name).is_file():
          shutil.copyfile(self.source_dir / name, directory / name)
      return
    self._tokenizer.save(str(directory / "tokenizer.json"))
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as f:
      json.dump({"tokenizer_class": "PreTrainedTokenizerFast",
                 "eos_token": self._tokenizer.id_to_token(self.eos_id),
                 "pad_token": self._tokenizer.id_to_token(self.pad_id)}, f, indent=2)

  @property
  def vocab_size(self) -> int:
    return self._tokenizer.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
    """Text -> ids without post-processing specials, optionally after bos_id.

    Raises:
      ValueError: add_bos with a vocabulary that has no bos.
    """
    ids = self._tokenizer.encode(text, add_special_tokens=False).ids
    if not add_bos:
      return ids
    if self.bos_id is None:
      raise ValueError("add_bos=True but this tokenizer has no bos id")
    return [self.bos_id] + ids

  def decode(self, ids: Sequence[int]) -> str:
    """Ids -> text: leading pad ids are dropped (a left-padded row decodes to its text even where
    pad_id is also an eos id, as in Qwen), then the text ends at the first eos id; other special
    tokens are skipped."""
    ids = [int(i) for i in ids]
    start = next((t for t, i in enumerate(ids) if i != self.pad_id), len(ids))
    end = next((t for t, i in enumerate(ids[start:], start) if i in self.eos_ids), len(ids))
    return self._tokenizer.decode(ids[start:end], skip_special_tokens=True)


def load_tokenizer(spec: Union[str, os.PathLike]) -> Tokenizer:
  """"char" -> CharTokenizer(); a checkpoint directory -> HFTokenizer.from_dir(spec).

  Raises:
    FileNotFoundError: spec is neither "char" nor an existing directory, or it has no
      tokenizer.json.
    ValueError: as HFTokenizer.from_dir.
  """
  if spec == "char":
    return CharTokenizer()
  if not pathlib.Path(spec).is_dir():
    raise FileNotFoundError(f"tokenizer spec must be 'char' or a checkpoint directory with "
                            f"tokenizer.json, got {spec!r} (no such directory)")
  return HFTokenizer.from_dir(spec)


def encode_batch_left_padded(tokenizer: Tokenizer, texts: Sequence[str], length: int, *,
                             add_bos: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """Encodes texts into a left-padded [B, length] batch.

  A text longer than `length` tokens is truncated from the LEFT: its last `length` tokens are
  kept, because a prompt ends with the question and the answer cue the model continues from.

  Args:
    tokenizer: any `Tokenizer`. texts: B strings. length: T, tokens per row.
    add_bos: prepend the bos id before truncation (so a truncated row loses it).

  Returns:
    tokens [B, T] int32 (pad_id in padding slots), mask [B, T] int32 (1 for real tokens).

  Raises:
    ValueError: length is not a positive int, or a text encodes to no tokens (a row without a real
      token has nothing to condition on; the sampler requires at least one).
  """
  if not isinstance(length, (int, np.integer)) or length <= 0:
    raise ValueError(f"length must be a positive int, got {length!r}")
  tokens = np.full((len(texts), length), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(texts), length), np.int32)
  for row, text in enumerate(texts):
    ids = tokenizer.encode(text, add_bos=add_bos)[-length:]
    if not ids:
      raise ValueError(f"texts[{row}] ({text!r}) encodes to no tokens; every row needs at least one")
    tokens[row, length - len(ids):] = ids
    mask[row, length - len(ids):] = 1
  return tokens, mask
