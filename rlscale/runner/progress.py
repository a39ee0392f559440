"""What the terminal shows while RL runs: a progress bar whose rate and ETA leave out JAX
compilation, and a line for each compilation in the middle of a run.

JAX compiles the sampler and the update step during the first step (10-30 s on a CPU) and again
whenever the update step first meets a batch shape (the trained widths are bucketed,
`rlscale.runner.batching.train_widths`) or the first evaluation runs. tqdm's own rate averages
wall seconds, so after a compiling first step it would extrapolate that step to the whole run
(an ETA of hours for a two-minute run) and a mid-run compile would read as a stall.
"""

from __future__ import annotations

from typing import Mapping

import tqdm

# A step whose compilation took at least this many seconds is announced (a JAX compile of a small
# function takes well under a second; the update step's takes seconds).
COMPILE_NOTICE_SECONDS = 1.0


class StepBar(tqdm.tqdm):
  """tqdm bar over RL steps whose rate (steps per second) and ETA count only the seconds that
  were not spent compiling: `step_done(record)` advances it by one step with that step's metrics
  record (`time/total`, `time/compile` in seconds). Until a step is done it shows `?` as tqdm
  does. Elapsed time stays wall time."""

  def __init__(self, *args, **kwargs):
    self.executed_seconds = 0.0  # seconds of the steps done in this process, compilation excluded
    self.steps_done = 0
    super().__init__(*args, **kwargs)

  def step_done(self, record: Mapping[str, float]) -> None:
    """Counts one finished step: its `time/total` less its `time/compile` seconds."""
    self.executed_seconds += max(0.0, record["time/total"] - record.get("time/compile", 0.0))
    self.steps_done += 1
    self.update(1)

  @property
  def format_dict(self):
    """tqdm's fields with `rate` = steps done / their seconds without compilation (tqdm derives
    the ETA, `remaining`, from it); tqdm's own rate before the first step."""
    fields = super().format_dict
    if self.steps_done and self.executed_seconds > 0:
      fields["rate"] = self.steps_done / self.executed_seconds
    return fields


def accuracy_postfix(accuracy: float | None) -> str:
  """The bar's `acc` field: the last held-out greedy accuracy (the warm start's before the first
  in-run evaluation) to 3 decimals, `-` when none is known."""
  return "-" if accuracy is None else f"{accuracy:.3f}"


def compile_notice(step: int, seconds: float, new_shapes: list[str]) -> str:
  """The line announcing that step `step` (1-based) spent `seconds` compiling, naming what was new
  (e.g. "update step at prompt 12 x response 6 tokens", "first held-out evaluation")."""
  what = "; ".join(new_shapes) if new_shapes else "a function first called at this step"
  return (f"step {step}: {seconds:.1f} s of JAX compilation ({what}); logged as time/compile, "
          "shaded on curves_vs_wall_time.png and left out of the ETA")
