"""What a run shows on the terminal: the progress bar's rate and ETA without compilation, the
warm start's accuracy from the start, compilations announced, signals acknowledged for the step
that is running, and a finished run answered before the model is built."""

import io
import json
import shutil

import pytest

from rlscale.runner import builders
from rlscale.runner import evaluate, loop, run_dir
from rlscale.runner import progress
from rlscale.runner.interrupts import acknowledgement
from rlscale.runner.loop import train_and_evaluate
from tests.runner.runner_configs import signal_self_on, tiny_config


@pytest.fixture(scope="module")
def sft_cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("sft_cache"))


def test_bar_rate_and_eta_leave_out_compilation():
  out = io.StringIO()
  bar = progress.StepBar(total=10, desc="RL", unit="step", file=out, mininterval=0)
  # Before a step is done: no rate, no ETA, as tqdm shows them.
  assert "<?, ?step/s" in out.getvalue()
  # Step 1: 20 s, 19 of them compiling; step 2: 1 s. Executed: 1 + 1 = 2 s for 2 steps, so
  # 1 step/s and 8 steps left = 8 s (tqdm's wall-clock rate would say 2 / 21 s and 84 s left).
  bar.step_done({"time/total": 20.0, "time/compile": 19.0})
  bar.step_done({"time/total": 1.0, "time/compile": 0.0})
  assert bar.format_dict["rate"] == pytest.approx(1.0)
  assert "<00:08, " in bar.format_meter(**bar.format_dict)
  bar.close()


def test_compile_notice_and_shape_log_name_what_was_new():
  shapes = loop._ShapeLog(evaluated=True)  # a fresh run: the warm start's evaluation compiled
  step = {"batch/prompt_bucket": 16, "batch/prompt_width": 12, "batch/response_width": 4}
  assert shapes.new(step) == ["sampler at the 16-token prompt bucket",
                              "update step at prompt 12 x response 4 tokens, a batch shape "
                              "first met"]
  assert shapes.new({**step, "eval/greedy_accuracy": 0.5}) == []
  assert shapes.new({**step, "batch/response_width": 6}) == [
      "update step at prompt 12 x response 6 tokens, a batch shape first met"]
  resumed = loop._ShapeLog()  # a resumed run compiles its first evaluation mid-run
  resumed.new(step)
  assert resumed.new({**step, "eval/greedy_accuracy": 0.5}) == [
      "first held-out evaluation in this process"]
  assert progress.compile_notice(34, 35.04, ["update step at prompt 12 x response 6 tokens"]) == (
      "step 34: 35.0 s of JAX compilation (update step at prompt 12 x response 6 tokens); logged "
      "as time/compile, shaded on curves_vs_wall_time.png and left out of the ETA")


@pytest.mark.parametrize("where, acknowledged", [
    # Evaluations run at steps 0, 2 and 4 (train.eval_every = 2): the third is the last step's.
    ((evaluate.Evaluator, "__call__", 3), acknowledgement(4)),  # was "finishing step 5"
    ((run_dir, "export_policy", 1), acknowledgement(None)),  # after the last step: was an exit with 130
])
def test_a_signal_names_the_step_running_and_a_finished_run_completes(
    tmp_path, sft_cache, monkeypatch, capfd, where, acknowledged):
  signal_self_on(monkeypatch, *where)
  summary = train_and_evaluate(tiny_config(sft__cache_dir=sft_cache), str(tmp_path))
  assert summary["steps"] == 4 and "interrupted" not in summary  # the run had no step left
  err = capfd.readouterr().err
  assert acknowledged in err and "finishing step 5" not in err
  # The bar shows the warm start's held-out accuracy before step 1 (it showed "acc=-").
  warm = json.load(open(tmp_path / "warm_start_eval.json"))["eval/greedy_accuracy"]
  assert f"0/4 [00:00<?, ?step/s, acc={warm:.3f}, reward=-]" in err


def test_a_finished_run_is_answered_before_the_model_is_built(tmp_path, sft_cache, monkeypatch,
                                                               capsys):
  config = tiny_config(sft__cache_dir=sft_cache, train__total_steps=2)
  summary = train_and_evaluate(config, str(tmp_path / "done"))
  capsys.readouterr()

  def no_build(*args, **kwargs):
    raise AssertionError("build_run called: the model was loaded")
  monkeypatch.setattr(builders, "build_run", no_build)
  assert train_and_evaluate(config, str(tmp_path / "done")) == summary
  assert capsys.readouterr().out == (
      f"run already complete (2 steps); results: {tmp_path / 'done' / 'summary.json'}\n")
  # More steps asked for (a resumable change), the last checkpoint or the policy missing: the
  # run is built (to train on, or to export from the checkpoint).
  with pytest.raises(AssertionError, match="build_run called"):
    train_and_evaluate(tiny_config(sft__cache_dir=sft_cache, train__total_steps=3),
                       str(tmp_path / "done"))
  shutil.copytree(tmp_path / "done", tmp_path / "lost")
  shutil.rmtree(tmp_path / "lost" / "checkpoints" / "2")
  with pytest.raises(AssertionError, match="build_run called"):
    train_and_evaluate(config, str(tmp_path / "lost"))
  shutil.rmtree(tmp_path / "done" / "policy")
  with pytest.raises(AssertionError, match="build_run called"):
    train_and_evaluate(config, str(tmp_path / "done"))
