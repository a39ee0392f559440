"""The tuned LR between grid points and its exponent against batch: values by hand."""

import math

import numpy as np
import pytest

from rlscale.scaling import decision, tuned_lr


def test_parabola_vertex_by_hand():
  # Through (0, 3), (1, 1), (2, 2): y = 1.5 x^2 - 3.5 x + 3, vertex 3.5 / 3.
  assert tuned_lr.parabola_vertex([0, 1, 2], [3, 1, 2]) == pytest.approx(3.5 / 3)
  # Only the best point's neighbours count: a far fourth point changes nothing.
  assert tuned_lr.parabola_vertex([0, 1, 2, 3], [3, 1, 2, 0.5 + 1]) == pytest.approx(3.5 / 3)
  # Best at an edge: not bracketed.
  assert tuned_lr.parabola_vertex([0, 1, 2], [1, 2, 3]) is None
  with pytest.raises(ValueError, match="3\\+ LRs"):
    tuned_lr.parabola_vertex([0, 1], [1, 2])


def rows_for(n_star):
  """Rows from {(batch, lr, seed): N*}."""
  return [{"batch_size": b, "learning_rate": lr, "seed_key": [0, s], "samples_lower_bound": n}
          for (b, lr, s), n in n_star.items()]


def exact_parabola_rows(alpha, seeds=(0, 1, 2)):
  """log N* = 10 + (log lr - log lr*(B))^2 with lr*(B) = 1e-4 (B / 256)^alpha, on a factor-2 grid
  around 1e-4 sqrt(B / 256): the vertex is exact, so the exponent is alpha."""
  n = {}
  for b in (64, 256, 1024):
    centre = 1e-4 * math.sqrt(b / 256)
    best = 1e-4 * (b / 256) ** alpha
    for m in (0.5, 1.0, 2.0):
      lr = centre * m
      n[(b, lr, 0)] = math.exp(10 + (math.log(lr) - math.log(best)) ** 2)
  return rows_for({(b, lr, s): v for (b, lr, _), v in n.items() for s in seeds})


def test_exponent_of_exact_parabolas_with_identical_seeds():
  entry = tuned_lr.lr_exponent(exact_parabola_rows(0.3), reference_batch=256)
  assert entry["batches"] == [64, 256, 1024] and entry["n_seed_keys"] == 3
  assert entry["optima"]["256"] == pytest.approx(1e-4)
  assert entry["exponent"] == pytest.approx(0.3)
  # Identical seeds: every jackknife replicate equals the estimate, so the interval is a point.
  assert entry["ci"] == pytest.approx([0.3, 0.3])


def vertex_equal_spacing(x0, h, c_minus, c0, c_plus):
  """Vertex of the parabola through three equally spaced points (closed form)."""
  return x0 - h / 2 * (c_plus - c_minus) / (c_plus - 2 * c0 + c_minus)


def test_jackknife_interval_by_hand():
  # Three seeds, LRs 1, 2, 4 (x 1e-4) at every batch, noisy N* per seed.
  lrs = (1e-4, 2e-4, 4e-4)
  table = {  # batch: {seed: N* at the three LRs}
      64: {0: (300, 100, 400), 1: (200, 150, 300), 2: (250, 90, 500)},
      256: {0: (500, 200, 300), 1: (400, 180, 260), 2: (450, 240, 200)},
      1024: {0: (900, 300, 380), 1: (800, 320, 350), 2: (700, 280, 420)},
  }
  n_star = {(b, lr, s): v[i] for b, by_seed in table.items() for s, v in by_seed.items()
            for i, lr in enumerate(lrs)}
  entry = tuned_lr.lr_exponent(rows_for(n_star), reference_batch=256)

  h = math.log(2)

  def optimum(batch, seeds):
    c = [math.log(np.mean([table[batch][s][i] for s in seeds])) for i in range(3)]
    assert c[1] < min(c[0], c[2])  # the middle LR is best on every subset: bracketed
    return vertex_equal_spacing(math.log(2e-4), h, *c)

  def slope(seeds):
    # Three batches equally spaced in log B (factor 4): the least-squares slope is end to end.
    return (optimum(1024, seeds) - optimum(64, seeds)) / math.log(16)

  full = slope((0, 1, 2))
  reps = [slope([s for s in (0, 1, 2) if s != out]) for out in (0, 1, 2)]
  se = math.sqrt(2 / 3 * sum((r - np.mean(reps)) ** 2 for r in reps))
  half = decision.t_quantile(2) * se
  assert entry["exponent"] == pytest.approx(full)
  assert entry["ci"] == pytest.approx([full - half, full + half])


def test_no_exponent_without_three_bracketed_batches():
  rows = [r for r in exact_parabola_rows(0.3) if r["batch_size"] != 1024]
  entry = tuned_lr.lr_exponent(rows, reference_batch=256)
  assert entry["exponent"] is None and "2 batch(es)" in entry["note"]
  # An optimum past the grid's top at B = 1024 (alpha = 2): unbracketed there.
  entry = tuned_lr.lr_exponent(exact_parabola_rows(2.0), reference_batch=256)
  assert 1024 in entry["unbracketed_batches"] and entry["exponent"] is None


def test_a_replicate_whose_best_lr_leaves_the_grid_takes_the_edge_lr():
  lrs = (1e-4, 2e-4, 4e-4)
  # B = 64 and 1024: the same N* for every seed; B = 256: seed 0 alone makes the middle LR best.
  same = {64: (200, 100, 300), 1024: (300, 100, 200)}
  at_256 = {0: (300, 100, 300), 1: (200, 250, 150), 2: (200, 250, 150)}
  n_star = {(b, lr, s): v[i] for b, v in same.items() for s in range(3) for i, lr in enumerate(lrs)}
  n_star.update({(256, lr, s): v[i] for s, v in at_256.items() for i, lr in enumerate(lrs)})
  entry = tuned_lr.lr_exponent(rows_for(n_star), reference_batch=256)
  h = math.log(2)

  def vertex(costs):
    return vertex_equal_spacing(math.log(2e-4), h, *[math.log(c) for c in costs])

  opt64, opt1024 = vertex(same[64]), vertex(same[1024])
  # All seeds at B = 256: means 233.3, 200, 200 -> the middle (first minimum) is best.
  opt256 = vertex([np.mean([at_256[s][i] for s in range(3)]) for i in range(3)])
  x = np.log([64 / 256, 1, 4])
  full = np.polyfit(x, [opt64, opt256, opt1024], 1)[0]
  # Without seed 0, B = 256's best is the top LR (150 < 200 < 250): that replicate takes 4e-4.
  reps = [np.polyfit(x, [opt64, math.log(4e-4), opt1024], 1)[0]]
  for out in (1, 2):
    kept = [s for s in range(3) if s != out]
    reps.append(np.polyfit(x, [opt64, vertex([np.mean([at_256[s][i] for s in kept])
                                              for i in range(3)]), opt1024], 1)[0])
  half = decision.t_quantile(2) * math.sqrt(2 / 3 * sum((r - np.mean(reps)) ** 2 for r in reps))
  assert entry["exponent"] == pytest.approx(full)
  assert entry["replicates_at_grid_edge"] == 1 and "too narrow" in entry["note"]
  assert entry["ci"] == pytest.approx([full - half, full + half])
