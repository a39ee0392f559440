"""Reading input files (task data, metrics, configs written by a run, checkpoints' JSON): text as
UTF-8 and JSON, with errors that name the file and the line.

A file with a byte that is not UTF-8 or with broken JSON is bad input, not a bug: the error is a
ValueError `<path>:<line>: ...`, which the command-line tools print as one line
(`rlscale.cli.run_cli`, exit status 2), instead of Python's "'utf-8' codec can't decode byte 0xe9
in position 395" that names neither.
"""

from __future__ import annotations

import codecs
import json
import os
from typing import Any


def decode_utf8(data: bytes, path: str, *, encoding: str = "utf-8") -> str:
  """The bytes `data` of the file `path` as text (`encoding`: "utf-8", or "utf-8-sig" to drop a
  byte-order mark).

  Raises: ValueError `<path>:<line>: not valid UTF-8 (byte 0xe9 at column 12); ...` at the first
  byte that is not UTF-8 (line and column 1-based, the column in characters), a user error."""
  try:
    return data.decode(encoding)
  except UnicodeDecodeError:
    pass
  try:  # positions in the whole file (utf-8-sig counts from after the byte-order mark)
    data.decode("utf-8")
  except UnicodeDecodeError as exc:
    start = exc.start
  else:  # pragma: no cover - utf-8-sig rejects only what utf-8 rejects
    raise AssertionError(f"{path}: decodes as utf-8 but not as {encoding}")
  line_start = data.rfind(b"\n", 0, start) + 1
  if line_start == 0 and data.startswith(codecs.BOM_UTF8):
    line_start = len(codecs.BOM_UTF8)  # the byte-order mark is no column
  column = len(data[line_start:start].decode("utf-8")) + 1
  line = data.count(b"\n", 0, start) + 1
  raise ValueError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[start]:02x} at column "
                   f"{column}); convert the file to UTF-8 (e.g. iconv -f <its encoding> -t "
                   "utf-8)")


def read_text(path: str | os.PathLike, *, encoding: str = "utf-8") -> str:
  """The text of the file `path` (`decode_utf8`; `encoding` "utf-8-sig" drops a byte-order mark).

  Raises: OSError when it cannot be read, ValueError `<path>:<line>: not valid UTF-8 ...`."""
  with open(path, "rb") as f:
    return decode_utf8(f.read(), os.fspath(path), encoding=encoding)


def read_json(path: str | os.PathLike) -> Any:
  """The JSON value in the file `path`.

  Raises: OSError when it cannot be read, ValueError `<path>:<line>: not valid UTF-8 ...` or
  `<path>:<line>:<column>: not valid JSON (<what>)`."""
  text = read_text(path)
  try:
    return json.loads(text)
  except json.JSONDecodeError as exc:
    raise ValueError(f"{os.fspath(path)}:{exc.lineno}:{exc.colno}: not valid JSON "
                     f"({exc.msg})") from None
