"""Running a sweep: one run = one workdir = one unchanged `train_and_evaluate` call.

A sweep file (experiments/sweeps/*.py) defines `get_config(arg)` (the base run config) and
`get_sweep(arg)` (a list of flat override dicts, see `rlscale.scaling.hyper`). `plan` turns them
into runs: names from the overrides (two runs may not share one), unknown fields rejected, runs
with the same effective settings merged (e.g. at the reference batch lr_scaling "none" and "sqrt"
give the same learning rate), and every run pointed at one warm-start cache `<workdir>/sft`.
`execute` trains the warm starts once, then the runs, in this process or as `parallel` separate
processes; it skips finished runs (summary.json exists), resumes interrupted ones (the runner's
checkpoints), records failures in `<workdir>/sweep.json` and carries on. A run that fails (or is
stopped) before writing results leaves no run directory behind (the runner removes what it made;
a run process's log tail goes into sweep.json), so the report and a rerun never meet a half-made
one.

`run_sweep(sweep_file, workdir, ...)` does all of it (plan, JAX compilation cache, execute) and is
what `python -m rlscale.sweep` and the notebooks call: one code path. It records in sweep.json the
target the sweep file states (`get_target(arg)`, see rlscale.scaling.target) and how many runs
shared the machine (`parallel`).

`run_validation(...)` (`python -m rlscale.sweep ... --validate`) checks the decisions on
independent clocks: it executes the runs that the report's decisions compare one at a time, alone,
into <workdir>/validation/runs (resumable like the sweep); the report then puts each decision's
measured time ratio beside the predicted one. A sweep run with --parallel=1 is its own validation
(runs are deterministic), so nothing is run twice.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from typing import Any, Callable, Sequence

from rlscale import cli
from rlscale import outputs
from rlscale.runner.config_files import flatten_config, import_python_file, load_config_file
from rlscale.runner import workdir_lock
from rlscale.runner.interrupts import EXIT_INTERRUPTED, StopFlag
from rlscale.scaling import hyper
from rlscale.scaling import pinned

RUNS_DIR = "runs"
SFT_DIR = "sft"
SWEEP_FILE = "sweep.json"
SUMMARY_FILE = "summary.json"
RUN_LOG = "sweep_log.txt"  # stdout and stderr of a run executed as a separate process
COMPILATION_CACHE_DIR = "jax_cache"
COMPILATION_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
MAX_EXIT_STATUS = 100  # exit status = failed runs, capped
# The status of a run whose workdir another process holds (`rlscale.runner.workdir_lock`: another
# sweep, or the run started by hand): not started here, not failed, not finished.
RUNNING_ELSEWHERE = "running elsewhere"
# A run stopped by a non-finite loss or gradient (exit status EXIT_DIVERGED): an outcome of its
# learning rate, not a failure of the sweep; its metrics and last good checkpoint stay.
DIVERGED = "diverged"
# Config sections the warm start depends on (as rlscale.runner.builders.warm_start's cache key).
# Config sections the warm start depends on; with the effective sft seed (`warm_start_signature`).
WARM_START_FIELDS = ("model", "task", "sft", "rollout")


@dataclasses.dataclass
class Run:
  """One run of a sweep.

  Attributes:
    name: its directory under <workdir>/runs (from the overrides).
    overrides: the flat override dict from get_sweep, plus sft.cache_dir.
    config: the base config with the overrides applied.
    aliases: names of runs dropped as duplicates of this one (same effective settings).
  """
  name: str
  overrides: dict[str, Any]
  config: Any
  aliases: list[str] = dataclasses.field(default_factory=list)


def split_config_arg(spec: str) -> tuple[str, str | None]:
  """"path.py:arg" -> ("path.py", "arg"); "path.py" -> ("path.py", None)."""
  path, sep, arg = spec.partition(":")
  return path, (arg if sep else None)


def load_sweep_module(path: str):
  """Imports a sweep file; raises FileNotFoundError, or ValueError when it lacks get_config or
  get_sweep."""
  module = import_python_file(path, "sweep")
  for fn in ("get_config", "get_sweep"):
    if not hasattr(module, fn):
      raise ValueError(f"sweep file {path!r} defines no {fn}(arg=None)")
  return module


def get_target(path: str, arg: str | None) -> dict[str, Any] | None:
  """The target the sweep file states, {"metric": str, "value": float}, from its optional
  `get_target(arg)`; None when it defines none or returns None (not stated yet, e.g. a pilot).
  Raises ValueError for a malformed one."""
  module = load_sweep_module(path)
  if not hasattr(module, "get_target"):
    return None
  target = module.get_target(arg) if arg is not None else module.get_target()
  if target is None:
    return None
  if (not isinstance(target, dict) or not isinstance(target.get("metric"), str)
      or not isinstance(target.get("value"), (int, float))):
    raise ValueError(f"get_target({arg!r}) in {path!r} must return {{'metric': str, 'value': "
                     f"float}}, got {target!r}")
  return {"metric": target["metric"], "value": float(target["value"])}


def get_sweep(path: str, arg: str | None) -> list[dict[str, Any]]:
  """The sweep file's list of override dicts; raises ValueError when it is empty or not dicts."""
  module = load_sweep_module(path)
  runs = module.get_sweep(arg) if arg is not None else module.get_sweep()
  if not runs or not all(isinstance(r, dict) for r in runs):
    raise ValueError(f"get_sweep({arg!r}) in {path!r} must return a non-empty list of dicts")
  return list(runs)


def effective_signature(config) -> str:
  """JSON of the settings that change what a run computes: the learning rate after scaling
  replaces (learning_rate, lr_scaling, reference_batch), the Adam betas and eps after the batch
  adjustment (adjust_adam or lr_scaling "sqrt_adam") replace (b1, b2, eps, adjust_adam), so
  "sqrt_adam" merges with "sqrt" only at the reference batch (k = 1), sft.seed is the effective
  warm-start seed, and the cache directory is dropped."""
  from rlscale.runner import sft  # pylint: disable=g-import-not-at-top
  from rlscale.train.optimizer import adam_hyperparams, scaled_learning_rate  # pylint: disable=g-import-not-at-top
  flat = flatten_config(json.loads(json.dumps(config.to_dict(), default=str)))
  # Responses per optimizer update, the batch the LR rule scales with (update.optimizer_args).
  batch = config.rl.prompts_per_step * config.rl.group_size // config.rl.minibatches
  flat["optim.learning_rate"] = scaled_learning_rate(config.optim, batch)
  if config.optim.critic_learning_rate is not None:
    flat["optim.critic_learning_rate"] = scaled_learning_rate(
        config.optim, batch, base_learning_rate=config.optim.critic_learning_rate)
  try:
    flat.update({f"optim.{k}": v for k, v in adam_hyperparams(config.optim, batch).items()})
    for field in ("lr_scaling", "adjust_adam", "reference_batch"):
      flat.pop(f"optim.{field}", None)
  except ValueError:
    pass  # outside the Adam rule's range: kept apart by its raw fields, and refused when it starts
  flat["sft.seed"] = sft.effective_sft_seed(config)  # None and `seed` train the same warm start
  flat.pop("sft.cache_dir", None)
  return json.dumps(flat, sort_keys=True, default=str)


def plan(base_config, sweep_runs: Sequence[dict[str, Any]], workdir: str) -> list[Run]:
  """The runs of a sweep in the sweep file's order, duplicates merged.

  Raises ValueError for an override naming no config field (naming the nearest one), a value of
  the wrong type, or two runs with the same name."""
  names = hyper.check_unique_names(sweep_runs)
  cache_dir = os.path.abspath(os.path.join(workdir, SFT_DIR))
  runs: list[Run] = []
  by_signature: dict[str, Run] = {}
  for index, (name, overrides) in enumerate(zip(names, sweep_runs)):
    overrides = dict(overrides)
    if "sft.cache_dir" not in overrides and not base_config.sft.cache_dir:
      overrides["sft.cache_dir"] = cache_dir
    try:
      config = hyper.apply_overrides(base_config, overrides)
    except ValueError as e:  # say which run of the sweep file the bad override belongs to
      raise ValueError(f"sweep run {index} ({name}): {e}") from None
    signature = effective_signature(config)
    if signature in by_signature:
      by_signature[signature].aliases.append(name)
      continue
    run = Run(name, overrides, config)
    by_signature[signature] = run
    runs.append(run)
  return runs


def budget_samples(config) -> int:
  """Responses a run consumes: train.total_samples when the config has it set, else
  train.total_steps x B."""
  total = config.train.get("total_samples")
  if total:
    return int(total)
  return int(config.train.total_steps * config.rl.prompts_per_step * config.rl.group_size)


def _format_value(value: Any) -> str:
  return repr(value) if isinstance(value, float) else str(value)


def run_command(run: Run, sweep_spec: str, workdir: str,
                cli_overrides: dict[str, Any] | None = None) -> list[str]:
  """argv of `python -m rlscale.main` for one run: the sweep file's base config, the command-line
  overrides, then the run's overrides (one code path for a run alone and in a sweep)."""
  argv = [sys.executable, "-m", "rlscale.main", f"--config={sweep_spec}",
          f"--workdir={os.path.join(workdir, RUNS_DIR, run.name)}"]
  merged = {**(cli_overrides or {}), **run.overrides}
  argv += [f"--config.{k}={_format_value(v)}" for k, v in merged.items()]
  return argv


def shell_command(argv: Sequence[str]) -> str:
  """argv as one copy-pasteable shell line (`python` for the interpreter)."""
  return " ".join(shlex.quote(a) for a in ["python", *argv[1:]])


def is_finished(workdir: str, run: Run) -> bool:
  return os.path.exists(os.path.join(workdir, RUNS_DIR, run.name, SUMMARY_FILE))


def warm_start_signature(config) -> str:
  """JSON of the config sections the warm start depends on (WARM_START_FIELDS, cache dir aside)
  and its seed, the effective sft seed (`sft.effective_sft_seed`): runs with seed 0, 1, 2 and
  sft.seed 0 share one warm start, as the runner's cache key does (`builders.warm_start`)."""
  from rlscale.runner import sft  # pylint: disable=g-import-not-at-top
  d = json.loads(json.dumps(config.to_dict(), default=str))
  parts = {k: d[k] for k in WARM_START_FIELDS}
  parts["sft"] = sft.warm_start_sft_fields(parts["sft"])
  parts["seed"] = sft.effective_sft_seed(config)
  return json.dumps(parts, sort_keys=True)


def prepare_warm_starts(runs: Sequence[Run], workdir: str, log: Callable[[str], None] = print) -> float:
  """Trains (or loads) each distinct warm start once, before the runs, so parallel runs never
  train the same one; returns the seconds spent."""
  from rlscale.runner import builders  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  seen = set()
  for run in runs:
    signature = warm_start_signature(run.config)
    if signature in seen or run.config.model.source == "hf" or run.config.sft.steps == 0:
      continue
    seen.add(signature)
    log(f"sweep: warm start for {run.name} (shared by every run with its model, task and "
        "warm-start seed, sft.seed)")
    try:
      builders.build_run(run.config, os.path.join(workdir, SFT_DIR), log=log)
    except Exception as e:  # pylint: disable=broad-except
      # The run fails again when it starts and is recorded then; the others go on.
      log(f"sweep: warm start for {run.name} failed ({type(e).__name__}: {e})")
  return time.perf_counter() - t0


class Progress:
  """Progress lines and ETA bookkeeping: seconds per response measured on finished runs (per batch
  size when available), applied to each run's budget in responses.

  `runs` is the sweep's whole plan: a run is numbered by its place in it ("run 3/8"), the same on
  its start and done lines however runs finish or are skipped (with --parallel, a count of
  started or finished runs would give two runs one number)."""

  def __init__(self, runs: Sequence[Run], parallel: int, log: Callable[[str], None] = print):
    self.runs, self.parallel, self.log = list(runs), max(1, parallel), log
    self.number = {run.name: i + 1 for i, run in enumerate(self.runs)}
    self.seconds_per_sample: dict[int, list[float]] = {}
    self.done = 0

  def label(self, run: Run) -> str:
    """"run 3/8": the run's place in the plan, for its progress lines."""
    return f"run {self.number[run.name]}/{len(self.runs)}"

  @staticmethod
  def _batch(run: Run) -> int:
    return run.config.rl.prompts_per_step * run.config.rl.group_size

  def estimate(self, run: Run) -> float | None:
    """Seconds the run should take, or None before any run has finished."""
    rates = self.seconds_per_sample.get(self._batch(run))
    if not rates:
      rates = [r for rs in self.seconds_per_sample.values() for r in rs]
    if not rates:
      return None
    return sum(rates) / len(rates) * budget_samples(run.config)

  def record(self, run: Run, seconds: float, measured: bool = True) -> None:
    self.done += 1
    if measured:
      self.seconds_per_sample.setdefault(self._batch(run), []).append(
          seconds / max(budget_samples(run.config), 1))

  def remaining_line(self, pending: Sequence[Run]) -> str:
    estimates = [self.estimate(r) for r in pending]
    if not pending:
      return "sweep done"
    if any(e is None for e in estimates):
      return "sweep ETA after the first run"
    seconds = sum(estimates) / self.parallel
    at = datetime.datetime.now() + datetime.timedelta(seconds=seconds)
    return f"sweep ETA {_minutes(seconds)} ({at:%H:%M})"

  def started(self, run: Run, pending: Sequence[Run]) -> None:
    estimate = self.estimate(run)
    eta = _minutes(estimate) if estimate is not None else "unknown"
    self.log(f"sweep: {self.label(run)} start {run.name}: run ETA {eta}; "
             f"{self.remaining_line(pending)}")

  def finished(self, run: Run, status: str, seconds: float, pending: Sequence[Run]) -> None:
    self.log(f"sweep: {self.label(run)} {status} {run.name} in {seconds:.0f} s; "
             f"{len(pending)} left, {self.remaining_line(pending)}")


def _minutes(seconds: float) -> str:
  return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


class SweepRecord:
  """<workdir>/sweep.json (or sweep_shard<i>of<n>.json for a shard): every run's status
  (pending, running, done, skipped, failed, interrupted, diverged, or "running elsewhere" with the
  `holder` of its workdir's lock), seconds, error and command; written atomically after each
  change."""

  def __init__(self, workdir: str, runs: Sequence[Run], meta: dict[str, Any],
               shard: tuple[int, int] | None = None):
    name = SWEEP_FILE if shard is None else f"sweep_shard{shard[0]}of{shard[1]}.json"
    self.path = os.path.join(workdir, name)
    self.meta = meta
    self.entries = {r.name: {"name": r.name, "overrides": r.overrides, "aliases": r.aliases,
                             "status": "pending", "seconds": None, "error": None} for r in runs}
    self.interrupted_by: int | None = None  # the signal that stopped the sweep, if one did

  def set(self, name: str, **fields) -> None:
    self.entries[name].update(fields)
    self.write()

  def failed(self) -> int:
    """How many runs failed."""
    return self.count("failed")

  def count(self, status: str) -> int:
    """How many runs have `status`."""
    return sum(e["status"] == status for e in self.entries.values())

  def write(self) -> None:
    data = {**self.meta, "failed": self.failed(), "runs": list(self.entries.values())}
    outputs.write_json(self.path, data, indent=2, default=str)


def _run_in_process(run: Run, workdir: str) -> tuple[str, str | None]:
  """(status, error) of train_and_evaluate on this run; errors are caught, not raised. A run
  whose workdir another process holds is RUNNING_ELSEWHERE (error: the refusal naming it)."""
  from rlscale.runner.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top
  try:
    summary = train_and_evaluate(run.config, os.path.join(workdir, RUNS_DIR, run.name))
  except workdir_lock.WorkdirInUse as e:
    return RUNNING_ELSEWHERE, str(e)
  except cli.TrainingDiverged as e:
    return DIVERGED, str(e)
  except Exception as e:  # pylint: disable=broad-except
    traceback.print_exc()
    return "failed", f"{type(e).__name__}: {e}"
  if summary.get("interrupted"):
    return "interrupted", None
  return "done", None


def thread_env(threads: int) -> dict[str, str]:
  """Environment of a run process allowed `threads` threads: OpenMP/BLAS pools sized to it.

  XLA:CPU sizes its own thread pools from the process's CPU affinity (a process pinned to 1 core
  starts 13 threads instead of 17 here, and XLA_FLAGS has no thread-count option), so the cores
  themselves are assigned by `core_sets` and pinned by the child (rlscale.scaling.pinned); these
  variables cover the rest."""
  env = dict(os.environ)
  for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    env[var] = str(threads)
  return env


def core_sets(parallel: int, cores: Sequence[int] | None = None) -> list[list[int]]:
  """Splits the usable cores into `parallel` disjoint sets (round robin), or shares all cores
  when there are fewer cores than processes."""
  cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
  if parallel > len(cores):
    return [cores for _ in range(parallel)]
  return [cores[i::parallel] for i in range(parallel)]


def discard_unstarted(run_dir: str, lines: int = 40) -> str | None:
  """Removes the directory of a run process that stopped before writing results (it holds only
  its sweep_log.txt: the run removed its own half-made files, `rlscale.runner.run_dir.holds_results`
  is False), so no half-made run directory is left for the report or a rerun. Returns the last
  `lines` lines of the log, for sweep.json, or None when the directory holds results or another
  process holds its lock (`workdir_lock.holder`), and stays."""
  from rlscale.runner.run_dir import holds_results  # pylint: disable=g-import-not-at-top
  # A run another process holds is in its setup (no results yet), not half-made: never remove it.
  if (not os.path.isdir(run_dir) or holds_results(run_dir)
      or workdir_lock.holder(run_dir) is not None):
    return None
  try:
    with open(os.path.join(run_dir, RUN_LOG), encoding="utf-8", errors="replace") as f:
      tail = "".join(f.readlines()[-lines:])
  except OSError:
    tail = ""
  shutil.rmtree(run_dir, ignore_errors=True)
  return tail


def _error_from_log(path: str) -> str:
  """The last informative line of a failed run's log (its `error:` line or exception)."""
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      lines = [line.strip() for line in f if line.strip()]
  except OSError:
    return "no log"
  for line in reversed(lines):
    if line.startswith("error:") or ("Error" in line.split(":")[0] and ":" in line):
      return line
  return lines[-1] if lines else "no output"


def execute(runs: Sequence[Run], workdir: str, *, parallel: int = 1, sweep_spec: str = "",
            cli_overrides: dict[str, Any] | None = None, meta: dict[str, Any] | None = None,
            shard: tuple[int, int] | None = None, processes: bool = False,
            log: Callable[[str], None] = print) -> SweepRecord:
  """Runs every run not yet finished; returns the SweepRecord (also written to disk).

  parallel == 1 runs them one after another in this process (in a process of its own each when
  `processes`: a long series of runs in one process can exhaust memory XLA never returns, and
  each run then starts from the same clean state, as a timed validation run must); parallel > 1
  starts each as
  `python -m rlscale.main ...` (`run_command`) pinned to its share of the cores, at most
  `parallel` at a time, with its output in <workdir>/runs/<name>/sweep_log.txt. A failed run is
  recorded with its error and the others continue; when it stopped before writing results its
  directory is removed and the log's last lines are kept in sweep.json (`log_tail`). Ctrl-C or
  SIGTERM stops the sweep: the running runs checkpoint first (an in-process run by itself, run
  processes as _execute_processes forwards the signal), are recorded as interrupted, and
  `record.interrupted_by` names the signal; rerunning the same command resumes them.
  A run whose workdir another process holds (another sweep over the same directory, the run
  started by hand; `running_elsewhere`) is not started: it is recorded as RUNNING_ELSEWHERE with
  the holder, checked again just before each run starts."""
  os.makedirs(os.path.join(workdir, RUNS_DIR), exist_ok=True)
  record = SweepRecord(workdir, runs, meta or {}, shard)
  todo = []
  for run in runs:
    if is_finished(workdir, run):
      record.entries[run.name]["status"] = "skipped"
    elif (holder := running_elsewhere(workdir, run)) is not None:
      _record_elsewhere(record, run, holder, log)
    else:
      todo.append(run)
  record.write()
  if len(todo) < len(runs):
    log(f"sweep: {len(runs) - len(todo)} of {len(runs)} runs already finished; skipping them")
  if not todo:
    return record
  prepare_warm_starts(todo, workdir, log)
  progress = Progress(runs, parallel, log)
  if parallel <= 1 and not processes:
    for i, run in enumerate(todo):
      holder = running_elsewhere(workdir, run)
      if holder is not None:  # taken since the sweep started
        _record_elsewhere(record, run, holder, log)
        continue
      progress.started(run, todo[i:])
      t0 = time.perf_counter()
      status, error = _run_in_process(run, workdir)
      seconds = time.perf_counter() - t0
      record.set(run.name, status=status, seconds=seconds, error=error)
      progress.record(run, seconds, measured=status == "done")
      progress.finished(run, status, seconds, todo[i + 1:])
      if status == "interrupted":
        record.interrupted_by = signal.SIGINT
        break
    return record
  _execute_processes(todo, workdir, max(parallel, 1), sweep_spec, cli_overrides, record, progress,
                     log)
  return record


def running_elsewhere(workdir: str, run: Run) -> str | None:
  """The process holding the lock of the run's directory in sweep `workdir` (another sweep over
  the same directory, or the run started by hand), described as `workdir_lock.holder` does, or
  None when no process holds it. Takes nothing: a probe."""
  return workdir_lock.holder(os.path.join(workdir, RUNS_DIR, run.name))


def _record_elsewhere(record: SweepRecord, run: Run, holder: str, log) -> None:
  record.set(run.name, status=RUNNING_ELSEWHERE, holder=holder, error=None)
  log(f"sweep: {run.name} is running elsewhere ({holder}); not started here")


def start_run_process(argv: Sequence[str], cores: Sequence[int], log_path: str):
  """Starts `argv` (`[python, "-m", module, ...]`) as a process pinned to `cores` with thread
  pools sized to them (`thread_env`), stdout and stderr appended to `log_path`; returns
  (Popen, the open log file). The child pins itself (rlscale.scaling.pinned) so that this process,
  which may have JAX's threads running, is never forked: no `preexec_fn`."""
  out = open(log_path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
  # Own session: a terminal's Ctrl-C goes to the sweep only, which forwards it once (a second
  # signal would stop the run without its checkpoint).
  proc = subprocess.Popen(pinned.command(argv, cores), stdout=out, stderr=subprocess.STDOUT,
                          env=thread_env(len(cores)), start_new_session=True)
  return proc, out


def _execute_processes(todo, workdir, parallel, sweep_spec, cli_overrides, record, progress, log):
  """The process pool of `execute` (parallel > 1).

  SIGINT/SIGTERM (rlscale.runner.interrupts.StopFlag): one line at once, the signal forwarded to
  every running run (each finishes its step, checkpoints and exits; a second signal stops them
  at once), no new run started; the stopped runs are recorded as interrupted. Run processes live
  in their own session, so a terminal's Ctrl-C reaches them only through this forward (once), and
  die with this process (rlscale.scaling.pinned.die_with_parent)."""
  slots = core_sets(parallel)
  queue = list(todo)
  active: dict[int, tuple[subprocess.Popen, Run, float, Any]] = {}
  lock = threading.Lock()  # starting a run vs forwarding a signal to the running ones

  def forward(signum):
    with lock:
      for proc, *_ in active.values():
        if proc.poll() is None:
          proc.send_signal(signum)

  def message():
    return (f"sweep: interrupt received: {len(active)} running run(s) finish their step and write "
            "a checkpoint, no new run starts; press Ctrl-C again to stop them without one")

  with StopFlag(message=message, on_signal=forward) as stop:
    while (queue and not stop.stop) or active:
      with lock:
        for slot in range(parallel):
          if slot in active or not queue or stop.stop:
            continue
          run = queue.pop(0)
          holder = running_elsewhere(workdir, run)
          if holder is not None:  # taken since the sweep started: not a second copy
            _record_elsewhere(record, run, holder, log)
            continue
          run_dir = os.path.join(workdir, RUNS_DIR, run.name)
          os.makedirs(run_dir, exist_ok=True)
          argv = run_command(run, sweep_spec, workdir, cli_overrides)
          progress.started(run, [run] + queue + [a[1] for a in active.values()])
          proc, out = start_run_process(argv, slots[slot], os.path.join(run_dir, RUN_LOG))
          record.set(run.name, status="running", command=shell_command(argv))
          active[slot] = (proc, run, time.perf_counter(), out)
      time.sleep(0.5)
      for slot, (proc, run, t0, out) in list(active.items()):
        if proc.poll() is None:
          continue
        out.close()
        with lock:
          del active[slot]
        seconds = time.perf_counter() - t0
        ok = proc.returncode == 0 and is_finished(workdir, run)
        # A run stopped by a signal checkpoints and exits EXIT_INTERRUPTED (or 130 before its
        # first step, or 128 + signum / -signum when a second signal stopped it at once).
        interrupted = not ok and (proc.returncode in (EXIT_INTERRUPTED, 130) or (
            stop.stop and proc.returncode in (-signal.SIGINT, -signal.SIGTERM,
                                              128 + signal.SIGINT, 128 + signal.SIGTERM)))
        # Refused by its workdir's lock (taken between the check above and the run's start).
        holder = None if ok else running_elsewhere(workdir, run)
        status = ("done" if ok else RUNNING_ELSEWHERE if holder is not None
                  else DIVERGED if proc.returncode == cli.EXIT_DIVERGED
                  else "interrupted" if interrupted else "failed")
        run_dir = os.path.join(workdir, RUNS_DIR, run.name)
        fields = {"error": None}
        if holder is not None:
          fields["holder"] = holder
        elif not ok:
          fields["error"] = _error_from_log(os.path.join(run_dir, RUN_LOG))
          log_tail = discard_unstarted(run_dir)
          if log_tail is not None:
            fields["log_tail"] = log_tail
        record.set(run.name, status=status, seconds=seconds, **fields)
        progress.record(run, seconds, measured=ok)
        progress.finished(run, status, seconds, queue + [a[1] for a in active.values()])
  if stop.stop:
    record.interrupted_by = stop.signum


def sweep_file_and_arg(sweep_file: str | types.ModuleType, arg: str | None = None
                       ) -> tuple[str, str | None]:
  """(path, arg) of a sweep given as a path, "path.py:arg", or an imported sweep module (its
  __file__). An arg in both places must agree; raises ValueError otherwise."""
  if isinstance(sweep_file, types.ModuleType):
    if not getattr(sweep_file, "__file__", None):
      raise ValueError(f"sweep module {sweep_file.__name__!r} has no __file__; pass its path")
    return sweep_file.__file__, arg
  path, arg_in_path = split_config_arg(sweep_file)
  if arg is not None and arg_in_path is not None and arg != arg_in_path:
    raise ValueError(f"sweep argument given twice: {sweep_file!r} and arg={arg!r}")
  return path, arg if arg is not None else arg_in_path


def plan_sweep(sweep_file: str | types.ModuleType, workdir: str, *, arg: str | None = None,
               overrides: dict[str, Any] | None = None, shard: tuple[int, int] | None = None,
               select: Callable[[dict[str, Any]], bool] | None = None):
  """(base config, runs, spec) of a sweep file: `get_config(arg)` with `overrides` (flat dotted
  fields, as `--config.X=...`) applied, the runs of `get_sweep(arg)` for which `select(override
  dict)` is true (all when None), planned (`plan`), then those of shard (i, n). `spec` is
  "path[:arg]", the --config of the runs' commands.

  Raises FileNotFoundError for a missing file, ValueError for a file without get_config/get_sweep,
  an override naming no field, a selection that keeps no run, or runs sharing a name."""
  path, arg = sweep_file_and_arg(sweep_file, arg)
  load_sweep_module(path)  # a missing file or function is reported before the config loads
  base = load_config_file(path, arg)
  if overrides:
    base = hyper.apply_overrides(base, overrides)
  sweep_runs = get_sweep(path, arg)
  if select is not None:
    sweep_runs = [o for o in sweep_runs if select(o)]
    if not sweep_runs:
      raise ValueError(f"select keeps none of the runs of {path!r} (arg {arg!r})")
  runs = plan(base, sweep_runs, workdir)
  if shard is not None:
    runs = hyper.shard(runs, *shard)
  return base, runs, path if arg is None else f"{path}:{arg}"


def use_compilation_cache(workdir: str) -> str:
  """Shares compiled programs between a sweep's runs through JAX's persistent compilation cache:
  <workdir>/jax_cache unless a cache directory is already configured (JAX_COMPILATION_CACHE_DIR
  or jax.config). Sets this process's jax.config (effective even after JAX has compiled) and the
  environment variable (inherited by run processes). Returns the directory in use."""
  import jax  # pylint: disable=g-import-not-at-top
  path = (jax.config.jax_compilation_cache_dir or os.environ.get(COMPILATION_CACHE_ENV)
          or os.path.abspath(os.path.join(workdir, COMPILATION_CACHE_DIR)))
  os.environ[COMPILATION_CACHE_ENV] = path
  if jax.config.jax_compilation_cache_dir != path:
    jax.config.update("jax_compilation_cache_dir", path)
  return path


def run_sweep(sweep_file: str | types.ModuleType, workdir: str, *, arg: str | None = None,
              overrides: dict[str, Any] | None = None, parallel: int = 1,
              shard: tuple[int, int] | None = None,
              select: Callable[[dict[str, Any]], bool] | None = None,
              log: Callable[[str], None] = print) -> dict[str, Any]:
  """Runs a sweep file's runs into `workdir` (what `python -m rlscale.sweep` does).

  Args:
    sweep_file: path of a sweep file ("path.py" or "path.py:arg") or the imported module.
    workdir: the sweep directory: runs/<name>, the shared warm start sft/, sweep.json (or
      sweep_shard<i>of<n>.json), the JAX compilation cache jax_cache/ (`use_compilation_cache`).
    arg: the sweep file's argument (e.g. "smoke"), unless given in `sweep_file`.
    overrides: flat dotted config fields set in every run, e.g. {"optim.grad_clip_norm": 50.0}.
    parallel: runs at a time; > 1 runs each as its own `python -m rlscale.main` process pinned to
      its share of the cores (`execute`).
    shard: (i, n): only every n-th run from i (`hyper.parse_shard` reads "i/n").
    select: keeps the runs whose override dict it accepts, e.g. `lambda o: o["seed"] == 0`.
    log: progress lines.

  Returns: {"workdir", "record" (sweep.json path), "runs" (names, planned order), "statuses"
  ({name: done | skipped | failed | interrupted | diverged | pending | RUNNING_ELSEWHERE}),
  "failed"
  (count), "running_elsewhere" (count: runs another process holds, not started here),
  "interrupted_by" (the signal number that stopped the sweep, or None)}. Failed runs do not
  raise. Raises ValueError for parallel < 1 and bad sweep input (`plan_sweep`), NotADirectoryError
  for a workdir that is a file."""
  if parallel < 1:
    raise ValueError(f"--parallel must be >= 1, got {parallel}")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise NotADirectoryError(f"--workdir={workdir!r} is a file; it must be a directory "
                             "(created when missing)")
  base, runs, spec = plan_sweep(sweep_file, workdir, arg=arg, overrides=overrides, shard=shard,
                                select=select)
  path, arg = sweep_file_and_arg(spec)
  use_compilation_cache(workdir)
  meta = {"sweep_file": path, "arg": arg, "workdir": workdir, "cli_overrides": overrides or {},
          "base_learning_rate": base.optim.learning_rate,
          "reference_batch": base.optim.reference_batch, "shard": shard,
          "target": get_target(path, arg), "parallel": parallel}
  record = execute(runs, workdir, parallel=parallel, sweep_spec=spec, cli_overrides=overrides,
                   meta=meta, shard=shard, log=log)
  statuses = {name: entry["status"] for name, entry in record.entries.items()}
  return {"workdir": workdir, "record": record.path, "runs": list(statuses),
          "statuses": statuses, "failed": record.failed(),
          "running_elsewhere": record.count(RUNNING_ELSEWHERE),
          "interrupted_by": record.interrupted_by}


VALIDATION_DIR = "validation"


def seed_key(config) -> tuple[int, int]:
  """(warm start's seed, RL seed) of a run's config: runs with one key share the warm start and
  the prompt stream, the unit the report pairs decisions over."""
  from rlscale.runner import sft  # pylint: disable=g-import-not-at-top
  return (sft.effective_sft_seed(config), int(config.seed))


def validation_runs(runs: Sequence[Run], report: dict) -> list[Run]:
  """The runs the report's decisions compare (every group of every decision, base and candidate),
  seed key by seed key (sweep order within one): a validation stopped part way then holds whole
  seeds, each pairing every decision, instead of every seed of the first groups only."""
  wanted = set()
  groups = {(g["rule"], g["batch_size"]): g for g in report["groups"]}
  for d in report["decisions"]:
    for batch in (d["base"], d["candidate"]):
      wanted.update(groups[(d["lr_rule"], batch)]["runs"])
  order = {run.name: i for i, run in enumerate(runs)}
  chosen = [run for run in runs if run.name in wanted]
  return sorted(chosen, key=lambda run: (seed_key(run.config), order[run.name]))


def run_validation(sweep_file: str | types.ModuleType, workdir: str, *, arg: str | None = None,
                   overrides: dict[str, Any] | None = None, log: Callable[[str], None] = print
                   ) -> dict[str, Any]:
  """Executes the decisions' runs one at a time, alone, into <workdir>/validation/runs.

  Needs the sweep's runs (their report names the decisions' groups, the tuned ones included).
  When sweep.json says the sweep ran with parallel = 1 its own clocks are the validation and
  nothing runs. Returns run_sweep's summary dict, plus "validated_by_sweep" (bool). Raises what
  plan_sweep and rlscale.scaling.report.build_report raise (e.g. a target inside the noise)."""
  from rlscale.scaling import report as report_lib  # pylint: disable=g-import-not-at-top
  meta = report_lib.load_sweep_meta(workdir)
  if meta.get("parallel") == 1:
    log("sweep: the sweep ran with --parallel=1: its runs' own clocks are the validation")
    return {"workdir": workdir, "record": os.path.join(workdir, SWEEP_FILE), "runs": [],
            "statuses": {}, "failed": 0, "running_elsewhere": 0, "interrupted_by": None,
            "validated_by_sweep": True}
  base, runs, spec = plan_sweep(sweep_file, workdir, arg=arg, overrides=overrides)
  report = report_lib.build_report(workdir)
  todo = validation_runs(runs, report)
  log(f"sweep: validation: {len(todo)} runs of {len(report['decisions'])} decisions, one at a "
      "time, alone on the machine")
  target = os.path.join(workdir, VALIDATION_DIR)
  use_compilation_cache(workdir)
  path, arg = sweep_file_and_arg(spec)
  meta = {"sweep_file": path, "arg": arg, "workdir": target, "cli_overrides": overrides or {},
          "base_learning_rate": base.optim.learning_rate,
          "reference_batch": base.optim.reference_batch, "validation_of": workdir, "parallel": 1}
  record = execute(todo, target, parallel=1, sweep_spec=spec, cli_overrides=overrides, meta=meta,
                   processes=True, log=log)
  statuses = {name: entry["status"] for name, entry in record.entries.items()}
  return {"workdir": target, "record": record.path, "runs": list(statuses), "statuses": statuses,
          "failed": record.failed(), "running_elsewhere": record.count(RUNNING_ELSEWHERE),
          "interrupted_by": record.interrupted_by,
          "validated_by_sweep": False}
