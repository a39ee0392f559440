"""Running a sweep on this machine: one run = one workdir = one unchanged `train_and_evaluate` call.

The runs come from the sweep's plan (`rlscale.scaling.sweep_plan`). `execute` trains the warm
starts once, then the runs, in this process or as `parallel` separate processes pinned to their
share of the cores (rlscale.scaling.pinned); it skips finished runs (summary.json exists), resumes
interrupted ones (the runner's checkpoints), leaves alone a run another process holds ("running
elsewhere"), records a run stopped by a non-finite loss as diverged, records failures in
`<workdir>/sweep.json` (`SweepRecord`) and carries on; Ctrl-C or SIGTERM stops it with every
running run checkpointed. A run that fails (or is stopped) before writing results leaves no run
directory behind (the runner removes what it made; a run process's log tail goes into
sweep.json), so the report and a rerun never meet a half-made one.

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

import datetime
import os
import shutil
import signal
import subprocess
import threading
import time
import traceback
import types
from typing import Any, Callable, Sequence

from rlscale import cli
from rlscale import outputs
from rlscale.runner import workdir_lock
from rlscale.runner.interrupts import EXIT_INTERRUPTED, StopFlag
from rlscale.scaling import pinned
from rlscale.scaling.sweep_plan import (RUNS_DIR, SFT_DIR, Run, budget_samples, get_target,
                                        plan_sweep, run_command, shell_command,
                                        sweep_file_and_arg, validation_runs, warm_start_signature)
# Re-exported for callers that import the plan from here (experiments/sweeps/*.py,
# tests/experiments/test_sweep_files.py); new code imports rlscale.scaling.sweep_plan.
from rlscale.scaling.sweep_plan import load_sweep_module, plan  # noqa: F401

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


def is_finished(workdir: str, run: Run) -> bool:
  return os.path.exists(os.path.join(workdir, RUNS_DIR, run.name, SUMMARY_FILE))


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
  todo, finished, elsewhere = [], 0, 0
  for run in runs:
    if is_finished(workdir, run):
      record.entries[run.name]["status"] = "skipped"
      finished += 1
    elif (holder := running_elsewhere(workdir, run)) is not None:
      _record_elsewhere(record, run, holder, log)
      elsewhere += 1
    else:
      todo.append(run)
  record.write()
  if finished:
    log(f"sweep: {finished} of {len(runs)} runs already finished; skipping them")
  if elsewhere:
    log(f"sweep: {elsewhere} of {len(runs)} runs running elsewhere, not started here")
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


def run_validation(sweep_file: str | types.ModuleType, workdir: str, *, arg: str | None = None,
                   overrides: dict[str, Any] | None = None, log: Callable[[str], None] = print
                   ) -> dict[str, Any]:
  """Executes the decisions' runs one at a time, alone, into <workdir>/validation/runs.

  Needs the sweep's runs (their report names the decisions' groups, the tuned ones included).
  When sweep.json says the sweep ran with parallel = 1 its own clocks are the validation and
  nothing runs. Returns run_sweep's summary dict, plus "validated_by_sweep" (bool). Raises what
  plan_sweep and rlscale.scaling.report.build_report raise (e.g. a target inside the noise)."""
  from rlscale.scaling import report as report_lib  # pylint: disable=g-import-not-at-top
  from rlscale.scaling.run_data import load_sweep_meta  # pylint: disable=g-import-not-at-top
  meta = load_sweep_meta(workdir)
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
