"""Optimizer: LR scaling rules, Adam adjustment, schedules read back from the optax state."""

import re

import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from experiments.configs.default import get_config
from rlscale.train import optimizer as opt_lib
from rlscale.train import update as update_lib
from tests.train import update_problem as problem


def _optim(**fields):
  cfg = ml_collections.ConfigDict(dict(
      optimizer="adam", learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
      grad_clip_norm=1.0, schedule="constant", warmup_steps=0, final_lr_frac=0.0,
      lr_scaling="none", reference_batch=64, adjust_adam=False))
  cfg.update(fields)
  return cfg


@pytest.mark.parametrize("scaling, batch, expected", [
    ("none", 256, 1e-3), ("linear", 256, 4e-3), ("sqrt", 256, 2e-3), ("sqrt", 16, 5e-4),
    ("linear", 64, 1e-3), ("sqrt_adam", 256, 2e-3), ("sqrt_adam", 16, 5e-4)])
def test_lr_scaling(scaling, batch, expected):
  assert opt_lib.scaled_learning_rate(_optim(lr_scaling=scaling), batch) == pytest.approx(expected)


def test_lr_scaling_errors():
  with pytest.raises(ValueError, match=r"optim.lr_scaling='cube' is not one of \['none', 'linear', 'sqrt', 'sqrt_adam'\]"):
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


def test_sqrt_adam_is_sqrt_with_the_adam_adjustment():
  # k = 256 / 64 = 4: lr 1e-3 x sqrt(4); b1 = 1 - 4 (1 - 0.9) = 0.6, b2 = 1 - 4 x 0.001 = 0.996,
  # eps = 1e-8 / sqrt(4) = 5e-9. Plain sqrt keeps the config's betas and eps.
  rule = _optim(lr_scaling="sqrt_adam")
  assert opt_lib.adam_hyperparams(_optim(lr_scaling="sqrt"), 256) == {"b1": 0.9, "b2": 0.999,
                                                                      "eps": 1e-8}
  out = opt_lib.adam_hyperparams(rule, 256)
  assert out["b1"] == pytest.approx(0.6) and out["b2"] == pytest.approx(0.996)
  assert out["eps"] == pytest.approx(5e-9)
  # At the reference batch (k = 1) nothing changes, bit for bit.
  assert opt_lib.adam_hyperparams(rule, 64) == {"b1": 0.9, "b2": 0.999, "eps": 1e-8}
  # The optimizer equals optax's Adam at those values over a few updates.
  tx = opt_lib.make_optimizer(_optim(lr_scaling="sqrt_adam", grad_clip_norm=0.0), batch_size=256,
                              total_steps=10)
  reference = optax.adam(2e-3, b1=0.6, b2=0.996, eps=5e-9)
  params = ref_params = {"w": jnp.ones(3)}
  state, ref_state = tx.init(params), reference.init(params)
  for g in (1.0, -0.5, 2.0):
    grads = {"w": jnp.array([g, 3 * g, 1e-3])}
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    ref_updates, ref_state = reference.update(grads, ref_state, ref_params)
    ref_params = optax.apply_updates(ref_params, ref_updates)
  np.testing.assert_allclose(params["w"], ref_params["w"], rtol=1e-6)


def test_sqrt_adam_outside_the_rule_names_the_rule():
  # k = 640 / 64 = 10: k (1 - 0.9) = 1.
  with pytest.raises(ValueError, match=r"^optim.lr_scaling='sqrt_adam': batch 640 .*optim\.b1.*"
                                       r"k < 10.*or optim.lr_scaling='sqrt'$"):
    opt_lib.adam_hyperparams(_optim(lr_scaling="sqrt_adam"), 640)
  with pytest.raises(ValueError, match=r"^optim.adjust_adam: batch 640 .*optim.adjust_adam=False$"):
    opt_lib.adam_hyperparams(_optim(lr_scaling="sqrt_adam", adjust_adam=True), 640)


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


def test_decay_steps_is_the_horizon_in_steps():
  # warmup 2, horizon D = 10 updates (the run has 6): p = (c - 2) / 8, linear to 0 at c = 10.
  fn = opt_lib.make_schedule(2.0, schedule="linear", warmup_steps=2, total_steps=6, decay_steps=10)
  np.testing.assert_allclose([fn(0), fn(1), fn(4), fn(5), fn(10)],
                             [1.0, 2.0, 2.0 * (1 - 2 / 8), 2.0 * (1 - 3 / 8), 0.0], atol=1e-6)
  default = opt_lib.make_schedule(2.0, schedule="linear", warmup_steps=2, total_steps=6)
  explicit = opt_lib.make_schedule(2.0, schedule="linear", warmup_steps=2, total_steps=6,
                                   decay_steps=6)
  assert [float(default(c)) for c in range(8)] == [float(explicit(c)) for c in range(8)]
  # The default config (unit "steps", no horizon) keeps the old formula at every update: cosine
  # over total_steps from update 0, 1e-4 (1 + cos(pi min(c / 8, 1))) / 2.
  _, lrs = _run(opt_lib.make_optimizer(get_config().optim, batch_size=256, total_steps=8), 9)
  np.testing.assert_allclose(lrs, [1e-4 * 0.5 * (1 + np.cos(np.pi * min(c / 8, 1))) for c in range(9)],
                             rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("schedule, expected", [
    # W = 128, D = 1,152 responses, B = 64, one update per step: s(c) = (c + 1) * 64.
    # c = 0: s = 64, warmup 64 / 128 = 0.5; c = 1: s = 128, the peak; c = 8: s = 576,
    # p = (576 - 128) / 1,024 = 0.4375; c = 17: s = 1,152 = D, p = 1 (f = 0.1).
    ("linear", [1.0, 2.0, 2.0 * (1 - 0.9 * 0.4375), 0.2]),
    ("cosine", [1.0, 2.0, 2.0 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 0.4375))), 0.2]),
    ("constant", [1.0, 2.0, 2.0, 2.0]),
])
def test_sample_schedule_by_hand(schedule, expected):
  fn = opt_lib.make_sample_schedule(2.0, schedule=schedule, warmup_samples=128, decay_samples=1152,
                                    step_samples=64, final_lr_frac=0.1)
  np.testing.assert_allclose([fn(0), fn(1), fn(8), fn(17)], expected, rtol=1e-6)


def test_sample_schedule_gives_every_update_of_a_step_its_responses():
  # PPO, 2 epochs x 2 minibatches = 4 updates per RL step of B = 64 responses: updates 0-3 see
  # s = 64 (warmup 64 / 128 = 0.5), updates 4-7 see s = 128 (the peak).
  fn = opt_lib.make_sample_schedule(2.0, schedule="linear", warmup_samples=128, decay_samples=640,
                                    step_samples=64, updates_per_step=4)
  # Update 8 opens RL step 2: s = 192, p = (192 - 128) / (640 - 128) = 0.125, 2 (1 - 0.125).
  np.testing.assert_allclose([fn(c) for c in range(9)], [1.0] * 4 + [2.0] * 4 + [1.75], rtol=1e-6)


def _lr_at_samples(optim, rl, samples, total_samples):
  """The LR of the update that brings the run to each response count in `samples`, read back from
  the optax state of `make_optimizer` built with `update.optimizer_args`."""
  from rlscale.runner.validate import resolve_total_steps  # pylint: disable=g-import-not-at-top
  batch = rl.prompts_per_step * rl.group_size
  train = ml_collections.ConfigDict({"total_steps": None, "total_samples": total_samples})
  args = update_lib.optimizer_args(rl, resolve_total_steps(train, batch), total_samples)
  _, lrs = _run(opt_lib.make_optimizer(optim, **args), max(samples) // batch)
  return [lrs[s // batch - 1] for s in samples]


@pytest.mark.parametrize("unit", ["samples", "steps"])
def test_samples_unit_gives_every_batch_size_the_same_lr_at_the_same_responses(unit):
  # Cosine over a budget of 8,192 responses, warmup 256 responses, at B = 64 and B = 512.
  warmup = {"warmup_samples": 256} if unit == "samples" else {"warmup_steps": 4}
  optim = _optim(schedule="cosine", schedule_unit=unit, decay_samples=None, decay_steps=None,
                 **{"warmup_samples": 0, "warmup_steps": 0, **warmup})
  small, large = (problem.rl_config("grpo", prompts=p, group=8) for p in (8, 64))
  points = [512, 1024, 4096]
  lr_small = _lr_at_samples(optim, small, points, 8192)
  lr_large = _lr_at_samples(optim, large, points, 8192)
  if unit == "samples":
    # lr = 1e-3 (1 + cos(pi (s - 256) / 7,936)) / 2 for both (s >= 256: warmup done).
    expected = [1e-3 * 0.5 * (1 + np.cos(np.pi * (s - 256) / 7936)) for s in points]
    np.testing.assert_allclose(lr_small, expected, rtol=1e-5)
    np.testing.assert_allclose(lr_large, expected, rtol=1e-5)
  else:
    # Steps: at 512 responses B = 64 is at update 7 of 128 (warmup done), B = 512 at update 0
    # of 16 (warmup 1 / 4 of the peak).
    assert lr_large[0] == pytest.approx(1e-3 / 4)
    assert lr_small[0] == pytest.approx(1e-3 * 0.5 * (1 + np.cos(np.pi * 3 / 124)), rel=1e-5)
    assert all(abs(a - b) > 1e-6 for a, b in zip(lr_small, lr_large))


@pytest.mark.parametrize("fields, message", [
    ({"schedule_unit": "epochs"}, r"optim.schedule_unit='epochs' is not one of \['steps', 'samples'\]"),
    ({"schedule_unit": "samples", "warmup_samples": 2048, "decay_samples": 1024},
     r"optim.warmup_samples=2048 must be <= the decay horizon optim.decay_samples=1024"),
    ({"schedule_unit": "samples", "warmup_samples": 4096},  # budget 10 x 256 = 2,560
     r"optim.warmup_samples=4096 must be <= the decay horizon optim.decay_samples=2560"),
    ({"schedule_unit": "samples", "warmup_samples": -1}, r"optim.warmup_samples must be an int >= 0"),
    ({"schedule_unit": "samples", "decay_samples": 0}, r"optim.decay_samples must be an int >= 1"),
    ({"schedule_unit": "samples", "warmup_steps": 10}, r"optim.warmup_steps=10 .* count optimizer"),
    ({"schedule_unit": "samples", "decay_steps": 10}, r"optim.decay_steps=10 count optimizer"),
    ({"warmup_samples": 64}, r"optim.warmup_samples=64 .* count responses"),
    ({"decay_steps": 0}, r"optim.decay_steps must be an int >= 1"),
    ({"decay_steps": 3, "warmup_steps": 5}, r"optim.warmup_steps must be in \[0, optim.decay_steps=3\]"),
])
def test_schedule_field_errors(fields, message):
  cfg = _optim(schedule_unit="steps", decay_steps=None, warmup_samples=0, decay_samples=None)
  cfg.update(fields)
  with pytest.raises(ValueError, match=message):
    opt_lib.make_optimizer(cfg, batch_size=256, total_steps=10, step_samples=256)


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


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("lr", [NAN, INF, -INF, 0.0, -1e-4, None])
def test_learning_rate_must_be_positive_and_finite(lr):
  # NaN fails every comparison: `lr <= 0` let it through, and the run trained a NaN policy.
  with pytest.raises(ValueError, match=r"optim.learning_rate must be > 0 and finite, got "
                     + re.escape(repr(lr))):
    opt_lib.make_optimizer(_optim(learning_rate=lr), batch_size=64, total_steps=10)


def test_critic_learning_rate_is_named():
  with pytest.raises(ValueError, match=r"optim.critic_learning_rate must be > 0 and finite, got nan"):
    opt_lib.make_optimizer(_optim(), batch_size=64, total_steps=10, learning_rate=NAN)


@pytest.mark.parametrize("fields, message", [
    ({"eps": NAN}, "optim.eps must be >= 0 and finite, got nan"),
    ({"eps": INF}, "optim.eps must be >= 0 and finite, got inf"),
    ({"eps": -1e-8}, "optim.eps must be >= 0 and finite, got -1e-08"),
    ({"b1": NAN}, "optim.b1 must be in [0, 1), got nan"),
    ({"b2": INF}, "optim.b2 must be in [0, 1), got inf"),
    ({"optimizer": "adamw", "weight_decay": NAN}, "optim.weight_decay must be >= 0 and finite"),
    ({"optimizer": "adamw", "weight_decay": -INF}, "optim.weight_decay must be >= 0 and finite"),
    # NaN > 0 is False, so a NaN threshold silently meant "no clipping".
    ({"grad_clip_norm": NAN}, "optim.grad_clip_norm must be a finite number"),
    ({"grad_clip_norm": INF}, "optim.grad_clip_norm must be a finite number"),
])
def test_non_finite_adam_fields_are_refused(fields, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    opt_lib.make_optimizer(_optim(**fields), batch_size=64, total_steps=10)


def test_zero_eps_and_no_clipping_stay_allowed():
  opt_lib.make_optimizer(_optim(eps=0.0, grad_clip_norm=None), batch_size=64, total_steps=10)
  opt_lib.make_optimizer(_optim(grad_clip_norm=-1.0), batch_size=64, total_steps=10)
