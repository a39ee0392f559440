"""Optimizer: LR scaling rules, Adam adjustment, schedules read back from the optax state."""

import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from rlscale.train import optimizer as opt_lib


def _optim(**fields):
  cfg = ml_collections.ConfigDict(dict(
      optimizer="adam", learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
      grad_clip_norm=1.0, schedule="constant", warmup_steps=0, final_lr_frac=0.0,
      lr_scaling="none", reference_batch=64, adjust_adam=False))
  cfg.update(fields)
  return cfg


@pytest.mark.parametrize("scaling, batch, expected", [
    ("none", 256, 1e-3), ("linear", 256, 4e-3), ("sqrt", 256, 2e-3), ("sqrt", 16, 5e-4),
    ("linear", 64, 1e-3)])
def test_lr_scaling(scaling, batch, expected):
  assert opt_lib.scaled_learning_rate(_optim(lr_scaling=scaling), batch) == pytest.approx(expected)


def test_lr_scaling_errors():
  with pytest.raises(ValueError, match=r"optim.lr_scaling='cube' is not one of \['none', 'linear', 'sqrt'\]"):
    opt_lib.scaled_learning_rate(_optim(lr_scaling="cube"), 64)
  with pytest.raises(ValueError, match="optim.learning_rate must be > 0"):
    opt_lib.scaled_learning_rate(_optim(learning_rate=0.0), 64)
  with pytest.raises(ValueError, match="optim.reference_batch must be > 0"):
    opt_lib.scaled_learning_rate(_optim(reference_batch=0), 64)


def test_adam_adjustment():
  assert opt_lib.adam_hyperparams(_optim(), 256) == {"b1": 0.9, "b2": 0.999, "eps": 1e-8}
  out = opt_lib.adam_hyperparams(_optim(adjust_adam=True), 256)  # k = 4
  assert out["b1"] == pytest.approx(0.6) and out["b2"] == pytest.approx(0.996)
  assert out["eps"] == pytest.approx(5e-9)
  edge = opt_lib.adam_hyperparams(_optim(adjust_adam=True), 64 * 9)  # k = 9: k (1 - b1) = 0.9
  assert edge["b1"] == pytest.approx(0.1) and edge["b2"] == pytest.approx(0.991)
  small = opt_lib.adam_hyperparams(_optim(adjust_adam=True, b2=0.99999), 32)  # k = 1/2
  assert small["b1"] == pytest.approx(0.95) and small["b2"] == 0.99999


@pytest.mark.parametrize("batch, fields, name, bound", [
    (64 * 10, {}, "b1", "k < 10"),  # k (1 - 0.9) = 1: was silently clamped to b1 = 0
    (64 * 20, {}, "b1", "k < 10"),  # k (1 - 0.9) = 2
    (64 * 4, {"b1": 0.5, "b2": 0.5}, "b1", "k < 2"),
    (64 * 4, {"b1": 0.9, "b2": 0.5}, "b2", "k < 2"),
])
def test_adam_adjustment_outside_the_rule_is_refused(batch, fields, name, bound):
  with pytest.raises(ValueError, match=rf"optim\.{name}.*>= 1.*{bound}"):
    opt_lib.adam_hyperparams(_optim(adjust_adam=True, **fields), batch)


@pytest.mark.parametrize("schedule, at_end", [("constant", 1.0), ("cosine", 0.1), ("linear", 0.1)])
def test_schedule_warmup_and_decay(schedule, at_end):
  fn = opt_lib.make_schedule(2.0, schedule=schedule, warmup_steps=4, total_steps=14, final_lr_frac=0.1)
  np.testing.assert_allclose([fn(0), fn(1), fn(3)], [0.5, 1.0, 2.0], rtol=1e-6)  # warmup
  np.testing.assert_allclose(fn(4), 2.0, rtol=1e-6)  # decay starts at the peak
  np.testing.assert_allclose([fn(14), fn(100)], [2.0 * at_end] * 2, rtol=1e-6)
  halfway = {"constant": 2.0, "cosine": 2.0 * (0.1 + 0.9 * 0.5), "linear": 2.0 * (1 - 0.9 * 0.5)}
  np.testing.assert_allclose(fn(9), halfway[schedule], rtol=1e-6)


def test_schedule_errors():
  with pytest.raises(ValueError, match=r"optim.schedule='step' is not one of"):
    opt_lib.make_schedule(1.0, schedule="step", warmup_steps=0, total_steps=10)
  with pytest.raises(ValueError, match="optim.warmup_steps must be in"):
    opt_lib.make_schedule(1.0, schedule="cosine", warmup_steps=11, total_steps=10)


def _run(tx, steps, grad=1.0):
  params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
  state = tx.init(params)
  lrs = []
  for _ in range(steps):
    grads = {"w": jnp.full((2, 2), grad), "b": jnp.full(2, grad)}
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    lrs.append(float(opt_lib.current_learning_rate(state)))
  return params, lrs


def test_optimizer_logs_scheduled_scaled_lr():
  cfg = _optim(schedule="linear", warmup_steps=2, lr_scaling="sqrt", final_lr_frac=0.0)
  tx = opt_lib.make_optimizer(cfg, batch_size=256, total_steps=6)  # peak 2e-3
  _, lrs = _run(tx, 7)
  np.testing.assert_allclose(lrs, [1e-3, 2e-3, 2e-3, 1.5e-3, 1e-3, 5e-4, 0.0], rtol=1e-5, atol=1e-12)


def test_first_adam_step_moves_by_lr():
  # Adam's first update is -lr * sign(g) whatever the gradient's size (bias-corrected moments).
  tx = opt_lib.make_optimizer(_optim(), batch_size=64, total_steps=10)
  params, _ = _run(tx, 1, grad=100.0)
  np.testing.assert_allclose(params["w"], 1.0 - 1e-3, rtol=1e-6)


def test_matches_optax_reference_chain_with_clipping():
  tx = opt_lib.make_optimizer(_optim(grad_clip_norm=0.5), batch_size=64, total_steps=10)
  reference = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(1e-3, b1=0.9, b2=0.999, eps=1e-8))
  unclipped = optax.adam(1e-3, b1=0.9, b2=0.999, eps=1e-8)
  params = {"w": jnp.ones(3)}
  states = [t.init(params) for t in (tx, reference, unclipped)]
  outs = [params] * 3
  for g in (100.0, 0.01, 3.0):  # gradient norms far from and below the threshold
    grads = {"w": jnp.array([g, -2 * g, 0.5])}
    for i, t in enumerate((tx, reference, unclipped)):
      updates, states[i] = t.update(grads, states[i], outs[i])
      outs[i] = optax.apply_updates(outs[i], updates)
  np.testing.assert_allclose(outs[0]["w"], outs[1]["w"], rtol=1e-6)
  assert np.max(np.abs(outs[0]["w"] - outs[2]["w"])) > 1e-5  # clipping changed the result


def test_adamw_decays_matrices_only():
  tx = opt_lib.make_optimizer(_optim(optimizer="adamw", weight_decay=0.5, grad_clip_norm=0.0),
                              batch_size=64, total_steps=10)
  params, _ = _run(tx, 1, grad=0.0)
  # Zero gradient: Adam's step is 0; the decay moves w by -lr * wd * w, not the bias.
  np.testing.assert_allclose(params["w"], 1.0 - 1e-3 * 0.5, rtol=1e-6)
  np.testing.assert_allclose(params["b"], 1.0)


def test_optimizer_errors():
  with pytest.raises(ValueError, match=r"optim.optimizer='sgd' is not one of \['adam', 'adamw'\]"):
    opt_lib.make_optimizer(_optim(optimizer="sgd"), batch_size=64, total_steps=10)
  with pytest.raises(ValueError, match="optim.weight_decay needs optim.optimizer='adamw'"):
    opt_lib.make_optimizer(_optim(weight_decay=0.1), batch_size=64, total_steps=10)
  with pytest.raises(ValueError, match="no injected learning_rate"):
    opt_lib.current_learning_rate(optax.adam(1e-3).init({"w": jnp.ones(1)}))
