"""Compiling one step for a TPU topology and reading what the compiler says about it.

`compile_step(step, topology)` lowers and compiles a `steps.Step` and returns a `StepResult`:
the per-device bytes of the executable (`memory_analysis()`: arguments, temporaries, outputs,
the outputs aliasing donated arguments), the bytes the run keeps alive beside it, the cost
model's flops, bytes accessed and seconds (`cost_analysis()`), and the compile time. A program
the compiler refuses for memory (RESOURCE_EXHAUSTED: "... the total memory required for HLO
temporaries (34.04G) exceeds available HBM (15.75G)") is a result with fits False and the
compiler's figures, not an exception; any other compiler error propagates (a change that breaks
TPU lowering must fail loudly).

The cost model counts every loop body once (XLA's HloCostAnalysis does not multiply by trip
counts: measured, a 10-step `lax.scan` reports the flops of one step), so the figures are those
of one pass through each loop: one microbatch of the update, one decode step plus the prefill
of the sampler, one chunk of the chunked log-probs. Its `optimal_seconds` is only valid where
positive (the TPU compiler of libtpu 0.0.42.1 reports negative values on v5e and v6e for real
model sizes).
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Optional

import jax

from rlscale.aot.steps import Step
from rlscale.aot.topology import GIB, Topology, captured_output, parse_available_hbm

_REQUIRED = re.compile(r"memory required for ([\w ]+?) \(([\d.]+)([KMGT])\)")
_USED = re.compile(r"Used ([\d.]+)([KMGT]) of ([\d.]+)([KMGT]) hbm")
_UNITS = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}


@dataclasses.dataclass(frozen=True)
class StepResult:
  """What the TPU compiler made of one step, per device (bytes; seconds of wall time).

  Attributes:
    step: the step's name ("update", "sample", ...); kind: "update", "sampler" or "pass".
    detail: the step's one-line description (`Step.detail`).
    rows, tokens: its batch rows and row width in tokens.
    compiled: False when the compiler refused it for memory.
    argument_bytes, temp_bytes, output_bytes, alias_bytes, code_bytes: `memory_analysis()` of
      the executable (None when refused).
    program_bytes: what the program needs: arguments + outputs not aliased to them +
      temporaries when compiled (`train.memory.StepMemory.peak_bytes`; the code, a few MiB, is
      apart in code_bytes); the compiler's "memory required" figure when refused (0 if its
      message has none).
    resident_bytes: bytes the run keeps alive beside the step's arguments (`Step.resident_bytes`);
      resident_what says what.
    hbm_bytes: the HBM one program may use on one device (`Topology.hbm_bytes`).
    flops, bytes_accessed: the cost model's (loop bodies once; None when refused).
    seconds: the cost model's optimal_seconds where positive, else None; seconds_note says why
      it is missing ("negative (not valid on v5e)", "not reported", "not compiled").
    compile_seconds: wall time of lowering and compiling.
    message: the compiler's refusal, one line (None when compiled).
  """
  step: str
  kind: str
  detail: str
  rows: int
  tokens: int
  compiled: bool
  argument_bytes: Optional[int]
  temp_bytes: Optional[int]
  output_bytes: Optional[int]
  alias_bytes: Optional[int]
  code_bytes: Optional[int]
  program_bytes: int
  resident_bytes: int
  resident_what: str
  hbm_bytes: int
  flops: Optional[float]
  bytes_accessed: Optional[float]
  seconds: Optional[float]
  seconds_note: str
  compile_seconds: float
  message: Optional[str] = None

  @property
  def peak_bytes(self) -> int:
    """Bytes per device while the step runs: the program's plus what the run keeps resident."""
    return self.program_bytes + self.resident_bytes

  @property
  def fits(self) -> bool:
    """Whether the step compiled and its peak (with the resident bytes) is within the HBM."""
    return self.compiled and self.peak_bytes <= self.hbm_bytes


def _bytes(value: str, unit: str) -> int:
  """Bytes of a compiler figure such as ("15.75", "G"); its units are powers of 2^10."""
  return int(float(value) * _UNITS[unit])


def refusal_figures(message: str) -> tuple[Optional[int], Optional[int], str]:
  """(bytes required, bytes available, what was counted) from a TPU compiler's
  RESOURCE_EXHAUSTED message (either "the total memory required for HLO temporaries (34.04G)
  exceeds available HBM (15.75G)" or "Used 20.1G of 15.75G hbm"); None where absent."""
  required = _REQUIRED.search(message)
  if required:
    return _bytes(required[2], required[3]), parse_available_hbm(message), required[1]
  used = _USED.search(message)
  if used:
    return _bytes(used[1], used[2]), _bytes(used[3], used[4]), "the program"
  return None, parse_available_hbm(message), "the program"


def is_out_of_memory(error: BaseException) -> bool:
  """Whether a compile error is the compiler refusing a program for memory."""
  text = str(error)
  return "RESOURCE_EXHAUSTED" in text or "Ran out of memory" in text


def _cost(compiled, topology: Topology) -> tuple[Optional[float], Optional[float],
                                                  Optional[float], str]:
  """(flops, bytes accessed, seconds or None, note on the seconds) of `compiled`."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax: one dict per program
    cost = cost[0] if cost else {}
  cost = cost or {}
  flops, accessed = cost.get("flops"), cost.get("bytes accessed")
  seconds = cost.get("optimal_seconds")
  if seconds is None:
    return flops, accessed, None, "not reported"
  if seconds <= 0:
    return flops, accessed, None, f"negative (not valid on {topology.chip})"
  return flops, accessed, float(seconds), ""


def compile_step(step: Step, topology: Topology) -> StepResult:
  """Lowers and compiles `step` for `topology`'s devices (its mesh is the step's own) and
  returns what the compiler says (see the module docstring).

  Raises: whatever lowering or compiling raises other than the compiler's refusal for memory
    (e.g. an op the TPU cannot lower): a bug to fix, not a size to change."""
  common = dict(step=step.name, kind=step.kind, detail=step.detail, rows=step.rows,
                tokens=step.tokens, resident_bytes=step.resident_bytes,
                resident_what=step.resident_what, hbm_bytes=topology.hbm_bytes)
  start = time.perf_counter()
  lowered = step.lower()
  try:
    with captured_output():
      compiled = lowered.compile()
  except jax.errors.JaxRuntimeError as e:
    if not is_out_of_memory(e):
      raise
    message = " ".join(str(e).split())
    required, _, _ = refusal_figures(message)
    return StepResult(**common, compiled=False, argument_bytes=None, temp_bytes=None,
                      output_bytes=None, alias_bytes=None, code_bytes=None,
                      program_bytes=required or 0, flops=None, bytes_accessed=None,
                      seconds=None, seconds_note="not compiled",
                      compile_seconds=time.perf_counter() - start, message=message[:500])
  seconds_taken = time.perf_counter() - start
  stats = compiled.memory_analysis()
  arguments, temps = int(stats.argument_size_in_bytes), int(stats.temp_size_in_bytes)
  outputs, alias = int(stats.output_size_in_bytes), int(stats.alias_size_in_bytes)
  code = int(stats.generated_code_size_in_bytes)
  flops, accessed, seconds, note = _cost(compiled, topology)
  return StepResult(**common, compiled=True, argument_bytes=arguments, temp_bytes=temps,
                    output_bytes=outputs, alias_bytes=alias, code_bytes=code,
                    program_bytes=arguments + outputs - alias + temps, flops=flops,
                    bytes_accessed=accessed, seconds=seconds, seconds_note=note,
                    compile_seconds=seconds_taken)


def gib(n: Optional[float]) -> str:
  """n bytes as GiB with 2 decimals ("-" for None)."""
  return "-" if n is None else f"{n / GIB:.2f}"
