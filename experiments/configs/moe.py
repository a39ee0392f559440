"""The main job's task (GRPO on reasoning-gym `chain_sum`) with a mixture-of-experts policy.

Run:

  python -m rlscale.main --config=experiments/configs/moe.py --workdir=runs/moe

Smoke run (about a minute): `--config=experiments/configs/moe.py:smoke`.

The built-in model of default.py with every MLP replaced by E = 8 SwiGLU experts of width 192,
top-2 with renormalised weights (Qwen3-MoE's layout, `rlscale.model.moe`): a token uses the
router and two experts, 2 x 3 x 128 x 192 = 147,456 expert parameters per layer, as many as the
dense model's 3 x 128 x 384 MLP, so the active size matches default.py's (plus the 128 x 8
router) while the total holds 4x the MLP parameters. The load-balancing loss enters the update
with Qwen3-MoE's coefficient 0.001; the trainer recomputes the behaviour log-probs
(rl.old_logp defaults to "recompute" for a model with experts, `validate.default_old_logp`).
On CPU the experts run as the dense "every expert, masked" dispatch, which measured faster
there than ragged_dot (`model.moe_dispatch="auto"`); on GPU/TPU auto picks ragged_dot.
Exported as a HF Qwen3-MoE checkpoint (transformers' Qwen3MoeForCausalLM loads it).

Measured with seed 0 (2026-12-04, the 2-core CPU shared with another job): 1.29M parameters in
total; held-out greedy accuracy 0.566 after the warm start -> 0.758 after 500 steps (+0.19, noise
+-0.08 for 256 prompts) in 2,016 s of RL (435 s of warm start before). The load-balancing loss
went from 4.20 to 4.01 (2 = balanced) and the busiest expert kept about 3.2 / 8 of a layer's
assignments: at coefficient 0.001 the router stays unbalanced on this task.
"""

from rlscale.runner.config_files import load_config_file, sibling


def get_config(arg=None):
  """default.py's config with a top-2 of 8 experts MoE policy of the dense model's active size."""
  config = load_config_file(sibling(__file__, "default.py"), arg)
  # Experts per MoE layer (E) and experts per token (k).
  config.model.num_experts = 8
  config.model.num_experts_per_tok = 2
  # One expert's SwiGLU width: k x 192 = default.py's intermediate_size 384 (same active size).
  config.model.moe_intermediate_size = config.model.get_ref("intermediate_size") // 2
  # Renormalise the k chosen router probabilities (as the Qwen3-MoE checkpoints).
  config.model.norm_topk_prob = True
  # Every layer MoE: layer i is MoE iff (i + 1) % decoder_sparse_step == 0 and i not in
  # mlp_only_layers (dense there, with intermediate_size).
  config.model.decoder_sparse_step = 1
  config.model.mlp_only_layers = ()
  # Load-balancing loss coefficient (Switch / Qwen3-MoE form), added to the RL loss.
  config.model.router_aux_loss_coef = 0.001
  # "auto" (dense on CPU, ragged_dot elsewhere), "ragged" or "dense": the same numbers.
  config.model.moe_dispatch = "auto"
  # Routing replay (R3): the trainer uses the experts the sampler chose for each response token
  # (gate weights from its own router) instead of routing again; moe/routing_mismatch logs how
  # often the two disagree without it.
  config.model.moe_routing_replay = False
  # Expert parallelism: each device of the `expert` axis holds E / expert of every layer's
  # experts (1: none; e.g. --config.mesh.expert=2 --config.mesh.data=2 on 4 devices).
  config.mesh.expert = 1
  return config
