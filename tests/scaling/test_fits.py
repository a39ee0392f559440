"""Cost-model and N*(B) fits on synthetic data with known coefficients."""

import math

import numpy as np
import pytest

from rlscale.scaling import fits


def test_generation_fit_and_end_of_bandwidth_bound_regime():
  # t = 2 s per step of fixed (weight-reading) cost + 0.01 s per row: per-row work equals the
  # fixed cost at B = 200.
  rows = np.asarray([8, 16, 32, 64, 128, 256])
  line = fits.fit_line(rows, 2.0 + 0.01 * rows)
  assert line.intercept == pytest.approx(2.0)
  assert line.slope == pytest.approx(0.01)
  assert line.r2 == pytest.approx(1.0)
  assert fits.bandwidth_bound_until(line) == pytest.approx(200.0)
  assert fits.bandwidth_bound_until(fits.Line(0.0, 1.0, 1.0)) is None


def test_fit_line_needs_two_distinct_x():
  with pytest.raises(ValueError, match="2 distinct"):
    fits.fit_line([4, 4], [1.0, 2.0])


def test_samples_to_target_fit_recovers_n_min_and_b_noise():
  batches = np.asarray([64, 128, 256, 512])
  n = 1000 * (1 + batches / 256)
  fit = fits.fit_samples_to_target(batches, n)
  assert fit.n_min == pytest.approx(1000)
  assert fit.b_noise == pytest.approx(256)
  assert fits.fit_samples_to_target([64, 128], [500, 400]).b_noise == math.inf


def test_time_optimal_batch_matches_a_brute_force_minimum():
  step = fits.Line(2.0, 0.01, 1.0)  # t(B) = 2 + 0.01 B seconds per step
  noise = fits.NoiseFit(1000.0, 256.0, 1.0)
  best = fits.time_optimal_batch(step, noise)
  grid = np.linspace(1, 5000, 200_000)
  time_to_target = noise(grid) * step(grid) / grid
  assert best == pytest.approx(math.sqrt(2.0 * 256 / 0.01))
  assert best == pytest.approx(grid[np.argmin(time_to_target)], rel=1e-3)
  assert fits.time_optimal_batch(step, fits.NoiseFit(1.0, math.inf, 1.0)) == math.inf


def test_cost_line_text_signs_too_few_points_and_unphysical_slopes():
  # The newcomer's case: 2 batch sizes, step time falling with B.
  two = fits.fit_line([4, 8], [3.13 - 0.299 * 4, 3.13 - 0.299 * 8])
  assert two.n_points == 2 and not fits.fit_is_usable(two)
  assert fits.cost_line_text(two) == "too few batch sizes to fit (n=2)"
  falling = fits.fit_line([4, 8, 16], [3.13 - 0.299 * b for b in (4, 8, 16)])
  assert fits.cost_line_text(falling).startswith("3.13 s - 0.299 s x B (negative per-row cost: "
                                                 "not physical")
  rising = fits.fit_line([8, 16, 32], [2.0 + 0.01 * b for b in (8, 16, 32)])._asdict()
  assert fits.fit_is_usable(rising) and fits.cost_line_text(rising) == "2 s + 0.01 s x B"


def test_superlinear_samples_to_target_is_described_not_reported_as_batch_zero():
  # N* = 100, 600, 2000 at B = 16, 32, 64: the fitted line has a negative intercept, so
  # fits gives B_noise = 0 and the optimum is below every batch tried (was printed as "0").
  noise = fits.fit_samples_to_target([16, 32, 64], [100, 600, 2000])
  assert noise.b_noise == 0.0 and noise.n_min == 0.0
  best = fits.time_optimal_batch(fits.Line(0.1, 0.01, 1.0), noise)
  assert best == 0.0
  assert fits.describe_optimal_batch(best).startswith("smaller than any tried")
  assert fits.describe_optimal_batch(math.inf).startswith("larger than any tried")
  assert fits.describe_optimal_batch(12.5) == 12.5
  assert fits.describe_optimal_batch(None) is None
