"""The main job: GRPO on reasoning-gym `chain_sum` with the built-in small transformer.

Run (1 min 48 s on an idle 2-core CPU: 25 s model load and SFT warm start, 79 s of 500 GRPO steps
and their evaluations, 19 s of it JAX compiling; the install comes before):

  python -m rlscale.main --config=experiments/configs/default.py --workdir=runs/default

One-minute smoke run:

  python -m rlscale.main --config=experiments/configs/default.py:smoke --workdir=/tmp/smoke

Override any field on the command line, e.g. `--config.rl.prompts_per_step=16`.

Why these settings: sums of three one-digit numbers (`7 - 3 + 2 =`, about 4,000 distinct
questions, 10% held out) are hard enough for a 0.4M-parameter character model that 300 SFT steps
leave it at ~48% held-out greedy accuracy, and easy enough that most groups of G = 8 samples at
temperature 0.5 hold both right and wrong answers (>90% of groups with reward variance), so GRPO
gets a signal from nearly every prompt. Adam at 1e-4 with cosine decay and P = 32 then lifts
held-out greedy accuracy by about 30 points in 500 steps (measured with seed 0 on a fresh clone,
2026-12-01: 0.484 -> 0.781 with optim.grad_clip_norm = 50, which never fired, on a 2-core AMD
EPYC; 0.773 there, and 0.766 on another machine whose XLA float rounding differs, before the
verifier stopped rewarding answers with trailing junk such as " 9=" (issue 23); 0.484 -> 0.770 in 115 s on an idle 2-core CPU
with the old 1.0, which fired on every step; earlier sampler builds, whose float rounding
differed, gave 0.781 with seed 0 and 0.414 -> 0.750 with seed 1). A constant 1e-4 gained 20 and
12 points and swung by up to 17 points between evaluations late in the run; temperature 1.0 left
most samples wrong (reward ~0.2) and gained less; 3e-4 was unstable.
"""

import ml_collections
from ml_collections.config_dict import placeholder


def get_config(arg=None):
  """Returns the default GRPO config; `arg="smoke"` shrinks everything for a ~1 minute run."""
  config = ml_collections.ConfigDict()
  # Seed of RL (sampling, the prompt stream, a critic's head) and, unless sft.seed is set, of the
  # warm start (init, SFT data); the same seeds give the same metrics.
  config.seed = 0
  # Initialise jax.distributed (multi-host): "auto" when JAX_COORDINATOR_ADDRESS is set, or True/False.
  config.distributed = "auto"
  # Device mesh (README "Devices and sharding"): data (parameters replicated), fsdp (parameters and
  # Adam moments sharded, ZeRO-3), tensor (heads, MLP and vocabulary sharded); sizes multiply to
  # the device count, one may be -1 (the rest); one device is {data: 1}. The update step, the
  # sampler and the forward passes are jitted on this mesh in the global view, over every process's
  # devices. The batch P x G must divide by data x fsdp.
  config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})

  # --- Model: the built-in small Qwen3-layout transformer (or an HF checkpoint directory).
  config.model = ml_collections.ConfigDict()
  # "builtin" (small transformer, character tokenizer, SFT warm start) or "hf" (checkpoint_path).
  config.model.source = "builtin"
  # Local HF checkpoint directory (config.json + safetensors + tokenizer.json) for source="hf".
  config.model.checkpoint_path = ml_collections.config_dict.placeholder(str)
  # Width, depth and heads of the built-in model (ignored when checkpoint_path is set).
  config.model.hidden_size = 128
  config.model.intermediate_size = 384
  config.model.num_layers = 2
  config.model.num_heads = 4
  config.model.num_kv_heads = 2
  config.model.head_dim = 32
  # Compute dtype, "float32" or "bfloat16" (any source). Training always keeps float32 master
  # weights and Adam moments; param_dtype is the dtype the built-in model's final policy is
  # exported in (an HF checkpoint is exported in its own dtype).
  config.model.param_dtype = "float32"
  config.model.dtype = "float32"
  # Per-layer rematerialisation in the update step (gradient checkpointing: activations of one
  # layer at a time, about one more forward of compute); None = on for HF checkpoints, off for
  # the built-in model.
  config.model.remat = placeholder(bool)
  # Kernel switches: "cpu" (XLA:CPU-tuned attention: multiply-reduce decode over a transposed key
  # cache), "standard" (jax.nn.dot_product_attention), "auto" (cpu on the CPU backend, else
  # standard); remat by "custom_vjp" (tied backward, for XLA:CPU), "checkpoint" (jax.checkpoint,
  # nothing_saveable policy) or "auto" (custom_vjp on CPU, else checkpoint). Same numbers up to
  # float rounding.
  config.model.attention_impl = "auto"
  config.model.remat_impl = "auto"

  # --- Task: prompts, reference answers and the reward.
  config.task = ml_collections.ConfigDict()
  # Source: "reasoning_gym" (any generator by name), "local_math" (JSONL via TFDS), "arithmetic".
  config.task.source = "reasoning_gym"
  # Generator name for reasoning_gym.
  config.task.name = "chain_sum"
  # Generator kwargs passed to reasoning_gym.create_dataset.
  config.task.kwargs = ml_collections.ConfigDict(
      dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1))
  # Scorer: "verifier" (rlscale's sympy verifier) or "native" (the generator's score_answer).
  config.task.scorer = "verifier"
  # Local JSONL path for source="local_math".
  config.task.data_path = ml_collections.config_dict.placeholder(str)
  # Number of held-out evaluation prompts (never in the training stream).
  config.task.eval_size = 256
  # Share of question space held out for evaluation (by question hash), and the seed of the
  # held-out draw (independent of config.seed, so every run of a sweep sees the same prompts).
  config.task.holdout_fraction = 0.1
  config.task.eval_seed = 1234
  # Prompt template (str.format with {question} and {metadata[...]}); short for the char model.
  config.task.prompt_template = "{metadata[expression]} ="
  # How the formatted prompt reaches the model (HF checkpoints; the built-in model has no chat
  # template): "on" renders it as the user message of the checkpoint's own chat template
  # (tokenizer_config.json or chat_template.jinja, with add_generation_prompt), "off" feeds the
  # text as it is, None (auto) = on when the checkpoint ships a template. Either way a prompt
  # gets exactly one BOS where the tokenizer files ask for one (Llama), none where not (Qwen).
  config.task.chat_template = placeholder(str)
  # System message before the prompt (needs a chat template); None = none.
  config.task.system_prompt = placeholder(str)
  # Keyword arguments of the chat template, e.g. enable_thinking=False for Qwen3.
  config.task.chat_template_kwargs = ml_collections.ConfigDict()
  # SFT target template (str.format with {answer}): the response of a correct model.
  config.task.target_template = "{answer}"
  # Answer extractors tried in order, from: boxed, answer_tag, gsm8k, last_number, full.
  config.task.extract_order = "boxed,answer_tag,gsm8k,last_number"
  # Relative tolerance when either side is written as a decimal (0 = exact).
  config.task.rel_tol = 1e-6
  # Whether the answer's "x%" may also mean x/100 (a reference's "x%" always may, as in
  # Math-Verify: reference "28%" accepts 28, 28% and 0.28; a trailing % may always be dropped).
  config.task.percent = False
  # Hard time limit in seconds of one sympy check (verifier worker process); 0.9 keeps a runaway,
  # kill included, under 1 s.
  config.task.timeout_s = 0.9
  # Weight of the format reward (1 when the first extractor finds the answer); 0 = off.
  config.task.format_weight = 0.0
  # Host-side DAPO overlong shaping: L_max and L_cache in tokens; None = off. Use this or
  # rl.overlong_buffer_frac (the jitted twin), not both.
  config.task.overlong_max_len = ml_collections.config_dict.placeholder(int)
  config.task.overlong_cache_len = ml_collections.config_dict.placeholder(int)
  # A task score that is NaN, infinite or None (a custom or native scorer's bug): "zero" (None
  # means it too) scores it 0, counts it in reward/nonfinite_frac and warns once; "error" stops
  # the run naming the row.
  config.task.nonfinite_reward = placeholder(str)
  # Cache folder for source="local_math"'s prepared TFDS data, keyed by the file's content hash
  # (None = $RLSCALE_HOME/tfds when that environment variable is set, else
  # $XDG_CACHE_HOME/rlscale/tfds, i.e. ~/.cache/rlscale/tfds; shared by runs and sweeps).
  config.task.data_dir = ml_collections.config_dict.placeholder(str)

  # --- Rollouts.
  config.rollout = ml_collections.ConfigDict()
  # Longest prompt in tokens (prompts are left-padded to a bucket no longer than this).
  config.rollout.max_prompt_tokens = 16
  # Response length limit in tokens (responses stop earlier at EOS).
  config.rollout.max_new_tokens = 8
  # Sampling temperature, top-k (0 = off) and top-p (1.0 = off) for training rollouts.
  config.rollout.temperature = 0.5
  config.rollout.top_k = 0
  config.rollout.top_p = 1.0
  # Min-p in [0, 1]: keep tokens with probability >= min_p x the most likely one's, applied after
  # top-k and top-p as transformers does (None or 0 = off).
  config.rollout.min_p = placeholder(float)
  # Row chunks sampled concurrently from host threads (`Sampler(host_threads=...)`): on a CPU
  # backend one decode loop keeps about one core busy, so the core count gives 1.5-2x tokens/s on
  # long responses (benchmarks/sampler.py, 64 tokens); this job's 8-token responses gain nothing
  # (generation 7.0 s with 1, 7.7 s with 2 on 2 cores). Keep 1 on GPU/TPU. The samples depend on
  # it (each chunk draws with its own key).
  config.rollout.host_threads = 1
  # How asynchronous rollouts (rl.max_off_policy_steps >= 1) overlap the update on one device:
  # "thread" (a rollout thread draws the next batch) or "dispatch" (the update is dispatched, the
  # next batch drawn in the main thread, then the update's metrics fetched). Same samples either
  # way (the fixed-lag rule); only speed differs. Neither pays on a 2-core CPU: XLA runs one
  # program at a time on the device, so only host work overlaps; a rollout batch and an update
  # at once took 0.99x (thread) and 1.00x (dispatch) of their sum alone (main job: 0.024 s +
  # 0.120 s), and k = 1 ran at 0.93x (thread) and 0.83x (dispatch) of k = 0's step throughput
  # (3 interleaved rounds on a shared machine, load 1.6-4.8;
  # benchmarks/results/async_rollouts/). "thread" also overlaps the trainer's host work.
  config.rollout.async_overlap = "thread"

  # --- RL algorithm.
  config.rl = ml_collections.ConfigDict()
  # Preset: grpo, dr_grpo, dapo, rloo, reinforce_pp, ppo (fills the fields below unless overridden).
  config.rl.algorithm = "grpo"
  # Prompts per optimizer step (P) and samples per prompt (G): B = P * G responses.
  config.rl.prompts_per_step = 32
  config.rl.group_size = 8
  # Passes over each rollout batch, and minibatches (optimizer steps) per pass.
  config.rl.epochs = 1
  config.rl.minibatches = 1
  # Gradient-accumulation microbatches per minibatch (slices of the whole minibatch, each spread
  # over the devices; memory and speed, not maths).
  # Unset (None): chosen per batch shape, on a CPU slices of >= 1,024 tokens (1.2x faster training
  # here than one slice: activations stay in cache), on GPU/TPU one, never dividing a group of
  # group_size, and >= 2 with train.measure_noise_scale (`update.microbatch_count`).
  config.rl.microbatches = placeholder(int)
  # KL penalty to the frozen reference policy (0 = none) and its estimator: k1, k2, k3.
  # The main job runs without a KL term (as Dr. GRPO and DAPO do); set it to use one.
  config.rl.kl_coef = 0.0
  config.rl.kl_estimator = ml_collections.config_dict.placeholder(str)
  # Fields below left as None take the value of the `algorithm` preset (rlscale/rl/presets.py).
  # Advantage estimator: grpo, dr_grpo, rloo, reinforce_pp, gae (PPO) or a registered one.
  config.rl.advantage = placeholder(str)
  # Per-token policy loss: ppo_clip, pg or a registered one (rlscale/rl/losses.py).
  config.rl.policy_loss = placeholder(str)
  # Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm.
  config.rl.loss_agg_mode = placeholder(str)
  # Dr. GRPO's constant for seq-mean-token-sum-norm; None = the response length limit.
  config.rl.loss_agg_norm = placeholder(float)
  # PPO clip range [1 - clip_eps_low, 1 + clip_eps_high] (DAPO clip-higher: 0.2, 0.28).
  config.rl.clip_eps_low = placeholder(float)
  config.rl.clip_eps_high = placeholder(float)
  # Dual-clip constant c > 1 bounding the loss of negative-advantage tokens; 0 = off.
  config.rl.dual_clip_c = placeholder(float)
  # Where the KL penalty goes: "loss" (a loss term) or "reward" (subtracted from the reward).
  config.rl.kl_mode = placeholder(str)
  # Entropy bonus coefficient (0 = none).
  config.rl.entropy_coef = placeholder(float)
  # DAPO dynamic sampling: drop groups whose rewards are all equal and refill the batch.
  config.rl.dynamic_sampling = placeholder(bool)
  # DAPO overlong shaping: buffer as a fraction of max_new_tokens (0 = off), and penalty scale.
  config.rl.overlong_buffer_frac = placeholder(float)
  config.rl.overlong_penalty_factor = placeholder(float)
  # Overlong filtering (DAPO; TRL's mask_truncated_completions): responses that hit
  # rollout.max_new_tokens without an EOS are masked out of the loss (still counted as samples).
  config.rl.mask_truncated = placeholder(bool)
  # Behaviour log-probs for the ratio: "sampler" (the rollout's; float32 matches the trainer to
  # ~2e-6) or "recompute" (a trainer forward before the update, as verl/TRL; use it in bfloat16).
  config.rl.old_logp = placeholder(str)
  # Asynchronous rollouts (rlscale/runner/async_rollouts.py): k = max_off_policy_steps bounds how
  # many updates old the sampling policy may be. 0 = the synchronous loop (each batch drawn by
  # the current policy); k >= 1: batch n is drawn by policy version max(0, n - k) (a fixed lag),
  # in a rollout thread while the trainer updates, so every sample is exactly min(n, k) updates
  # stale when trained on (logged as rollout/staleness_mean and _max).
  config.rl.max_off_policy_steps = 0
  # Correction of the stale batches' loss (rlscale/rl/off_policy.py): "none", "decoupled"
  # (AReaL's decoupled PPO, Fu et al. 2025) or "tis" (truncated importance sampling, Yao et al.
  # 2025); None = "none" at k = 0 and "decoupled" at k >= 1. A correction makes an unset
  # rl.old_logp "recompute" (the proximal policy's log-probs: one more forward per step).
  config.rl.off_policy_correction = placeholder(str)
  # TIS's cap C on pi_old / pi_behav (>= 1; 2 in the paper); AReaL's cap on the decoupled weight
  # (AReaL's behav_imp_weight_cap: tokens above it are dropped; None = no cap).
  config.rl.tis_cap = 2.0
  config.rl.decoupled_weight_cap = placeholder(float)
  # Whiten advantages over the batch's real tokens (PPO).
  config.rl.whiten_advantages = placeholder(bool)
  # PPO critic: value-loss coefficient, value clip range around the rollout values (0 = off),
  # discount gamma and GAE lambda.
  config.rl.vf_coef = placeholder(float)
  config.rl.value_clip_eps = placeholder(float)
  config.rl.gamma = placeholder(float)
  config.rl.lam = placeholder(float)
  # Temperature of the update's log-probabilities: always the rollout temperature (shared field).
  config.rl.temperature = config.rollout.get_ref("temperature")

  # --- Optimizer.
  config.optim = ml_collections.ConfigDict()
  # "adam" or "adamw".
  config.optim.optimizer = "adam"
  # Learning rate at the reference batch (before LR scaling).
  config.optim.learning_rate = 1e-4
  config.optim.b1 = 0.9
  config.optim.b2 = 0.999
  config.optim.eps = 1e-8
  config.optim.weight_decay = 0.0
  # Global gradient-norm clipping threshold (<= 0 = off); optim/clipped logs the steps it fires on.
  # A guard against blow-ups only: the main job's pre-clip norms (train/grad_norm, 500 steps at
  # B = 256) span 3.4-16.0 (median 6.7, 99th percentile 12.5), so the old 1.0 clipped every step,
  # adding a per-step normalisation that differs with batch size and confounds the LR-rule
  # comparison. 50 is ~3x the largest norm seen and above the ~2-3x larger norms that gradient
  # noise gives at B = 32-64, so it fires only on a step far outside the healthy range.
  config.optim.grad_clip_norm = 50.0
  # Schedule: "constant", "cosine" or "linear" (decay after warmup).
  config.optim.schedule = "cosine"
  # What warmup and decay count: "steps" (optimizer updates: warmup_steps, decay_steps) or
  # "samples" (responses consumed: warmup_samples, decay_samples), so runs of different batch
  # sizes apply the same LR at the same responses consumed (rlscale/train/optimizer.py).
  config.optim.schedule_unit = "steps"
  # Warmup and decay horizon in optimizer updates (schedule_unit="steps"); decay_steps None =
  # the run's optimizer updates (RL steps x epochs x minibatches).
  config.optim.warmup_steps = 0
  config.optim.decay_steps = placeholder(int)
  # Warmup and decay horizon in responses (schedule_unit="samples"); decay_samples None = the
  # run's budget (train.total_samples, or train.total_steps x B).
  config.optim.warmup_samples = 0
  config.optim.decay_samples = placeholder(int)
  # Learning rate at the end of a cosine/linear decay, as a fraction of the peak.
  config.optim.final_lr_frac = 0.0
  # PPO critic learning rate at the reference batch (scaled like the policy's); None = learning_rate.
  config.optim.critic_learning_rate = placeholder(float)
  # LR scaling with batch B relative to reference_batch: "none", "linear", "sqrt", or "sqrt_adam"
  # (sqrt with Adam's betas and eps adjusted for k = B / B0, as adjust_adam; Malladi et al. 2022).
  config.optim.lr_scaling = "none"
  config.optim.reference_batch = 256
  # Adjust Adam betas/eps for the batch ratio with any LR rule (docs/design.md,
  # rlscale/train/optimizer.py); lr_scaling="sqrt_adam" implies it.
  config.optim.adjust_adam = False

  # --- Supervised warm start on the task's reference answers (cached; sweeps reuse it).
  config.sft = ml_collections.ConfigDict()
  config.sft.steps = 300
  config.sft.batch_size = 64
  config.sft.learning_rate = 1e-3
  # Seed of the warm start (the built-in model's init and the SFT data order); None = `seed`.
  # `seed` then seeds RL alone, so runs with several seeds can share one warm start.
  config.sft.seed = placeholder(int)
  # Shared cache directory for warm starts; None = <workdir>/sft.
  config.sft.cache_dir = ml_collections.config_dict.placeholder(str)

  # --- Loop, evaluation, checkpoints.
  config.train = ml_collections.ConfigDict()
  # RL steps. With train.total_samples set, set this to None (in a config or sweep file) or to the
  # step count the budget implies; any other value is refused.
  config.train.total_steps = 500
  # Budget in responses (None = unset: train.total_steps decides). When set, the run takes
  # ceil(total_samples / B) steps with B = rl.prompts_per_step * rl.group_size, so runs of
  # different batch sizes are compared at equal responses consumed (the batch-size study).
  config.train.total_samples = placeholder(int)
  config.train.eval_every = 50
  # Evaluate whenever the responses consumed cross a multiple of this (None = unset: use
  # train.eval_every, which this replaces when set). With B dividing it, every batch size
  # evaluates at the same sample counts; otherwise at the first step past each multiple (the
  # record's `samples` is exact). The warm start (0 samples) and the last step always evaluate.
  config.train.eval_every_samples = placeholder(int)
  config.train.checkpoint_every = 50
  # Measure the gradient noise scale (McCandlish et al. 2018) on one device: an unset
  # rl.microbatches then splits each minibatch into >= 2 slices of whole groups (a warning when
  # the batch allows none); False keeps the fastest split (`update.microbatch_count`).
  config.train.measure_noise_scale = False
  config.train.keep_checkpoints = 2
  # Sequence packing (verl use_dynamic_bsz, tunix max_seq_token_per_tpu): None trains one padded
  # row per response; an int packs the prompt + response sequences into rows of this many tokens
  # (>= rollout.max_prompt_tokens + rollout.max_new_tokens), the update, reference, behaviour
  # and value passes alike, with the padded batch's loss (`rlscale.train.packed_update`).
  config.train.max_tokens_per_row = placeholder(int)
  # With packing: tokens per microbatch (a multiple of rows; >= train.max_tokens_per_row),
  # replacing rl.microbatches' row count; None: `rlscale.packing.layout`'s rules.
  config.train.max_tokens_per_microbatch = placeholder(int)
  config.eval = ml_collections.ConfigDict()
  # pass@k from k samples per held-out prompt, drawn with the rollout's sampling config.
  config.eval.pass_k = 4
  # Sampling of the sampled held-out metrics (mean reward, sampled accuracy, pass@k): each field
  # left None takes the rollout's (rollout.temperature, top_k, top_p, min_p); greedy accuracy
  # always decodes greedily.
  config.eval.sampling = ml_collections.ConfigDict(dict(
      temperature=placeholder(float), top_k=placeholder(int), top_p=placeholder(float),
      min_p=placeholder(float)))

  if arg not in (None, "smoke"):
    raise ValueError(f"config argument {arg!r} is not one of [None, 'smoke'] "
                     "(use --config=experiments/configs/default.py:smoke)")
  if arg == "smoke":
    # Marks the run as a pipeline check: its closing line says so (no learning is expected).
    config.smoke = True
    # A warm start that leaves both right and wrong answers in most groups, so the smoke run's
    # update (and DAPO's dynamic sampling, the custom-loss notebook) works on a real signal:
    # sums of two one-digit numbers after 60 SFT steps at 3e-3 give ~10-30% held-out accuracy and
    # reward variance in 50-75% of the G = 4 groups (a 30-step warm start on the main task
    # left nearly every group all wrong, so most smoke updates had zero advantages).
    config.task.kwargs.min_terms = 2
    config.task.kwargs.max_terms = 2
    config.sft.steps = 60
    config.sft.learning_rate = 3e-3
    config.rl.prompts_per_step = 4
    config.rl.group_size = 4
    config.train.total_steps = 6
    config.train.eval_every = 3
    config.train.checkpoint_every = 3
    config.task.eval_size = 16
    config.eval.pass_k = 2
  # Derived: responses per optimizer step (a reference, so command-line overrides of
  # prompts_per_step or group_size update it too).
  config.rl.batch_size = config.rl.get_ref("prompts_per_step") * config.rl.get_ref("group_size")
  return config
