"""The update step's batch of one RL step, built from a scored rollout batch (`rollouts.Generated`):
trimmed to bucketed widths and placed on the mesh once, then the behaviour / reference / critic
passes the config needs, advantages and the loss mask, as a typed `UpdateBatch` of global arrays.

With several processes (`rlscale.runner.hosts`) each process holds its own rows; widths, the loss
mask and statistics come from the union of every process's rows, and the passes and advantages
run on the global arrays, so the step equals the one-process step on the union.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import numpy as np

from rlscale.rl import masks, off_policy
from rlscale.rl.kl import kl_divergence
from rlscale.runner import hosts as hosts_lib
from rlscale.runner.batching import train_widths, trim_rollout
from rlscale.runner.rollouts import Generated, gather_generated, row_flags
from rlscale.train import update as update_lib


@dataclasses.dataclass
class UpdateBatch:
  """The arrays of one update step (`rlscale.train.update.update_step`'s batch): global arrays
  [B, ...] on the run's mesh, rows over its batch axes (each process holds its own rows' shards).

  B rows, T = Tp + Tr trained tokens (the bucketed widths of `batching.train_widths`).

  Attributes:
    tokens: [B, T] int32, the left-padded prompt then the response.
    input_mask: [B, T] int32, 1 for real prompt and response tokens.
    response_mask: [B, Tr] int32 loss mask: the rollout's response mask with truncated rows
      (rl.mask_truncated) and DAPO filler groups set to 0.
    old_logp: [B, Tr] float32 behaviour log-probs (the sampler's, or recomputed: then the
      proximal policy's, the parameters this update starts from).
    advantages: [B] or [B, Tr] float32.
    returns: [B, Tr] float32 value targets (PPO's GAE), else None.
    ref_logp: [B, Tr] float32 reference log-probs when the loss has a KL term, else None.
    old_values: [B, Tr] float32 the critic's values before the update (PPO), else None.
    sampler_experts: [B, Tr, L_moe, k] int32, the sampler's routing (`Rollout.experts`) for a
      model with experts (the update logs moe/routing_mismatch against it), else None.
    routing: the same array when the run replays it (model.moe_routing_replay), else None.
    behaviour_logp: [B, Tr] float32, the sampler's log-probs beside the recomputed old_logp, when
      an off-policy correction weighs the loss by pi_old / pi_behav (rl.off_policy_correction,
      `rl.off_policy`), else None.
  """
  tokens: Any
  input_mask: Any
  response_mask: Any
  old_logp: Any
  advantages: Any
  returns: Optional[Any] = None
  ref_logp: Optional[Any] = None
  old_values: Optional[Any] = None
  sampler_experts: Optional[Any] = None
  routing: Optional[Any] = None
  behaviour_logp: Optional[Any] = None

  def arrays(self) -> dict[str, Any]:
    """The batch as the update step's dict: every field that is not None, by name."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None}


def loss_mask_of(run, generated: Generated) -> tuple[np.ndarray, dict[str, float]]:
  """The update's response mask: the rollout's, with the rows that must not enter the loss set to
  0 by `masks.mask_rows` (truncated responses when rl.mask_truncated, DAPO filler groups), and
  the fractions of the batch's rows that are truncated and that are masked for each reason."""
  rollout = generated.rollout
  t_r = rollout.response_mask.shape[1]
  truncated = np.asarray(masks.truncated_rows(rollout.tokens[:, -t_r:], rollout.response_mask,
                                              run.sampler.eos_ids))
  masked_truncated = truncated & bool(run.rl_config.mask_truncated)
  filler = row_flags(generated, "filler")
  loss_mask = np.asarray(masks.mask_rows(rollout.response_mask, ~(masked_truncated | filler)))
  return loss_mask, {"response/truncated_frac": float(truncated.mean()),
                     "loss_mask/truncated_frac": float(masked_truncated.mean()),
                     "loss_mask/filler_frac": float(filler.mean())}


@jax.jit
def mismatch_k3(trainer_logp, sampler_logp, response_mask):
  """The sampler-trainer mismatch: the mean k3 (Schulman's estimator of KL(sampler || trainer))
  of trainer_logp [B, Tr] float32 against sampler_logp [B, Tr] float32 over the tokens where
  response_mask [B, Tr] is 1; a float32 scalar (global arrays: over every process's rows)."""
  return masks.masked_mean(kl_divergence("k3", trainer_logp, sampler_logp), response_mask)


def behaviour_logp(run, state, placed: dict) -> dict[str, float]:
  """Sets placed["old_logp"] [B, Tr] as rl.old_logp asks: the sampler's (left as placed), or
  ("recompute") a trainer forward with the current params (`trainer.logp`, replaying the
  sampler's experts when placed has "routing").

  Args: run (`roles.Run`: rl_config, trainer.logp), state (its params feed the recompute), placed
    (the update batch on the mesh: tokens, input_mask, response_mask, old_logp = the sampler's).
  With an off-policy correction (`off_policy.uses_behaviour_logp`, which needs "recompute") the
  sampler's log-probs stay in the batch as placed["behaviour_logp"].
  Returns: {} for "sampler"; for "recompute" {"train/sampler_trainer_k3": `mismatch_k3` of the
  trainer's log-probs against the sampler's} (with "sampler" the update step logs the same;
  with asynchronous rollouts it also holds the drift of the k updates since sampling)."""
  if run.rl_config.old_logp != "recompute":
    return {}
  sampler_logp = placed["old_logp"]
  placed["old_logp"] = run.trainer.logp(state.params, placed)
  if off_policy.uses_behaviour_logp(run.rl_config):
    placed["behaviour_logp"] = sampler_logp
  return {"train/sampler_trainer_k3": float(
      mismatch_k3(placed["old_logp"], sampler_logp, placed["response_mask"]))}


def own_routing(batch: dict) -> dict:
  """The batch without "routing": the reference policy and the critic route by themselves (the
  sampler's experts are the policy's choice, replayed for the policy only)."""
  return {k: v for k, v in batch.items() if k != "routing"}


def make_update_batch(run, state, generated: Generated) -> tuple[UpdateBatch, dict]:
  """The update step's batch from a scored rollout batch: trimmed to its bucketed prompt and
  response widths, placed on the mesh once (`layout.MeshLayout.place_batch`), then the reference
  / critic / recomputed behaviour passes the config needs and the advantages, all on the mesh
  (nothing returns to the host).

  With several processes (`rlscale.runner.hosts`), `generated` holds this process's rows; the
  widths, the loss mask and the statistics come from the union of every process's rows (gathered
  in process order: the one-process batch), so every process places the same shapes; the passes
  and the advantages run on the global arrays, so the step equals the one-process step on the
  union.

  Args: run (`roles.Run`), state (the TrainState on the mesh), generated (the step's
    `Generated`, this process's rows).
  Returns: (UpdateBatch of global arrays, record: mask stats, the sampler-trainer mismatch when
  old_logp is recomputed, tokens/trained, and the trained widths in tokens batch/prompt_width
  and batch/response_width: one update-step compile per pair)."""
  rl = run.rl_config
  hosts, trainer = run.hosts, run.trainer
  everything = gather_generated(generated, hosts)
  # Train on the batch's longest prompt and response, bucketed (a few static widths), not the
  # sampler's prompt bucket and response limit: the left padding and the columns after every
  # response are compute without effect on the loss. Taken from the union so that every process
  # trims to the same widths (the global arrays' shapes must match across processes).
  prompt_width, width = train_widths(everything.rollout)
  rollout = trim_rollout(generated.rollout, width, prompt_width)
  union = rollout if hosts.count == 1 else trim_rollout(everything.rollout, width, prompt_width)
  # Advantages (and ref_logp, values) use every row; the loss only the unmasked ones.
  loss_mask, mask_stats = loss_mask_of(run, everything)  # truncation is judged at the full width
  rows = {
      "tokens": rollout.tokens,
      "input_mask": np.concatenate([rollout.prompt_mask, rollout.response_mask], axis=1),
      "response_mask": rollout.response_mask,
      "loss_mask": hosts_lib.own_rows(loss_mask[:, :width], hosts),
      "old_logp": rollout.logp,
      "rewards": hosts_lib.own_rows(everything.rewards, hosts),
  }
  if getattr(rollout, "experts", None) is not None:
    rows["sampler_experts"] = rollout.experts
    if trainer.routing_replay:
      rows["routing"] = rollout.experts
  placed = trainer.layout.place_batch(rows)
  loss_mask, rewards = placed.pop("loss_mask"), placed.pop("rewards")
  record = behaviour_logp(run, state, placed)
  if update_lib.uses_ref_logp(rl):
    placed["ref_logp"] = trainer.logp(trainer.ref_params, own_routing(placed))
  if update_lib.uses_critic(rl):
    placed["old_values"] = trainer.values(state.critic_params, own_routing(placed))
  placed.update(trainer.advantages(rewards, placed["response_mask"], old_logp=placed["old_logp"],
                                 ref_logp=placed.get("ref_logp"), values=placed.get("old_values")))
  placed["response_mask"] = loss_mask
  tokens = int(union.prompt_mask.sum() + union.response_mask.sum())
  return UpdateBatch(**placed), {**mask_stats, **record, "tokens/trained": tokens,
                                 "batch/prompt_width": prompt_width, "batch/response_width": width}
