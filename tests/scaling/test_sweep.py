"""Sweep planning (names, duplicates, warm-start cache), commands and the CLI's bad-input errors."""

import json
import os
import subprocess
import sys
import warnings

import jax
import pytest

from rlscale.scaling import pinned
from rlscale.scaling import sweep
from rlscale.scaling import sweep_plan
from tests.timeouts import hang_timeout

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BATCH_LR = os.path.join(ROOT, "experiments", "sweeps", "batch_lr.py")


def _plan(arg, tmp_path):
  base = sweep_plan.load_sweep_module(BATCH_LR).get_config(arg)
  return sweep_plan.plan(base, sweep_plan.get_sweep(BATCH_LR, arg), str(tmp_path))


def test_core_sets_split_the_cores():
  assert sweep.core_sets(2, [0, 1]) == [[0], [1]]
  assert sweep.core_sets(2, [0, 1, 2, 3]) == [[0, 2], [1, 3]]
  assert sweep.core_sets(3, [0, 1]) == [[0, 1]] * 3


def _cli(*args, cwd=ROOT):
  return subprocess.run([sys.executable, "-m", "rlscale.sweep", *args], cwd=cwd,
                        capture_output=True, text=True, timeout=hang_timeout(60))


def test_list_prints_one_command_per_run_of_the_shard(tmp_path):
  out = _cli(f"--config={BATCH_LR}:smoke", f"--workdir={tmp_path}", "--list", "--shard=1/3")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  assert len(lines) == 3  # runs 1, 4, 7 of 8
  assert all(line.startswith("python -m rlscale.main ") for line in lines)


def test_list_into_a_pipe_closed_by_its_reader_ends_quietly(tmp_path):
  # `--list | head -1`, made deterministic: the reader has gone before the first write.
  proc = subprocess.Popen([sys.executable, "-m", "rlscale.sweep", f"--config={BATCH_LR}:smoke",
                           f"--workdir={tmp_path}", "--list"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  proc.stdout.close()
  err = proc.stderr.read()
  # Was "error: [Errno 32] Broken pipe" and status 2: now as a tool killed by SIGPIPE, 128 + 13.
  assert proc.wait(timeout=hang_timeout(60)) == 141 and err == ""


@pytest.mark.parametrize("args, message", [
    (("--shard=3/2",), "error: --shard='3/2': need 0 <= i < n"),
    (("--config.rl.prompt_per_step=3",), "error: unknown config field 'rl.prompt_per_step'"),
    (("--parallel=0",), "error: --parallel must be >= 1"),
])
def test_bad_input_is_one_error_line(tmp_path, args, message):
  out = _cli(f"--config={BATCH_LR}:smoke", f"--workdir={tmp_path}", *args)
  assert out.returncode == 2
  assert out.stderr.strip().splitlines() == [out.stderr.strip()]
  assert out.stderr.startswith(message)


@pytest.mark.parametrize("body, message", [
    # The error names the run of the file whose override is bad (run 1, counted from 0).
    ("def get_sweep(arg=None):\n  return [{'seed': 0}, {'seed': 1, 'rl.prompt_per_step': 8}]\n",
     "error: sweep run 1 (seed=1,prompt_per_step=8): sweep override: unknown config field "
     "'rl.prompt_per_step'; closest fields: rl.prompts_per_step"),
    ("def get_sweep(arg=None):\n  return [{'seed': 0}, {'seed': 0}]\n",
     "error: sweep runs 0 and 1 would share the workdir runs/seed=0"),
])
def test_bad_sweep_files(tmp_path, body, message):
  path = tmp_path / "bad_sweep.py"
  path.write_text("import os\nfrom rlscale.runner.config_files import load_config_file\n"
                  f"def get_config(arg=None):\n  return load_config_file({os.path.join(ROOT, 'experiments', 'configs', 'default.py')!r})\n"
                  + body)
  out = _cli(f"--config={path}", f"--workdir={tmp_path / 'w'}")
  assert out.returncode == 2
  assert out.stderr.strip().startswith(message), out.stderr


def test_progress_eta_scales_seconds_per_response_to_each_budget(tmp_path):
  runs = _plan("smoke", tmp_path)[:3]  # B = 4, 8, 8 with a budget of 64 responses each
  logged = []
  progress = sweep.Progress(runs, parallel=2, log=logged.append)
  assert progress.estimate(runs[0]) is None
  progress.record(runs[1], 32.0)  # 0.5 s per response at B = 8
  assert progress.estimate(runs[2]) == pytest.approx(32.0)
  assert progress.estimate(runs[0]) == pytest.approx(32.0)  # no B = 4 run yet: all runs' rate
  progress.started(runs[2], runs[2:])
  assert logged[-1].startswith(f"sweep: run 3/3 start {runs[2].name}: run ETA 32 s; "
                               "sweep ETA 16 s")


def test_progress_numbers_each_run_by_its_place_in_the_plan(tmp_path):
  # --parallel=2, as the newcomer saw it: runs 1 and 2 start together and 2 finishes first. Every
  # line names a run by its place in the plan (was "[1/8] start" twice, then "[1/8] done" for
  # the second run and "[2/8] start" for the third).
  runs = _plan("smoke", tmp_path)[:3]
  logged = []
  progress = sweep.Progress(runs, parallel=2, log=logged.append)
  progress.started(runs[0], runs)
  progress.started(runs[1], runs)
  progress.record(runs[1], 32.0)
  progress.finished(runs[1], "done", 32.0, [runs[0], runs[2]])
  progress.started(runs[2], [runs[0], runs[2]])
  progress.record(runs[0], 40.0)
  progress.finished(runs[0], "done", 40.0, [runs[2]])
  expected = [f"run 1/3 start {runs[0].name}:", f"run 2/3 start {runs[1].name}:",
              f"run 2/3 done {runs[1].name} in 32 s; 2 left, sweep ETA ",
              f"run 3/3 start {runs[2].name}:", f"run 1/3 done {runs[0].name} in 40 s; 1 left, "]
  assert len(logged) == len(expected)
  for line, start in zip(logged, expected):
    assert line.startswith("sweep: " + start), (line, start)


@pytest.mark.parametrize("module", ["rlscale.sweep", "rlscale.main"])
def test_config_file_without_get_config_is_one_error_line(tmp_path, module):
  path = tmp_path / "no_config.py"
  path.write_text("x = 1\n")
  out = subprocess.run([sys.executable, "-m", module, f"--config={path}",
                        f"--workdir={tmp_path / 'w'}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=hang_timeout(60))
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr == f"error: config file {str(path)!r} defines no get_config(arg=None)\n"


def test_workdir_that_is_a_file_is_named(tmp_path):
  path = tmp_path / "a_file"
  path.write_text("")
  out = _cli(f"--config={BATCH_LR}:smoke", f"--workdir={path}")
  assert out.returncode == 2
  assert out.stderr == (f"error: --workdir={str(path)!r} is a file; it must be a directory "
                        "(created when missing)\n")


def test_run_process_pins_itself_and_the_parent_never_forks(tmp_path, monkeypatch):
  # The parent has JAX's threads running (as after a sweep's warm start): a fork would make JAX
  # warn "os.fork() was called ...". The child reports its affinity and thread variables.
  jax.devices()
  (tmp_path / "show_affinity.py").write_text(
      "import os, sys\n"
      "print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'], sys.argv[1:])\n"
      "raise SystemExit(3)\n")
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
  core = min(os.sched_getaffinity(0))
  log = tmp_path / "log.txt"
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    proc, out = sweep.start_run_process([sys.executable, "-m", "show_affinity", "--x=1"], [core],
                                        str(log))
    proc.wait(timeout=hang_timeout(30))
    out.close()
  assert not [w for w in caught if "fork" in str(w.message)], [str(w.message) for w in caught]
  assert proc.returncode == 3  # the module's exit status is the process's
  assert log.read_text().strip() == f"[{core}] 1 ['--x=1']"


def test_pinned_command_and_bad_cores():
  argv = pinned.command([sys.executable, "-m", "rlscale.main", "--workdir=w"], [0, 2])
  assert argv == [sys.executable, "-m", "rlscale.scaling.pinned", "--cores=0,2", "rlscale.main",
                  "--workdir=w"]
  with pytest.raises(ValueError, match="--cores='0,x' must be comma-separated CPU ids"):
    pinned.parse_cores("0,x")
  with pytest.raises(ValueError, match="expected \\[python, '-m', module"):
    pinned.command(["python", "script.py"], [0])


@pytest.fixture(name="no_compilation_cache")
def fixture_no_compilation_cache(monkeypatch):
  """No cache configured (the tests' conftest sets one); restored afterwards."""
  before = jax.config.jax_compilation_cache_dir
  monkeypatch.delenv(sweep.COMPILATION_CACHE_ENV, raising=False)
  jax.config.update("jax_compilation_cache_dir", None)
  yield
  jax.config.update("jax_compilation_cache_dir", before)


def test_compilation_cache_under_the_workdir_unless_configured(tmp_path, no_compilation_cache):
  path = sweep.use_compilation_cache(str(tmp_path))
  assert path == os.path.join(str(tmp_path), "jax_cache")
  assert jax.config.jax_compilation_cache_dir == path  # this process, JAX already imported
  assert os.environ[sweep.COMPILATION_CACHE_ENV] == path  # the run processes
  assert sweep.use_compilation_cache(str(tmp_path / "other")) == path  # configured: kept


def test_run_sweep_in_process_with_overrides_and_a_selection(tmp_path):
  # One run of the smoke sweep (seed 0, P = 2, rule none) shrunk to one RL step: the function
  # behind the CLI, called as the notebook calls it.
  workdir = str(tmp_path / "sweep")
  overrides = {"sft.steps": 2, "train.total_samples": 4, "train.eval_every_samples": 4}
  one = lambda o: (o["seed"], o["rl.prompts_per_step"], o["optim.lr_scaling"]) == (0, 2, "none")  # noqa: E731
  logged = []
  summary = sweep.run_sweep(f"{BATCH_LR}:smoke", workdir, overrides=overrides, select=one,
                            log=logged.append)
  name = "seed=0,prompts_per_step=2,lr_scaling=none"
  assert summary["runs"] == [name] and summary["statuses"] == {name: "done"}
  assert summary["failed"] == 0 and summary["record"] == os.path.join(workdir, "sweep.json")
  with open(summary["record"]) as f:
    record = json.load(f)
  assert record["cli_overrides"] == overrides and record["arg"] == "smoke"
  assert record["base_learning_rate"] == 3e-3 and record["reference_batch"] == 4
  assert record["parallel"] == 1 and record["target"] == sweep_plan.get_target(BATCH_LR, "smoke")
  with open(os.path.join(workdir, "runs", name, "config.json")) as f:
    config = json.load(f)["config"]
  assert config["sft"]["steps"] == 2 and config["train"]["total_samples"] == 4
  # Again, the module given instead of its path: the finished run is skipped.
  module = sweep_plan.load_sweep_module(BATCH_LR)
  again = sweep.run_sweep(module, workdir, arg="smoke", overrides=overrides, select=one,
                          log=logged.append)
  assert again["statuses"] == {name: "skipped"}
  assert "sweep: 1 of 1 runs already finished; skipping them" in logged
  with pytest.raises(ValueError, match="select keeps none of the runs"):
    sweep.run_sweep(BATCH_LR, workdir, arg="smoke", select=lambda o: False)
  with pytest.raises(ValueError, match="--parallel must be >= 1"):
    sweep.run_sweep(BATCH_LR, workdir, parallel=0)


def test_validation_runs_the_decisions_runs_one_at_a_time_alone(tmp_path, monkeypatch):
  from rlscale.scaling import report as report_lib
  planned = [r.name for r in _plan("smoke", tmp_path)]
  base, cand = planned[0], planned[1]
  fake = {"groups": [{"rule": "none", "batch_size": 4, "runs": [base]},
                     {"rule": "none", "batch_size": 8, "runs": [cand]}],
          "decisions": [{"lr_rule": "none", "base": 4, "candidate": 8}]}
  monkeypatch.setattr(report_lib, "build_report", lambda workdir: fake)
  calls = []
  def execute(runs, workdir, *, parallel, processes=False, **kwargs):
    calls.append(([r.name for r in runs], workdir, parallel, processes))
    return sweep.SweepRecord(workdir, runs, {})
  monkeypatch.setattr(sweep, "execute", execute)
  monkeypatch.setattr(sweep, "use_compilation_cache", lambda workdir: workdir)
  summary = sweep.run_validation(f"{BATCH_LR}:smoke", str(tmp_path), log=lambda line: None)
  # One at a time, each in a process of its own.
  assert calls == [([base, cand], os.path.join(str(tmp_path), "validation"), 1, True)]
  assert not summary["validated_by_sweep"]
  # A sweep that ran with --parallel=1 is its own validation: nothing runs again.
  with open(tmp_path / "sweep.json", "w") as f:
    json.dump({"parallel": 1}, f)
  assert sweep.run_validation(f"{BATCH_LR}:smoke", str(tmp_path),
                              log=lambda line: None)["validated_by_sweep"]
  assert len(calls) == 1


def test_execute_with_processes_uses_the_process_pool_with_one_slot(tmp_path, monkeypatch):
  seen = []
  monkeypatch.setattr(sweep, "_execute_processes",
                      lambda todo, workdir, parallel, *args: seen.append(([r.name for r in todo],
                                                                            parallel)))
  monkeypatch.setattr(sweep, "prepare_warm_starts", lambda *args: 0.0)
  runs = _plan("smoke", tmp_path)[:2]
  sweep.execute(runs, str(tmp_path), parallel=1, processes=True, log=lambda line: None)
  assert seen == [([r.name for r in runs], 1)]


def test_sweep_records_its_stated_target_and_parallelism(tmp_path):
  path = tmp_path / "s.py"
  path.write_text("def get_config(arg=None):\n  return None\n"
                  "def get_sweep(arg=None):\n  return [{}]\n"
                  "def get_target(arg=None):\n  return {'metric': 'eval/x', 'value': 0.7}\n")
  assert sweep_plan.get_target(str(path), None) == {"metric": "eval/x", "value": 0.7}
  path.write_text("def get_config(arg=None):\n  return None\n"
                  "def get_sweep(arg=None):\n  return [{}]\n"
                  "def get_target(arg=None):\n  return 0.7\n")
  with pytest.raises(ValueError, match="must return"):
    sweep_plan.get_target(str(path), None)


def _lock_run_dir(workdir, run):
  """Takes the lock of a run's directory as another process running it would."""
  from rlscale.runner import workdir_lock  # pylint: disable=import-outside-toplevel
  run_dir = os.path.join(workdir, "runs", run.name)
  os.makedirs(run_dir, exist_ok=True)
  return workdir_lock.acquire(run_dir)


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_run_held_elsewhere_is_not_started_nor_failed(tmp_path, monkeypatch, parallel):
  """Issue 39: a run whose workdir another process holds (another sweep, the run started by
  hand) is recorded as running elsewhere, with its holder; the others run."""
  workdir = str(tmp_path / "w")
  runs = _plan("smoke", tmp_path)[:2]
  monkeypatch.setattr(sweep, "prepare_warm_starts", lambda *_: 0.0)
  ran = []
  monkeypatch.setattr(sweep, "_run_in_process",
                      lambda run, _: (ran.append(run.name), ("done", None))[1])
  monkeypatch.setattr(sweep, "_execute_processes",
                      lambda todo, *args: ran.extend(r.name for r in todo))
  logged = []
  with _lock_run_dir(workdir, runs[0]) as lock:
    record = sweep.execute(runs, workdir, parallel=parallel, log=logged.append)
    holder = f"pid {os.getpid()} on host {lock.info['host']}, since {lock.info['since']}"
  assert ran == [runs[1].name]
  entry = record.entries[runs[0].name]
  assert (entry["status"], entry["holder"]) == ("running elsewhere", holder)
  assert record.failed() == 0 and record.count(sweep.RUNNING_ELSEWHERE) == 1
  assert f"sweep: {runs[0].name} is running elsewhere ({holder}); not started here" in logged
  # Counted apart from finished runs, which it is not.
  assert "sweep: 1 of 2 runs running elsewhere, not started here" in logged
  assert not any("already finished" in line for line in logged)
  with open(record.path) as f:
    assert json.load(f)["runs"][0]["status"] == "running elsewhere"


class _RefusedProcess:
  """A run process that exited as a run refused by its workdir's lock does (status 2)."""
  returncode = 2

  def poll(self):
    return self.returncode

  def send_signal(self, signum):
    del signum


def test_a_run_taken_just_before_its_process_starts_is_running_elsewhere(tmp_path, monkeypatch):
  """The lock taken between the sweep's check and its run process's start: the process is
  refused (exit 2); the run is recorded as running elsewhere, not failed, and its directory,
  which the holder is writing, is not discarded as unstarted."""
  workdir = str(tmp_path / "w")
  run = _plan("smoke", tmp_path)[0]
  monkeypatch.setattr(sweep, "prepare_warm_starts", lambda *_: 0.0)
  locks = []

  def start(argv, cores, log_path):
    del argv, cores
    locks.append(_lock_run_dir(workdir, run))  # another process got there first
    with open(os.path.join(workdir, "runs", run.name, "config.json"), "w") as f:
      f.write("{}")  # the holder's setup, no results yet
    return _RefusedProcess(), open(log_path, "a", encoding="utf-8")
  monkeypatch.setattr(sweep, "start_run_process", start)
  try:
    record = sweep.execute([run], workdir, parallel=2, log=lambda line: None)
    assert record.entries[run.name]["status"] == "running elsewhere"
    assert record.failed() == 0
    assert os.path.exists(os.path.join(workdir, "runs", run.name, "config.json"))
  finally:
    locks[0].release()


class _DivergedProcess(_RefusedProcess):
  """A run process that stopped at a non-finite loss (rlscale.cli.EXIT_DIVERGED)."""
  returncode = 3


def test_a_run_that_diverges_is_recorded_as_diverged_not_failed(tmp_path, monkeypatch):
  """Exit status 3 is an outcome of the run's settings (its learning rate), not a failure of the
  sweep: status "diverged", its error line kept, its metrics and checkpoints left in place."""
  workdir = str(tmp_path / "w")
  run = _plan("smoke", tmp_path)[0]
  monkeypatch.setattr(sweep, "prepare_warm_starts", lambda *_: 0.0)
  run_dir = os.path.join(workdir, "runs", run.name)

  def start(argv, cores, log_path):
    del argv, cores
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
      f.write('{"step": 1, "train/loss": null}\n')
    log = open(log_path, "a", encoding="utf-8")
    log.write("error: step 1: the loss is nan\n")
    log.flush()
    return _DivergedProcess(), log
  monkeypatch.setattr(sweep, "start_run_process", start)
  record = sweep.execute([run], workdir, parallel=2, log=lambda line: None)
  entry = record.entries[run.name]
  assert entry["status"] == "diverged" and "the loss is nan" in entry["error"]
  assert record.failed() == 0
  assert os.path.exists(os.path.join(run_dir, "metrics.jsonl"))


def test_discard_unstarted_keeps_a_directory_another_process_holds(tmp_path):
  from rlscale.runner import workdir_lock  # pylint: disable=import-outside-toplevel
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  (run_dir / sweep.RUN_LOG).write_text("error: something\n")
  with workdir_lock.acquire(str(run_dir)):
    assert sweep.discard_unstarted(str(run_dir)) is None
    assert sorted(os.listdir(run_dir)) == [".lock", sweep.RUN_LOG]
  assert sweep.discard_unstarted(str(run_dir)) == "error: something\n"  # free: discarded
  assert not run_dir.exists()
