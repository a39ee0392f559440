"""B_simple from synthetic squared gradient norms with a known answer."""

import numpy as np
import pytest

from rlscale.scaling import noise_scale


def test_unbiased_estimates_recover_known_gradient_and_trace():
  # |G|^2 = 4, tr(Sigma) = 64: E|g_B|^2 = 4 + 64 / B -> 12 at B = 8, 6 at B = 32.
  grad_sq, trace = noise_scale.unbiased_estimates(12.0, 6.0, 8, 32)
  assert grad_sq == pytest.approx(4.0)
  assert trace == pytest.approx(64.0)


def test_b_simple_of_noiseless_norms_is_trace_over_gradient():
  n = 5
  b = noise_scale.b_simple(np.full(n, 12.0), np.full(n, 6.0), np.full(n, 8), np.full(n, 32))
  np.testing.assert_allclose(b, 16.0)


def test_ema_smooths_the_parts_before_dividing():
  # Step 1: (|G|^2, tr) = (4, 64); step 2: (12, 64) -> EMA with decay 0.5 and bias correction:
  # |G|^2: 4, then (0.5 * 0.5 * 4 + 0.5 * 12) / 0.75 = 9.333; tr stays 64. B_simple 16, 6.857.
  g_small = np.asarray([4 + 64 / 8, 12 + 64 / 8])
  g_big = np.asarray([4 + 64 / 32, 12 + 64 / 32])
  b = noise_scale.b_simple(g_small, g_big, [8, 8], [32, 32], decay=0.5)
  np.testing.assert_allclose(b, [16.0, 64 / (28 / 3)])


def test_ema_of_a_constant_is_the_constant():
  np.testing.assert_allclose(noise_scale.ema([3.0, 3.0, 3.0], 0.9), 3.0)
  with pytest.raises(ValueError, match="decay"):
    noise_scale.ema([1.0], 1.0)


def test_equal_batch_sizes_are_rejected():
  with pytest.raises(ValueError, match="microbatches"):
    noise_scale.unbiased_estimates(1.0, 1.0, 32, 32)


def test_pooled_noise_scale_keeps_a_noise_dominated_window():
  # B_small 8, B_big 32. Step 1: |g_small|^2 12, |g_big|^2 6 -> |G|^2 4, tr 64.
  # Step 2: 10, 9 -> |G|^2 (32 x 9 - 8 x 10) / 24 = 26/3, tr (10 - 9) / (1/8 - 1/32) = 32/3.
  pooled = noise_scale.pooled_b_simple([12.0, 10.0], [6.0, 9.0], [8.0, 8.0], [32.0, 32.0])
  assert pooled.b_simple == pytest.approx((64 + 32 / 3) / (4 + 26 / 3)) and pooled.steps == 2
  # A window where the |G|^2 estimates sum below 0 (noise dominates): inf, not dropped.
  # |g_small|^2 20, |g_big|^2 4: |G|^2 (128 - 160) / 24 = -4/3 < 0.
  noisy = noise_scale.pooled_b_simple([20.0, 20.0], [4.0, 4.0], [8.0, 8.0], [32.0, 32.0])
  assert noisy.b_simple == float("inf") and noisy.ci == (float("inf"), float("inf"))
  one = noise_scale.pooled_b_simple([12.0], [6.0], [8.0], [32.0])
  assert one.b_simple == pytest.approx(16.0) and one.ci is None
