"""Honest timers (issue 13 item 8): compilation apart from execution, parts summing to wall/total."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlscale.runner import timing


def test_compile_seconds_are_the_union_of_the_spans_by_hand():
  log = timing.CompileLog()
  for span in [(0.5, 1.0), (0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]:  # (0.5, 1) nested in (0, 2)
    log.record("/jax/core/compile/backend_compile_duration", *span)
  log.record("/jax/other/event", 7.0, 9.0)  # not a compile event
  assert log.seconds_between(0.0, 10.0) == pytest.approx(3.0 + 1.0)
  assert log.seconds_between(2.5, 5.5) == pytest.approx(0.5 + 0.5)
  assert log.seconds_between(3.0, 5.0) == 0.0


def _fresh_function():
  """A jitted function JAX has not compiled yet (a new closure each call)."""
  scale = np.float32(np.random.rand())

  def f(x):
    for _ in range(20):  # enough ops that compiling takes a measurable time
      x = jnp.tanh(x * scale) + jnp.sin(x)
    return x.sum()

  return jax.jit(f)


def test_first_call_is_compile_and_later_calls_are_execution():
  f = _fresh_function()
  x, y = jnp.ones((8,)), jnp.ones((9,))
  clock = timing.RunClock()  # compile counts from here: every compilation, timed block or not
  t0 = time.perf_counter()
  with clock.measure("training"):
    f(x).block_until_ready()
  first = time.perf_counter() - t0
  compiled = clock.totals["compile"]
  assert compiled > 0.5 * first  # most of a first call is compilation
  assert clock.totals["training"] + compiled == pytest.approx(first, abs=0.01)
  with clock.measure("training"):
    f(x).block_until_ready()  # same shape: no compilation
  assert clock.totals["compile"] == pytest.approx(compiled)
  with clock.measure("generation"):
    f(y).block_until_ready()  # a new shape (like a new prompt bucket) recompiles
  assert clock.totals["compile"] > compiled


def test_record_parts_sum_to_the_total_and_resume_continues():
  clock = timing.RunClock()
  with clock.measure("reward"):
    time.sleep(0.02)
  clock.record(interval=False)
  with clock.measure("checkpointing"):
    time.sleep(0.01)
  time.sleep(0.01)  # in no part: other
  record = clock.record()
  parts = sum(record[f"wall/{p}"] for p in timing.PARTS) + record["wall/other"]
  assert parts == pytest.approx(record["wall/total"])
  assert record["time/checkpointing"] >= 0.01 and record["time/reward"] == 0.0
  assert record["time/other"] >= 0.009
  assert sum(record[f"time/{p}"] for p in (*timing.PARTS, "other")) == pytest.approx(
      record["time/total"])
  resumed = timing.RunClock()
  resumed.resume({"reward": 2.0, "compile": 3.0}, wall_offset=10.0)  # no checkpointing: older
  assert resumed.totals["reward"] == 2.0 and resumed.totals["checkpointing"] == 0.0
  assert resumed.totals["compile"] == pytest.approx(3.0, abs=0.01)
  assert resumed.wall_seconds() >= 10.0
  with pytest.raises(ValueError, match="compile"):
    with clock.measure("compile"):
      pass
