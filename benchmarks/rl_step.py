"""W2: one GRPO step end to end, rlscale against TRL's GRPOTrainer, interleaved in one process.

  python benchmarks/rl_step.py --out DIR [--quick]

Workload W2 (the RL-step issue): the W1 model (Qwen3 layout, hidden 256, intermediate 768, 4
layers, 8 heads, 4 KV heads, head_dim 32, vocab 512; random weights from `init_params(key 0)`)
written once as a HF checkpoint that both systems load, with a character-level tokenizer saved
as a `tokenizers` tokenizer.json (ids of `rlscale.tokenizers.CharTokenizer`) that both read;
8 prompts `a + b=` (the built-in arithmetic task, a, b in 0..99, new prompts every step) x 8
samples, exactly 64 new tokens (EOS disabled), temperature 1, beta = 0 (no reference model), one Adam update (lr 1e-6, constant,
gradient clipping at norm 1 as both default to), float32, no gradient checkpointing.

  rlscale: the runner's own step (`rlscale.runner.rl_step.rl_step` on the Run that
    `builders.build_run` makes from the W2 config, its sampler's EOS disabled: the jitted Sampler
    with the shared prefill, the verifier through `score_batch`, GRPO advantages, the jitted
    update step with its per-executable CPU compiler options, all on the mesh {data: 1}), at
    rollout.host_threads 1 (the runner's default) and at the CPU count (row chunks decoded concurrently, what the config recommends for
    long responses on a CPU); the better is rlscale's figure, as for TRL's thread counts.
  TRL: `GRPOTrainer` (loss_type "grpo", the same seq-mean-token-mean as rlscale's GRPO preset)
    with a reward function that calls the same verifier, at 1 torch thread and at the CPU count
    (the better is the peer's figure: on a busy 2-core machine 2 threads can stall; a thread
    count whose warm-up step takes STALL_FACTOR x the best one's is reported in
    trl_stalled_threads and not timed further, so a stall cannot hold the suite up for minutes).

Order: rlscale compiles (one untimed step per host-thread count), then rounds of [TRL at each
thread count, rlscale at each host-thread count],
so the systems alternate A, B, A, B within one process and a noisy machine shows in all of them.
Round 1 is the warm-up; the report is the median over rounds 2..N (2..6 by default, 2..4 with
--quick). Every step starts from the seed-0 weights and fresh Adam moments, so every step does the
same work.

Splits (seconds): generation (sampler / TRL's `_generate`), reward (decode + verifier / TRL's
`_calculate_rewards`), forward (log-probs of the response tokens: TRL's
`_get_per_token_logps_and_entropies` inside its step; for rlscale, whose update step fuses forward,
backward and Adam into one executable, a log-prob forward over the same [B, T] batch timed right
after the step, outside it), backward_optimizer (the step's rest: for rlscale training - forward,
which includes the advantages and host transfers; for TRL total - the three above).

Writes DIR/rl_step.json: seconds_per_step and splits (medians) per system (rlscale's with its
host_threads), rlscale_by_host_threads, trl_by_threads, the
ratio trl / rlscale, every step (seconds, splits, load average before it), compiles_after_warmup
(JAX backend compiles in rounds 2..N, should be 0), the workload, machine, versions, peak RSS.
Without torch / transformers / trl the TRL entries are null with the reason ("not installed").
Sizes can be overridden (--hidden_size, --num_layers, --new_tokens, ...) for tests and the GPU
script; the defaults are W2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position (after the sys.path line)
from benchmarks.common import (MODEL_FIELDS, add_model_args, load_average, machine_info,
                               model_config_from_args)
from experiments.configs.default import get_config
from rlscale import outputs
from rlscale.model import ModelConfig, init_params, save_hf_checkpoint
from rlscale.runner import builders
from rlscale.runner import rl_step as rl_step_lib
from rlscale.runner.timing import RunClock
from rlscale.sampler import SamplingConfig, Sampler
from rlscale.tasks import base
from rlscale.tasks.rewards import score_batch
from rlscale.tokenizers import CharTokenizer
from rlscale.train import passes
from rlscale.train import update as update_lib
from rlscale.train import update_fn as update_fn_lib
from rlscale.train.optimizer import make_optimizer
from rlscale.train.state import create_train_state

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
SPLITS = ("generation", "reward", "forward", "backward_optimizer")
PROMPT_BUCKET = 8  # "99+99=" is 6 characters: one static prompt width
STALL_FACTOR = 3.0  # a TRL thread count this much slower than the best in warm-up is dropped


def write_char_tokenizer(directory: str) -> None:
  """Saves CharTokenizer's vocabulary as a `tokenizers` WordLevel tokenizer.json (one token per
  character, decoded by concatenation) plus tokenizer_config.json naming pad/bos/eos/unk, so
  `rlscale.tokenizers.load_tokenizer(directory)` and transformers' AutoTokenizer read it."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  char = CharTokenizer()
  vocab = {token: i for i, token in enumerate(CharTokenizer.SPECIALS)}
  vocab.update({c: char.encode(c)[0] for c in CharTokenizer.CHARS})
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  # Every character is its own pre-token ([\s\S] matches the newline too).
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"[\s\S]"), "isolated")
  tokenizer.decoder = tokenizers.decoders.Fuse()
  tokenizer.add_special_tokens(list(CharTokenizer.SPECIALS))
  os.makedirs(directory, exist_ok=True)
  tokenizer.save(os.path.join(directory, "tokenizer.json"))
  specials = dict(zip(("pad_token", "bos_token", "eos_token", "unk_token"), CharTokenizer.SPECIALS))
  with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
               "padding_side": "left", **specials}, f, indent=2)


def write_checkpoint(directory: str, model_config: ModelConfig) -> None:
  """The W2 policy (init_params, key 0) as a HF checkpoint with the character tokenizer."""
  save_hf_checkpoint(directory, model_config, init_params(model_config, jax.random.key(0)))
  write_char_tokenizer(directory)


def peak_rss_mib() -> float:
  """Peak resident memory of this process so far (MiB; Linux reports ru_maxrss in KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rlscale_config(directory: str, args):
  """The runner config of W2: the checkpoint in `directory` without rematerialisation, the built-in
  arithmetic task with prompts `a + b=` (a, b in 0..99), P x G, max_new_tokens, temperature 1,
  GRPO without KL, Adam at lr 1e-6 (constant)."""
  config = get_config()
  config.model.source, config.model.checkpoint_path = "hf", directory
  config.model.remat = False  # W2: no gradient checkpointing (the runner's default for HF is on)
  config.task.source, config.task.prompt_template = "arithmetic", "{question}="
  config.task.kwargs = {"num_operands": 2, "min_operand": 0, "max_operand": 99, "operators": "+"}
  config.task.eval_size = 8
  config.rollout.max_prompt_tokens = PROMPT_BUCKET
  config.rollout.max_new_tokens = args.new_tokens
  config.rollout.temperature = 1.0
  config.rl.prompts_per_step, config.rl.group_size = args.prompts, args.group
  config.rl.kl_coef = 0.0
  config.optim.learning_rate, config.optim.schedule = 1e-6, "constant"
  return config


class RlscaleStep:
  """rlscale's side: the runner's step (`rl_step.rl_step`) on the `builders.build_run` of
  `rlscale_config`, with a sampler whose EOS is disabled; each call from the seed-0 weights with
  fresh Adam moments."""

  def __init__(self, directory: str, args, workdir: str, compiles: list, host_threads: int):
    self.host_threads = host_threads
    self.compiles = compiles  # JAX backend compile events, appended by a listener
    run = builders.build_run(rlscale_config(directory, args), workdir, log=lambda _: None)
    model_config = dataclasses.replace(run.model_config, dtype=args.dtype)  # compute dtype
    rl = run.rl_config
    self.optimizer = make_optimizer(rlscale_config(directory, args).optim,
                                    **update_lib.optimizer_args(rl, run.total_steps))
    layout = run.layout
    self.params = layout.host_params(run.state.params)
    sampler = Sampler(model_config, args.new_tokens, SamplingConfig(temperature=1.0), (),
                      run.tokenizer.pad_id, layout.mesh, prompt_buckets=run.prompt_buckets,
                      param_shardings=layout.state_shardings.params, host_threads=host_threads)
    update = update_fn_lib.make_update_fn(model_config, rl, self.optimizer, layout.mesh,
                                          state_shardings=layout.state_shardings)
    self.run = dataclasses.replace(run, model_config=model_config, sampler=sampler,
                                   trainer=dataclasses.replace(run.trainer, update=update))
    self.logp_fn = passes.make_logp_fn(model_config, 1.0, layout.mesh,
                                       layout.state_shardings.params)
    rows = args.prompts * args.group
    width = PROMPT_BUCKET + args.new_tokens
    tokens = np.random.default_rng(0).integers(0, model_config.vocab_size, (rows, width), np.int32)
    self.forward_batch = layout.place_batch(
        {"tokens": tokens, "input_mask": np.ones_like(tokens),
         "response_mask": np.ones((rows, args.new_tokens), np.int32)})
    self.counters = {"samples": 0, "prompts": 0}

  def step(self, index: int) -> dict:
    """One timed step; returns seconds, splits and the load average before it."""
    state = self.run.layout.place_state(create_train_state(self.params, self.optimizer))
    self.counters["prompts"] = index * self.run.rl_config.prompts_per_step  # new prompts each step
    clock = RunClock()
    load = load_average()
    compiles_before = len(self.compiles)
    start = time.perf_counter()
    record, state = rl_step_lib.rl_step(
        self.run, state, jax.random.key(index), self.counters, clock)
    jax.block_until_ready(state)
    total = time.perf_counter() - start
    # The forward share of the fused update executable, timed apart on the same [B, T] shape.
    forward_start = time.perf_counter()
    jax.block_until_ready(self.logp_fn(state.params, self.forward_batch))
    forward = time.perf_counter() - forward_start
    parts = clock.totals  # execution seconds per part, compilation apart
    return {"seconds": total, "generation": parts["generation"], "reward": parts["reward"],
            "forward": forward, "backward_optimizer": parts["training"] - forward,
            "training": parts["training"], "compile": parts["compile"],
            "reward_mean": record["reward/mean"], "tokens_generated": record["tokens/generated"],
            "load_average": load, "compiles": len(self.compiles) - compiles_before}


def trl_available() -> str | None:
  """None when torch, transformers and trl import; else the reason ("not installed: ...")."""
  missing = []
  for name in ("torch", "transformers", "trl", "datasets"):
    try:
      __import__(name)
    except ImportError:
      missing.append(name)
  return f"not installed: {', '.join(missing)}" if missing else None


def rlscale_round(steppers: list[RlscaleStep], results: dict) -> None:
  """One step of each rlscale variant, appended to results["rlscale"][str(host_threads)]."""
  for stepper in steppers:
    steps = results["rlscale"][str(stepper.host_threads)]
    steps.append(stepper.step(len(steps) + 1))
    print(f"  rlscale ({stepper.host_threads} host thread(s)) step {len(steps)}: "
          f"{steps[-1]['seconds']:.2f} s", flush=True)


def run_interleaved(directory: str, args, steppers: list[RlscaleStep], rounds: int,
                    thread_counts: list[int]) -> dict:
  """Runs TRL's GRPOTrainer for `rounds` rounds of one step per thread count; after each round's
  TRL steps a callback runs one step of each rlscale variant. Returns {"rlscale": {host_threads:
  [steps]}, "trl": {threads: [steps]}, "stalled": {threads: warm-up seconds}} (TRL thread counts
  dropped after the warm-up)."""
  import datasets  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  import trl  # pylint: disable=g-import-not-at-top

  task = steppers[0].run.task
  examples = [task.train_example(i) for i in range(args.prompts * rounds * len(thread_counts))]
  dataset = datasets.Dataset.from_dict({"prompt": [task.format_prompt(e) for e in examples],
                                        "answer": [e.answer for e in examples]})

  def verifier_reward(prompts, completions, answer, **kwargs):  # pylint: disable=unused-argument
    scored = score_batch(task, completions, [base.Example(p, a) for p, a in zip(prompts, answer)])
    return [float(s) for s in scored.rewards]

  model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
  tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
  initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
  config = trl.GRPOConfig(
      output_dir=os.path.join(directory, "trl"), per_device_train_batch_size=args.prompts * args.group,
      num_generations=args.group, max_completion_length=args.new_tokens, temperature=1.0,
      beta=0.0, learning_rate=1e-6, lr_scheduler_type="constant", loss_type="grpo",
      max_steps=rounds * len(thread_counts), logging_strategy="no", save_strategy="no",
      report_to="none", use_cpu=not torch.cuda.is_available(), bf16=args.dtype == "bfloat16",
      gradient_checkpointing=False, seed=0,
      generation_kwargs={"min_new_tokens": args.new_tokens}, disable_tqdm=True,
      dataloader_num_workers=0, shuffle_dataset=False)
  trainer = trl.GRPOTrainer(model=model, reward_funcs=verifier_reward, args=config,
                            train_dataset=dataset, processing_class=tokenizer)
  splits = dict.fromkeys(SPLITS, 0.0)

  def timed(method, split):
    def wrapper(*a, **kw):
      start = time.perf_counter()
      try:
        return method(*a, **kw)
      finally:
        splits[split] += time.perf_counter() - start
    return wrapper

  trainer._generate = timed(trainer._generate, "generation")  # pylint: disable=protected-access
  trainer._calculate_rewards = timed(trainer._calculate_rewards, "reward")  # pylint: disable=protected-access
  trainer._get_per_token_logps_and_entropies = timed(  # pylint: disable=protected-access
      trainer._get_per_token_logps_and_entropies, "forward")  # pylint: disable=protected-access
  results = {"rlscale": {str(s.host_threads): [] for s in steppers},
             "trl": {str(t): [] for t in thread_counts}, "stalled": {}}
  done = lambda: len(results["rlscale"][str(steppers[0].host_threads)])  # noqa: E731
  stalled = results["stalled"]

  class Interleave(transformers.TrainerCallback):
    """Fresh weights and Adam moments, the thread count and the timer around each TRL step; one
    rlscale step after each round; stops the trainer after `rounds` rounds."""

    def __init__(self):
      self.active = list(thread_counts)  # thread counts still timed
      self.queue = list(self.active)  # thread counts left in this round

    def on_step_begin(self, args_, state, control, **kwargs):  # pylint: disable=unused-argument
      self.threads = self.queue[0]
      torch.set_num_threads(self.threads)
      with torch.no_grad():
        for name, value in trainer.model.state_dict().items():
          value.copy_(initial[name])
      trainer.optimizer.optimizer.state.clear()
      splits.update(dict.fromkeys(SPLITS, 0.0))
      self.load = load_average()
      self.start = time.perf_counter()

    def on_step_end(self, args_, state, control, **kwargs):  # pylint: disable=unused-argument
      total = time.perf_counter() - self.start
      step = {"seconds": total, **{k: splits[k] for k in SPLITS[:3]},
              "backward_optimizer": total - sum(splits[k] for k in SPLITS[:3]),
              "load_average": self.load}
      results["trl"][str(self.threads)].append(step)
      print(f"  TRL {self.threads} thread(s) step {len(results['trl'][str(self.threads)])}: "
            f"{total:.2f} s", flush=True)
      self.queue.pop(0)
      if self.queue:
        return
      rlscale_round(steppers, results)
      if done() == 1:
        # A thread count whose warm-up step took STALL_FACTOR x the best one's has stalled (2
        # torch threads on a busy 2-core machine: minutes per step); it is not timed further.
        warmups = {t: results["trl"][str(t)][0]["seconds"] for t in self.active}
        best = min(warmups.values())
        for t, seconds in warmups.items():
          if seconds > STALL_FACTOR * best:
            self.active.remove(t)
            stalled[str(t)] = seconds
            print(f"  TRL at {t} thread(s) stalled ({seconds:.0f} s vs {best:.0f} s): "
                  "not timed further", flush=True)
      if done() == rounds:
        control.should_training_stop = True
      self.queue = list(self.active)
      return control

  trainer.add_callback(Interleave())
  trainer.train()
  torch.set_num_threads(os.cpu_count())
  return results


def summarize(steps: list[dict], first_timed: int = 1) -> dict | None:
  """Medians over steps[first_timed:] (rounds 2..N) of the total and of each split."""
  timed = steps[first_timed:]
  if not timed:
    return None
  return {"seconds_per_step": statistics.median(s["seconds"] for s in timed),
          "splits": {k: statistics.median(s[k] for s in timed) for k in SPLITS},
          "steps": steps}


def thread_counts(flag: str | None) -> list[int]:
  """A comma-separated count list ("1,2") as ints; None: 1 and the CPU count."""
  return [int(t) for t in flag.split(",")] if flag else sorted({1, os.cpu_count() or 1})


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True, help="directory for rl_step.json")
  parser.add_argument("--quick", action="store_true", help="rounds 1..4 instead of 1..6")
  parser.add_argument("--rounds", type=int, default=None,
                      help="rounds including the warm-up (default 6, 4 with --quick)")
  parser.add_argument("--no_trl", action="store_true", help="time rlscale alone")
  parser.add_argument("--trl_threads", default=None,
                      help="comma-separated torch thread counts for TRL (default: 1 and the CPU "
                           "count)")
  parser.add_argument("--host_threads", default=None,
                      help="comma-separated rollout.host_threads for rlscale (default: 1 and the "
                           "CPU count; the better is rlscale's figure)")
  parser.add_argument("--prompts", type=int, default=8)
  parser.add_argument("--group", type=int, default=8)
  parser.add_argument("--new_tokens", type=int, default=64)
  add_model_args(parser)
  args = parser.parse_args(argv)
  rounds = args.rounds or (4 if args.quick else 6)
  if rounds < 2:
    parser.error(f"--rounds must be >= 2 (round 1 is the warm-up), got {rounds}")
  threads, host_threads = thread_counts(args.trl_threads), thread_counts(args.host_threads)
  model_config = model_config_from_args(args)

  compiles: list = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, duration, **kw: compiles.append(duration) if event == COMPILE_EVENT else None)
  load_before = load_average()
  trl_reason = "not run (--no_trl)" if args.no_trl else trl_available()
  with tempfile.TemporaryDirectory() as directory:
    write_checkpoint(directory, model_config)
    steppers = [RlscaleStep(directory, args, os.path.join(directory, f"run{h}"), compiles, h)
                for h in host_threads]
    for stepper in steppers:
      stepper.step(0)  # compiles the sampler, update and forward executables (not reported)
    if trl_reason is None:
      results = run_interleaved(directory, args, steppers, rounds, threads)
    else:
      results = {"rlscale": {str(h): [] for h in host_threads}, "trl": {}, "stalled": {}}
      for _ in range(rounds):
        rlscale_round(steppers, results)
  # JAX compiles inside the timed rounds 2..N (the rlscale steps; TRL compiles nothing): 0 expected.
  compiles_after_warmup = sum(s["compiles"] for steps in results["rlscale"].values()
                              for s in steps[1:])
  rlscale_by_host_threads = {h: summarize(steps) for h, steps in results["rlscale"].items()}
  best_host_threads = min(rlscale_by_host_threads,
                          key=lambda h: rlscale_by_host_threads[h]["seconds_per_step"])
  rl = rlscale_by_host_threads[best_host_threads]
  trl_by_threads = {t: summarize(steps) for t, steps in results["trl"].items()}
  trl_best = min((s for s in trl_by_threads.values() if s), default=None,
                 key=lambda s: s["seconds_per_step"])
  best_threads = next((t for t, s in trl_by_threads.items() if s is trl_best), None)
  report = {
      "rlscale": {**rl, "host_threads": int(best_host_threads)},
      "rlscale_by_host_threads": rlscale_by_host_threads,
      "trl": ({**trl_best, "torch_threads": int(best_threads)} if trl_best else None),
      "trl_status": trl_reason or "ran",
      "trl_by_threads": trl_by_threads,
      "trl_stalled_threads": results["stalled"],
      "ratio_trl_over_rlscale": (trl_best["seconds_per_step"] / rl["seconds_per_step"]
                                 if trl_best else None),
      "compiles_after_warmup": compiles_after_warmup,
      "workload": {"name": "W2", "prompts": args.prompts, "samples_per_prompt": args.group,
                   "new_tokens": args.new_tokens, "prompt_bucket": PROMPT_BUCKET,
                   "temperature": 1.0, "beta": 0.0, "learning_rate": 1e-6, "dtype": args.dtype,
                   "model": {f: getattr(model_config, f) for f in MODEL_FIELDS + ("dtype",)},
                   "params": model_config.num_params(), "rounds": rounds,
                   "timed_rounds": f"2..{rounds}", "host_threads": host_threads,
                   "trl_threads": threads},
      "machine": {**machine_info(), "loadavg_before": load_before, "loadavg_after": load_average()},
      "peak_rss_mib": peak_rss_mib(),
      "quick": args.quick,
  }
  outputs.write_json(os.path.join(args.out, "rl_step.json"), report, indent=2)
  line = (f"rlscale ({best_host_threads} host thread(s)) {rl['seconds_per_step']:.3f} s/step "
          + json.dumps(
      {k: round(v, 3) for k, v in rl["splits"].items()}))
  if trl_best:
    line += (f"; TRL ({best_threads} thread(s)) {trl_best['seconds_per_step']:.3f} s/step "
             + json.dumps({k: round(v, 3) for k, v in trl_best["splits"].items()})
             + f"; TRL / rlscale = {report['ratio_trl_over_rlscale']:.2f}")
  else:
    line += f"; TRL {report['trl_status']}"
  print(line + f"; compiles after warm-up {compiles_after_warmup}; load {load_average()}",
        flush=True)
  return report


if __name__ == "__main__":
  main()
