"""`python -m rlscale.main`: config and input errors print one line `error: ...` on stderr and exit
with status 2, naming the field and, for unknown fields, the closest ones and other libraries'
names (a config file's own error by file:line, undecodable data by line and column); a write the
storage refuses prints one line naming the file and the checkpoint to resume from, status 74;
--verbose / RLSCALE_VERBOSE=1 add the traceback."""

import json
import os
import re
import subprocess
import sys

import pytest
from tests.timeouts import hang_timeout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DEFAULT = "experiments/configs/default.py"


def _run(*args, env=None):
  base = {k: v for k, v in os.environ.items() if k != "RLSCALE_VERBOSE"}
  env = dict(base, JAX_PLATFORMS="cpu", **(env or {}))
  return subprocess.run([sys.executable, "-m", "rlscale.main", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=hang_timeout(150))


def _error_lines(stderr):
  # JAX/absl may log warnings (lines starting with W/I + date); the error is the rest.
  return [line for line in stderr.splitlines()
          if line.strip() and not line.startswith(("W1", "I1", "WARNING"))]


@pytest.mark.parametrize("args, expected", [
    # misspelled field: the closest existing one
    ([f"--config={DEFAULT}", "--config.rl.prompts_per_stp=8"],
     ["unknown config field 'rl.prompts_per_stp'", "closest fields: rl.prompts_per_step"]),
    # the sampler's / TRL's / verl's names for the group size
    ([f"--config={DEFAULT}", "--config.rl.samples_per_prompt=1"],
     ["'rl.samples_per_prompt'", "samples_per_prompt is rl.group_size"]),
    ([f"--config={DEFAULT}", "--config.num_generations=4"],
     ["TRL's num_generations is rl.group_size"]),
    ([f"--config={DEFAULT}", "--config.rollout.n=4"], ["verl's rollout.n is rl.group_size"]),
    ([f"--config={DEFAULT}", "--config.rl.beta=0.1"], ["TRL's beta is rl.kl_coef"]),
    ([f"--config={DEFAULT}", "--config.learning_rate=0.1"],
     ["closest fields: optim.learning_rate, sft.learning_rate"]),
    ([f"--config={DEFAULT}", "--config.rl.group_size=abc"],
     ["--config.rl.group_size=abc", "invalid literal for int()"]),
    ([f"--config={DEFAULT}:fast"], ["config argument 'fast' is not one of [None, 'smoke']"]),
    (["--config=experiments/configs/nope.py"], ["config file 'experiments/configs/nope.py' not found"]),
    ([f"--config={DEFAULT}", "--workdirr=x"], ["Unknown command line flag 'workdirr'", "workdir"]),
    ([f"--config={DEFAULT}", "stray"], ["unexpected arguments ['stray']"]),
])
def test_flag_errors_are_one_line(tmp_path, args, expected):
  result = _run(*args, f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2, result.stderr
  lines = _error_lines(result.stderr)
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
  for text in expected:
    assert text in lines[0]
  assert "Traceback" not in result.stderr


def test_missing_workdir_is_one_line():
  result = _run(f"--config={DEFAULT}")
  assert result.returncode == 2
  assert _error_lines(result.stderr) == [
      "error: flag --workdir=None: Flag --workdir must have a value other than None."]


def test_validation_and_missing_files_are_one_line(tmp_path):
  """Errors raised inside train_and_evaluate (ValueError, FileNotFoundError-like) as one line."""
  result = _run(f"--config={DEFAULT}", f"--workdir={tmp_path / 'a'}", "--config.rl.algorithm=foo")
  assert result.returncode == 2, result.stderr
  assert _error_lines(result.stderr) == [
      "error: rl.algorithm='foo' is not one of "
      "['dapo', 'dr_grpo', 'grpo', 'ppo', 'reinforce_pp', 'rloo']"]
  assert os.listdir(tmp_path) == []  # the failed run left no workdir (see below)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_verbose_shows_the_traceback(tmp_path, how):
  args = [f"--config={DEFAULT}", f"--workdir={tmp_path}", "--config.rl.prompts_per_stp=8"]
  result = (_run(*args, "--verbose") if how == "flag"
            else _run(*args, env={"RLSCALE_VERBOSE": "1"}))
  assert result.returncode == 2
  assert "Traceback (most recent call last)" in result.stderr
  assert result.stderr.rstrip().splitlines()[-1].startswith("error: unknown config field")


def _local_math_config(tmp_path):
  """A config file: the default smoke run on a local JSONL (task.data_path set per test)."""
  path = tmp_path / "local_math_config.py"
  path.write_text(
      "from rlscale.runner.config_files import load_config_file\n"
      "def get_config(arg=None):\n"
      f"  config = load_config_file({os.path.join(REPO, DEFAULT)!r}, 'smoke')\n"
      "  config.task.source = 'local_math'\n"
      "  config.task.kwargs = {}\n"
      "  return config\n")
  return str(path)


def _tree(root):
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, dirs, files in os.walk(root) for n in dirs + files)


def _failing_runs(tmp_path):
  """(args, error text) of runs that fail during setup (a bad config value is in
  test_validation_and_missing_files_are_one_line): a bad data file (its prepared-data cache
  folder must not be left either), a missing checkpoint."""
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"question": "q", "answer": 1}\n{"q": 1}\n')
  return [
      ([f"--config={_local_math_config(tmp_path)}", f"--config.task.data_path={bad}",
        f"--config.task.data_dir={tmp_path / 'cache'}"], "bad.jsonl:2: expected GSM8K-style"),
      ([f"--config={DEFAULT}", "--config.model.source=hf",
        f"--config.model.checkpoint_path={tmp_path / 'no_checkpoint'}"],
       "no_checkpoint' is not a directory"),
  ]


@pytest.mark.parametrize("case", range(2))
def test_a_run_failing_at_setup_leaves_no_workdir(tmp_path, case):
  """Bad input fails the run before anything worth keeping exists: the workdir it created (and
  the parent folders it created) are removed; the error is still one line."""
  args, error = _failing_runs(tmp_path)[case]
  before = _tree(tmp_path)
  result = _run(*args, f"--workdir={tmp_path / 'new' / 'run'}")
  assert result.returncode == 2, result.stderr
  assert error in _error_lines(result.stderr)[0]
  assert _tree(tmp_path) == before  # no new/, new/run, cache/


def test_a_failed_run_leaves_an_existing_workdir_as_it_was(tmp_path):
  workdir = tmp_path / "mine"
  workdir.mkdir()
  (workdir / "notes.txt").write_text("my notes")
  (workdir / "sft").mkdir()
  args, _ = _failing_runs(tmp_path)[0]
  before = _tree(tmp_path)
  result = _run(*args, f"--workdir={workdir}")
  assert result.returncode == 2, result.stderr
  assert _tree(tmp_path) == before
  assert (workdir / "notes.txt").read_text() == "my notes"


# --- A config file's own error, undecodable data, a file-size limit: one line, their statuses.

RAISING_CONFIG = """import ml_collections


def get_config(arg=None):
  config = ml_collections.ConfigDict()
  raise ValueError(f"variant {arg!r} is not ready")
"""


@pytest.mark.parametrize("source, expected", [
    (RAISING_CONFIG, "error: {path}:6: ValueError: variant 'smoke' is not ready"),
    ("import ml_collections\n\ndef get_config(arg=None)\n  return ml_collections.ConfigDict()\n",
     "error: {path}:3: SyntaxError: expected ':'"),
])
def test_an_error_in_the_config_file_is_one_line_with_its_file_and_line(tmp_path, source,
                                                                       expected):
  path = tmp_path / "my_config.py"
  path.write_text(source)
  result = _run(f"--config={path}:smoke", f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2, result.stderr
  assert _error_lines(result.stderr) == [expected.format(path=path)]
  assert "Traceback" not in result.stderr


def test_a_jsonl_that_is_not_utf8_is_named_by_line_and_column(tmp_path):
  data = tmp_path / "latin1.jsonl"
  data.write_bytes(b'{"question": "q", "answer": "#### 1"}\n'
                   b'{"question": "Ren\xe9 has 3 apples", "answer": "#### 3"}\n')
  result = _run(f"--config={_local_math_config(tmp_path)}", f"--config.task.data_path={data}",
                f"--config.task.data_dir={tmp_path / 'cache'}", f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2, result.stderr
  assert _error_lines(result.stderr) == [
      f"error: {data}:2: not valid UTF-8 (byte 0xe9 at column 18); convert the file to UTF-8 "
      "(e.g. iconv -f <its encoding> -t utf-8)"]


def _not_progress(stderr):
  """stderr's lines other than the progress bar's (tqdm redraws it after carriage returns)."""
  return [line for line in stderr.split("\n")
          if line.strip() and not line.split("\r")[-1].lstrip().startswith("RL:")]


def test_a_file_size_limit_mid_run_is_one_line_exit_74_and_the_rerun_resumes(tmp_path):
  workdir = tmp_path / "run"
  smoke = [f"--config={DEFAULT}:smoke", f"--workdir={workdir}"]
  assert _run(*smoke, "--config.train.total_steps=3").returncode == 0  # checkpoint at step 3
  # Three more steps under a 300 KiB file-size limit: step 6's checkpoint (MBs) is refused.
  # (The shell sets the limit: a preexec_fn would fork this multithreaded process.) Python
  # ignores SIGXFSZ, so a larger write raises EFBIG.
  limited = subprocess.run(
      ["bash", "-c", 'ulimit -f 300 && exec "$@"', "bash", sys.executable, "-m", "rlscale.main",
       *smoke, "--config.train.total_steps=6"], cwd=REPO,
      env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True,
      timeout=hang_timeout(150))
  assert limited.returncode == 74, limited.stderr
  lines = _not_progress(limited.stderr)
  assert len(lines) <= 3 and [line for line in lines if "error" in line.lower()] == [
      lines[-1]], limited.stderr  # without the fix: ~300 lines of orbax / asyncio tracebacks
  checkpoints = workdir / "checkpoints"
  match = re.fullmatch(
      rf"error: could not write ({re.escape(str(checkpoints))}/6\.orbax-checkpoint-tmp/\S+): "
      r"File too large \(a file-size limit; ulimit -f\); the last good checkpoint is step 3 in "
      rf"{re.escape(str(checkpoints))}; free space or raise the limit and rerun to resume",
      lines[-1])
  assert match, lines[-1]
  # The limit lifted, the same command resumes from step 3 and finishes.
  rerun = _run(*smoke, "--config.train.total_steps=6")
  assert rerun.returncode == 0, rerun.stderr
  assert "resumed from checkpoint at step 3" in rerun.stdout
  assert json.loads((workdir / "summary.json").read_text())["steps"] == 6
  assert sorted(os.listdir(checkpoints)) == ["3", "6"]
