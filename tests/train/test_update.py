"""The update step on the one-device mesh: first-epoch ratios, loss values against a direct
computation, microbatch invariance, KL and critic terms, batch checks, and no recompilation.

Compiles are the cost here (seconds each on 2 cores), so runs are shared through module fixtures."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlscale.model.transformer import forward
from rlscale.rl.aggregation import aggregate_loss
from rlscale.rl.logprob import entropy_from_logits, response_logits, response_logp
from rlscale.rl.losses import ppo_clip
from rlscale.train import update as update_lib
from rlscale.train import update_fn
from tests.train import update_problem as problem


def _max_diff(a, b):
  return max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.fixture(scope="module")
def grpo_runs():
  return {m: problem.run_updates(problem.rl_config("grpo", microbatches=m, kl_coef=0.1))
          for m in (1, 4)}


@pytest.fixture(scope="module")
def ppo_runs():
  return {m: problem.run_updates(problem.rl_config("ppo", microbatches=m, kl_coef=0.1))
          for m in (1, 4)}


@pytest.mark.parametrize("runs", ["grpo_runs", "ppo_runs"])
def test_one_vs_four_microbatches(runs, request):
  runs = request.getfixturevalue(runs)
  one, four = runs[1], runs[4]
  assert _max_diff(one.params, four.params) < 1e-6
  if one.critic_params is not None:
    assert _max_diff(one.critic_params, four.critic_params) < 1e-6
  for step in range(2):
    for key, value in one.metrics[step].items():
      if key in ("gns_grad_sq_small", "gns_batch_small"):  # the microbatches are the small batch
        continue
      np.testing.assert_allclose(value, four.metrics[step][key], rtol=1e-5, atol=1e-7, err_msg=key)


def test_first_ppo_epoch_has_ratio_one_and_no_clipping(ppo_runs):
  first = ppo_runs[1].metrics[0]
  np.testing.assert_allclose([first["ratio_min"], first["ratio_mean"], first["ratio_max"]],
                             1.0, atol=1e-5)
  assert first["clip_fraction"] == 0.0
  assert first["approx_kl_old"] < 1e-9
  assert first["value_loss"] > 0 and first["critic_grad_norm"] > 0
  # The second step reuses the same rollout: its ratios are no longer 1.
  second = ppo_runs[1].metrics[1]
  assert second["ratio_max"] > 1.0 + 1e-6 or second["ratio_min"] < 1.0 - 1e-6


def test_kl_loss_term_by_hand(grpo_runs):
  # ref_logp = old_logp - 0.3 on real tokens: at the first update d = ref - logp = -0.3 exactly.
  first = grpo_runs[1].metrics[0]
  k3 = np.exp(-0.3) - (-0.3) - 1.0
  np.testing.assert_allclose(first["kl"], k3, rtol=1e-4)
  np.testing.assert_allclose(first["kl_loss"], k3, rtol=1e-4)  # any mean of a constant
  np.testing.assert_allclose(first["loss"], first["pg_loss"] + 0.1 * first["kl_loss"],
                             rtol=1e-5, atol=1e-7)


def test_metrics_and_gns_inputs_on_one_device(grpo_runs):
  first = grpo_runs[1].metrics[0]
  # One device, one microbatch: the small batch is the big one.
  np.testing.assert_allclose(first["gns_grad_sq_small"], first["gns_grad_sq_big"], rtol=1e-5)
  assert first["gns_batch_small"] == first["gns_batch_big"] == 16
  np.testing.assert_allclose(first["gns_grad_sq_big"], first["grad_norm"] ** 2, rtol=1e-5)
  assert first["learning_rate"] == pytest.approx(1e-3)
  assert first["update_norm"] > 0 and first["entropy"] > 0


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean"])
def test_gns_small_batches_are_the_microbatches_on_one_device(mode):
  # |g_small|^2 must be the mean over microbatches of |gradient of the microbatch's own mean
  # loss|^2: each microbatch run alone as a whole batch gives that as its grad_norm^2.
  rl = problem.rl_config("grpo", microbatches=2, loss_agg_mode=mode)
  fn, state, batch = problem.setup(rl)
  _, metrics = fn(state, batch, jax.random.key(0))
  alone = problem.rl_config("grpo", prompts=2, loss_agg_mode=mode)
  fn_alone = problem.setup(alone)[0]
  # Microbatch c holds the groups (of G = 4 rows) c, c + 2: rows 0-3 and 8-11, then 4-7, 12-15.
  norms_sq = []
  for part in (np.r_[0:4, 8:12], np.r_[4:8, 12:16]):
    _, part_state, _ = problem.setup(alone)
    _, part_metrics = fn_alone(part_state, {k: v[part] for k, v in batch.items()},
                               jax.random.key(0))
    norms_sq.append(part_metrics["grad_norm"] ** 2)
  np.testing.assert_allclose(metrics["gns_grad_sq_small"], np.mean(norms_sq), rtol=1e-4)
  np.testing.assert_allclose(metrics["gns_grad_sq_big"], metrics["grad_norm"] ** 2, rtol=1e-5)
  assert (metrics["gns_batch_small"], metrics["gns_batch_big"]) == (8, 16)
  # Two different halves: their own gradients are noisier than the whole batch's.
  assert metrics["gns_grad_sq_small"] > metrics["gns_grad_sq_big"]


def test_gns_of_two_identical_microbatches_sees_no_noise():
  # Hand case: both microbatches hold the same rows, so each one's own mean-loss gradient equals
  # the whole batch's: |g_small|^2 = |g_big|^2, i.e. tr(Sigma) = 0 in B_simple.
  rl = problem.rl_config("grpo", microbatches=2)
  fn, state, batch = problem.setup(rl)
  # Microbatch c holds the groups (of G = 4 rows) c, c + 2: groups 0, 0, 1, 1 give both
  # microbatches groups 0 and 1.
  doubled = {k: np.concatenate([v[0:4], v[0:4], v[4:8], v[4:8]]) for k, v in batch.items()}
  _, metrics = fn(state, doubled, jax.random.key(0))
  np.testing.assert_allclose(metrics["gns_grad_sq_small"], metrics["gns_grad_sq_big"],
                             rtol=1e-5)


def test_no_recompilation_after_the_first_step(grpo_runs):
  run = grpo_runs[1]
  compiles = []

  def listener(event, duration, **kwargs):  # pylint: disable=unused-argument
    if event == "/jax/core/compile/backend_compile_duration":
      compiles.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    state = run.state
    for i in range(2):
      state, metrics = run.fn(state, run.batch, jax.random.key(i))
    jax.block_until_ready(metrics)
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  assert not compiles
  assert int(state.step) == 4


def test_loss_and_grad_norm_match_a_direct_full_batch_computation():
  rl = problem.rl_config("dapo", microbatches=2, entropy_coef=0.01)  # token-mean, clip-higher
  fn, state, batch = problem.setup(rl)
  host = batch
  params = jax.device_get(state.params)
  mask = host["response_mask"]

  def loss_fn(p):
    logits = forward(p, problem.MODEL, host["tokens"], host["input_mask"]).logits
    logp = response_logp(logits, host["tokens"], problem.RESPONSE_LEN, rl.temperature)
    adv = jnp.broadcast_to(host["advantages"][:, None], logp.shape)
    token_loss, _ = ppo_clip(logp, host["old_logp"], adv, mask, clip_eps_low=0.2, clip_eps_high=0.28)
    entropy = entropy_from_logits(response_logits(logits, problem.RESPONSE_LEN), rl.temperature)
    return (aggregate_loss(token_loss, mask, "token-mean")
            - 0.01 * aggregate_loss(entropy, mask, "token-mean"))

  loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
  _, metrics = fn(state, batch, jax.random.key(0))
  np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5, atol=1e-7)
  grad_norm = float(jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads))))
  np.testing.assert_allclose(metrics["grad_norm"], grad_norm, rtol=1e-5)
  # At ratio 1 the PPO loss is -(token mean of the advantage).
  expected_pg = -np.sum(host["advantages"][:, None] * mask) / mask.sum()
  np.testing.assert_allclose(metrics["pg_loss"], expected_pg, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_bfloat16_params_keep_their_dtype_with_float32_adam_moments(algorithm):
  # Gradients are accumulated in float32; with bf16 parameters the Adam moments must be float32
  # from the start, or the minibatch scan's carry changes dtype and tracing fails.
  rl = problem.rl_config(algorithm, microbatches=2)
  config = problem.MODEL.replace(dtype="bfloat16", param_dtype="bfloat16")
  params, critic = problem.initial_params(rl)
  to_bf16 = lambda tree: jax.tree.map(lambda x: x.astype(jnp.bfloat16), tree)  # noqa: E731
  params, critic = to_bf16(params), (None if critic is None else to_bf16(critic))
  host = problem.host_batch(rl, params, critic)
  tx = problem.make_optimizer(rl)
  fn = update_fn.make_update_fn(config, rl, tx, problem.one_device_mesh())
  state = problem.placed_state(fn, params, tx, critic)
  new_state, metrics = fn(state, host, jax.random.key(0))
  new_state = jax.device_get(new_state)
  trees = [(new_state.params, new_state.opt_state, params)]
  if critic is not None:
    trees.append((new_state.critic_params, new_state.critic_opt_state, critic))
  for new_params, opt_state, old_params in trees:
    assert {x.dtype for x in jax.tree.leaves(new_params)} == {jnp.dtype(jnp.bfloat16)}
    moments = [x for x in jax.tree.leaves(opt_state) if x.ndim > 0]
    assert moments and {x.dtype for x in moments} == {jnp.dtype(jnp.float32)}
    moved = jax.tree.map(lambda a, b: np.any(np.asarray(a, np.float32) != np.asarray(b, np.float32)),
                         new_params, old_params)
    assert any(jax.tree.leaves(moved))
  assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0


def test_epochs_and_shuffled_minibatches():
  rl = problem.rl_config("grpo", epochs=2, minibatches=2)
  run = problem.run_updates(rl, steps=1, optim=problem.optim_config(learning_rate=0.05))
  metrics = run.metrics[0]
  # Four optimizer updates, the later ones on a moved policy.
  assert metrics["ratio_max"] > 1.001 or metrics["ratio_min"] < 0.999
  assert metrics["gns_batch_big"] == 8  # responses per minibatch


def test_batch_errors(grpo_runs):
  run = grpo_runs[1]
  with pytest.raises(ValueError, match=r"update batch lacks \['ref_logp'\]"):
    run.fn(run.state, {k: v for k, v in run.batch.items() if k != "ref_logp"}, jax.random.key(0))
  with pytest.raises(ValueError, match=r"batch\['old_logp'\] has shape \(16, 4\), expected \(16, 5\)"):
    run.fn(run.state, {**run.batch, "old_logp": run.batch["old_logp"][..., :4]}, jax.random.key(0))
  with pytest.raises(ValueError, match=r"global rows, no device axis"):
    run.fn(run.state, {k: v[None] for k, v in run.batch.items()}, jax.random.key(0))
  ppo_fn = update_fn.make_update_fn(problem.MODEL, problem.rl_config("ppo"), optax.adam(1e-3),
                                    problem.one_device_mesh())
  with pytest.raises(ValueError, match="trains a critic"):
    ppo_fn(run.state, run.batch, jax.random.key(0))


def test_invalid_config_is_rejected_when_building():
  with pytest.raises(ValueError, match=r"must be divisible by the mesh's data x fsdp \(1\) x rl.minibatches \(1\) x rl.microbatches \(3\)"):
    update_fn.make_update_fn(problem.MODEL, problem.rl_config("grpo", microbatches=3),
                             optax.adam(1e-3), problem.one_device_mesh())


def test_optimizer_args():
  rl = problem.rl_config("grpo", epochs=2, minibatches=4)  # B = 4 x 4 = 16 responses per step
  assert update_lib.optimizer_args(rl, rl_steps=10) == {
      "batch_size": 4, "total_steps": 80, "updates_per_step": 8, "step_samples": 16,
      "budget_samples": 160}
  assert update_lib.optimizer_args(rl, rl_steps=10, total_samples=150)["budget_samples"] == 150


def test_ppo_epochs_and_minibatches_follow_the_sample_schedule():
  # PPO, 2 epochs x 2 minibatches, B = 16 per step over a budget of 4 x 16 = 64 responses; linear
  # warmup over 32 responses then linear decay to 0 at 64: step 1 (s = 16) lr 1e-3 x 16 / 32,
  # step 2 (s = 32) the peak, step 3 (s = 48) 1e-3 x (1 - 16 / 32).
  rl = problem.rl_config("ppo", epochs=2, minibatches=2)
  optim = problem.optim_config(schedule="linear", schedule_unit="samples", warmup_samples=32)
  run = problem.run_updates(rl, steps=3, optim=optim)
  np.testing.assert_allclose([m["learning_rate"] for m in run.metrics], [5e-4, 1e-3, 5e-4],
                             rtol=1e-6)


def test_interleaved_slices_by_hand():
  rows = np.arange(16)
  np.testing.assert_array_equal(update_lib.interleaved_slices(rows, 4),
                                [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]])
  # Blocks of 4 rows (whole groups of G = 4): slice c holds the groups c, c + 2.
  np.testing.assert_array_equal(update_lib.interleaved_slices({"a": rows}, 2, block=4)["a"],
                                [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]])
  assert update_lib.interleaved_slices(np.ones((8, 3, 2)), 2).shape == (2, 4, 3, 2)


@pytest.mark.parametrize("setting, rows, width, platform, expected", [
    (None, 256, 16, "cpu", 4),   # the main job: 4 slices of 64 x 16 = 1,024 tokens
    (None, 64, 72, "cpu", 4),    # W2: 16 x 72 = 1,152 >= 1,024, 8 x 72 = 576 is not
    (None, 512, 16, "cpu", 8),
    (None, 16, 20, "cpu", 1),    # 320 tokens in all: one slice
    (None, 24, 64, "cpu", 1),    # 24 x 64 = 1,536: halves would be 768 < 1,024
    (None, 256, 16, "gpu", 1),   # GPU/TPU: the whole minibatch
    (3, 256, 16, "cpu", 3),      # an explicit count is kept
])
def test_microbatch_count_by_hand(setting, rows, width, platform, expected):
  assert update_lib.microbatch_count(setting, rows, width, platform) == expected


@pytest.mark.parametrize("setting, rows, width, platform, group, flag, expected", [
    (None, 256, 16, "cpu", 8, False, 4),  # the main job: 64-row slices hold 8 whole groups
    # 96 rows of 32 tokens in groups of 12: 3 slices of 32 rows (1,024 tokens) would cut a group;
    # slices of whole groups are 96, 48, 24, 12 rows; the most with >= 1,024 tokens: 2 x 48.
    (None, 96, 32, "cpu", 12, False, 2),
    (None, 96, 32, "cpu", None, False, 3),  # without a group size: any divisor (3 x 32 rows)
    # 40 rows of 64 tokens in groups of 8: 2 x 20 rows (1,280 tokens each) would cut groups; the
    # whole-group splits are 1 x 40 and 5 x 8 rows (512 tokens < 1,024): one slice.
    (None, 40, 64, "cpu", 8, False, 1),
    # 40 rows are no multiple of 16 (groups already cut, e.g. shuffled minibatches): any divisor.
    (None, 40, 64, "cpu", 16, False, 2),
    (None, 16, 20, "cpu", 4, True, 2),   # the noise scale: 2 slices of 8 rows (2 groups of 4)
    (None, 256, 16, "gpu", 8, True, 2),  # ... on GPU too: 2 x 128 rows
    (None, 256, 16, "cpu", 8, True, 4),  # ... already >= 2: the speed choice stays
    (None, 8, 20, "cpu", 8, True, 1),    # one group: no split keeps it whole (a warning says so)
    (None, 12, 20, "gpu", 4, True, 3),   # splits 12, 4 rows (groups of 4): 3 x 4, the smallest >= 2
    (1, 256, 16, "gpu", 8, True, 1),     # an explicit count is kept
])
def test_microbatch_count_keeps_groups_and_gives_the_noise_scale_two_slices(
    setting, rows, width, platform, group, flag, expected):
  assert update_lib.microbatch_count(setting, rows, width, platform, group_size=group,
                                     measure_noise_scale=flag) == expected


def test_noise_scale_split_warning():
  assert update_lib.noise_scale_split_warning(problem.rl_config("grpo", prompts=2, group=8)) is None
  assert update_lib.noise_scale_split_warning(problem.rl_config("grpo", prompts=1, group=8)) == (
      "warning: train.measure_noise_scale: the gradient noise scale cannot be measured at this "
      "batch: its 8 rows per minibatch do not split into 2 or more slices of whole "
      "groups of rl.group_size=8")
  explicit = problem.rl_config("grpo", prompts=4, group=8, microbatches=1)
  assert update_lib.noise_scale_split_warning(explicit).endswith(
      "rl.microbatches=1 gives one slice (unset it, or set it >= 2)")


def test_measure_noise_scale_splits_the_update_in_two(grpo_runs):
  # 16 rows of 11 tokens (P 4 x G 4) on a CPU: one slice by speed; with the flag 2 x 8 rows, and
  # the update is the same (accumulation is exact).
  rl = problem.rl_config("grpo", microbatches=None, kl_coef=0.1)
  _, state, batch = problem.setup(rl)
  fn = update_fn.make_update_fn(problem.MODEL, rl, problem.make_optimizer(rl),
                                problem.one_device_mesh(),
                                 measure_noise_scale=True)
  state, metrics = fn(state, batch, jax.random.key(100))
  assert (metrics["gns_batch_small"], metrics["gns_batch_big"]) == (8, 16)
  assert grpo_runs[1].metrics[0]["gns_batch_small"] == 16  # 1 slice: small = big
  np.testing.assert_allclose(metrics["loss"], grpo_runs[1].metrics[0]["loss"], rtol=1e-5)


def test_unset_microbatches_choose_slices_with_the_same_update(grpo_runs, monkeypatch):
  # With slices of >= 2 rows' tokens the 16-row problem (groups of G = 4) is split in 4 slices
  # of one group (8 slices of 2 rows would cut groups): same update as 1 slice.
  monkeypatch.setattr(update_lib, "CPU_MICROBATCH_TOKENS",
                      2 * (problem.PROMPT_LEN + problem.RESPONSE_LEN))
  if jax.default_backend() != "cpu":
    pytest.skip("the CPU rule")
  auto = problem.run_updates(problem.rl_config("grpo", microbatches=None, kl_coef=0.1))
  assert auto.metrics[0]["gns_batch_small"] == 4  # 4 slices of 4 rows
  assert _max_diff(grpo_runs[1].params, auto.params) < 1e-6
