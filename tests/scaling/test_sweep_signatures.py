"""Which sweep runs merge (`sweep_plan.effective_signature`) and which share a warm start
(`sweep_plan.warm_start_signature`, trained once by `sweep.prepare_warm_starts`)."""

from experiments.configs.default import get_config
from rlscale.scaling import sweep
from rlscale.scaling import sweep_plan


def _config(prompts, rule, **optim):
  config = get_config()
  config.rl.prompts_per_step = prompts  # G = 8: B = 8 P, reference batch 256 = P 32
  config.optim.lr_scaling = rule
  config.optim.update(optim)
  return config


def test_sqrt_adam_merges_with_sqrt_only_at_the_reference_batch():
  def sig(prompts, rule, **optim):
    return sweep_plan.effective_signature(_config(prompts, rule, **optim))
  # B = 256 = B0: k = 1, the same LR and the same betas and eps: one run.
  assert sig(32, "sqrt_adam") == sig(32, "sqrt") == sig(32, "none")
  # B = 512, k = 2: the same LR 1e-4 x sqrt(2), but b1 0.8 against 0.9: two runs.
  assert sig(64, "sqrt_adam") != sig(64, "sqrt")
  # adjust_adam with sqrt is the same computation as sqrt_adam.
  assert sig(64, "sqrt_adam") == sig(64, "sqrt", adjust_adam=True)
  # Outside the rule's range (k = 16: 16 x (1 - 0.9) >= 1) the run keeps its rule apart.
  assert sig(512, "sqrt_adam") != sig(512, "sqrt")


def test_rl_seeds_share_the_warm_start_of_their_sft_seed(tmp_path, monkeypatch):
  runs = sweep_plan.plan(get_config(), [{"seed": s, "sft.seed": 0} for s in (0, 1, 2)] + [
      {"seed": 1}, {"seed": 0, "sft.seed": None}], str(tmp_path))
  # seed 0 with sft.seed None is seed 0 with sft.seed 0: merged; the rest are four runs.
  assert [r.name for r in runs] == ["seed=0,sft.seed=0", "seed=1,sft.seed=0", "seed=2,sft.seed=0",
                                    "seed=1"]
  assert runs[0].aliases == ["seed=0,sft.seed=None"]
  signatures = [sweep_plan.warm_start_signature(r.config) for r in runs]
  assert len(set(signatures[:3])) == 1 and signatures[3] != signatures[0]
  trained = []
  monkeypatch.setattr("rlscale.runner.builders.build_run",
                      lambda config, workdir, log: trained.append((config.seed, config.sft.seed)))
  sweep.prepare_warm_starts(runs, str(tmp_path), log=lambda _: None)
  assert trained == [(0, 0), (1, None)]  # two warm starts: sft seed 0 and sft seed 1
