"""Every benchmark in one command: sampler (W1), update step, verifier and RL step (W2).

  python benchmarks/run_all.py --out DIR [--quick] [--only rl_step,verifier]
                               [--extra "rl_step=--rounds 3 --no_trl"]

Each benchmark runs as its own process (`python benchmarks/NAME.py --out ...`), so each stays
runnable alone, its peak resident memory is its own (from `os.wait4`), and one that fails leaves the
others' results; the exit code is 1 when any failed. Writes
  DIR/<name>.json          what each script writes;
  DIR/results.json         machine (with the load average before and after each benchmark);
                           w1 (the sampler JSON); w2 {rlscale: {seconds_per_step, splits},
                           trl: {seconds_per_step, splits, torch_threads} or null, trl_status,
                           ratio_trl_over_rlscale, compiles_after_warmup}; update_step (its JSON);
                           verifier (its JSON); matmul_peak_flops (the best any benchmark measured);
                           peak_rss_mib {name: MiB}; seconds {name: wall seconds}; goals; status;
  DIR/results.md           one table of the headline figures and the issue's goals.
--quick passes each script its quick mode and trims what the summary does not use (the sampler
without the uncached and one-thread generators, the update step at 4k and 16k tokens, one verifier
repeat): under 6 minutes on the quiet 2-core machine; the full suite under 20.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from rlscale import outputs  # noqa: E402  pylint: disable=wrong-import-position

BENCHMARKS = ("sampler", "update_step", "verifier", "rl_step")
QUICK_ARGS = {
    "sampler": ["--quick", "--generators", "rlscale_cache,rlscale_cache_grouped_g8,transformers"],
    "update_step": ["--quick", "--tokens", "4096,16384"],
    "verifier": ["--quick"],
    "rl_step": ["--quick"],
}
# The goals: name -> (target, where the measured value is read from results.json).
GOALS = {
    "w2_trl_over_rlscale (>= 2, floor 1.5)": 2.0,
    "update_step_mfu_16384": 0.5,
    "sampler_speedup_vs_transformers_at_1": 5.0,
    "sampler_speedup_vs_transformers_at_64": 3.0,
    "sampler_generation_mfu_256": 0.5,
}


def load_average() -> list[float]:
  return [round(x, 2) for x in os.getloadavg()]


def output_path(name: str, out: str) -> str:
  """verifier.py takes a file path, the others a directory."""
  return os.path.join(out, "verifier.json") if name == "verifier" else out


def run_benchmark(name: str, out: str, args: list[str], log) -> dict:
  """Runs benchmarks/<name>.py in a child process; returns its status, wall seconds, peak RSS
  (MiB, the child's own), load averages and the tail of its output when it failed."""
  command = [sys.executable, os.path.join(ROOT, "benchmarks", f"{name}.py"),
             "--out", output_path(name, out), *args]
  log(f"== {name}: {' '.join(shlex.quote(c) for c in command[1:])}")
  load = load_average()
  start = time.perf_counter()
  with open(os.path.join(out, f"{name}.log"), "w", encoding="utf-8") as stream:
    process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                   filter(None, [ROOT, os.environ.get("PYTHONPATH")]))})
    _, status, usage = os.wait4(process.pid, 0)
  process.returncode = os.waitstatus_to_exitcode(status)
  seconds = time.perf_counter() - start
  result = {"returncode": process.returncode, "seconds": seconds,
            "peak_rss_mib": usage.ru_maxrss / 1024, "load_average_before": load,
            "load_average_after": load_average()}
  if process.returncode:
    with open(os.path.join(out, f"{name}.log"), encoding="utf-8") as f:
      result["log_tail"] = f.read()[-3000:]
  log(f"   {name}: exit {process.returncode}, {seconds:.0f} s, peak RSS "
      f"{result['peak_rss_mib']:.0f} MiB, load {result['load_average_after']}")
  return result


def read_json(path: str):
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def _get(tree, *keys):
  for key in keys:
    if not isinstance(tree, dict) or key not in tree:
      return None
    tree = tree[key]
  return tree


def summarize(out: str, runs: dict, quick: bool) -> dict:
  """results.json from the scripts' JSON files and the run records."""
  w1 = read_json(os.path.join(out, "sampler.json"))
  update = read_json(os.path.join(out, "update_step.json"))
  verifier = read_json(os.path.join(out, "verifier.json"))
  w2_raw = read_json(os.path.join(out, "rl_step.json"))
  w2 = None
  if w2_raw:
    def headline(system):
      return ({k: system[k] for k in ("seconds_per_step", "splits", "torch_threads",
                                       "host_threads") if k in system}
              if system else None)
    w2 = {"rlscale": headline(w2_raw["rlscale"]), "trl": headline(w2_raw["trl"]),
          "trl_status": w2_raw["trl_status"],
          "ratio_trl_over_rlscale": w2_raw["ratio_trl_over_rlscale"],
          "compiles_after_warmup": w2_raw["compiles_after_warmup"],
          "trl_by_threads": {t: s and round(s["seconds_per_step"], 3)
                             for t, s in w2_raw["trl_by_threads"].items()},
          "rlscale_by_host_threads": {t: s and round(s["seconds_per_step"], 3) for t, s in
                                      w2_raw.get("rlscale_by_host_threads", {}).items()},
          "trl_stalled_threads": w2_raw.get("trl_stalled_threads", {})}
  peaks = [x for x in (_get(w1, "matmul_flops"), _get(update, "matmul_flops")) if x]
  measured = {
      "w2_trl_over_rlscale (>= 2, floor 1.5)": _get(w2, "ratio_trl_over_rlscale"),
      "update_step_mfu_16384": _get(update, "mfu", "16384"),
      "sampler_speedup_vs_transformers_at_1": _get(w1, "ratios", "speedup_vs_transformers", "1"),
      "sampler_speedup_vs_transformers_at_64": _get(w1, "ratios", "speedup_vs_transformers", "64"),
      "sampler_generation_mfu_256": _get(w1, "generation_mfu", "rlscale_cache", "256"),
  }
  cpus = os.cpu_count() or 1
  loads = [r["load_average_before"][0] for r in runs.values()] + [
      r["load_average_after"][0] for r in runs.values()]
  return {
      "machine": {"platform": platform.platform(), "processor": platform.processor(),
                  "cpu_count": cpus, "python": platform.python_version(),
                  "versions": _get(w2_raw, "machine") or _get(w1, "machine"),
                  "load_average": {n: [r["load_average_before"], r["load_average_after"]]
                                   for n, r in runs.items()},
                  # A 1-minute load above half the cores means other work shared the CPU.
                  "under_load": bool(loads) and max(loads) > 0.5 * cpus},
      "quick": quick,
      "w1": w1, "w2": w2, "update_step": update, "verifier": verifier,
      "matmul_peak_flops": max(peaks) if peaks else None,
      "peak_rss_mib": {n: r["peak_rss_mib"] for n, r in runs.items()},
      "seconds": {n: r["seconds"] for n, r in runs.items()},
      "status": {n: "ok" if r["returncode"] == 0 else f"failed (exit {r['returncode']})"
                 for n, r in runs.items()},
      "compiles_after_warmup": {"update_step": _get(update, "compiles_after_warmup"),
                                "rl_step": _get(w2, "compiles_after_warmup")},
      "goals": {name: {"target": target, "measured": measured[name],
                       "met": None if measured[name] is None else measured[name] >= target}
                for name, target in GOALS.items()},
  }


def _fmt(value, spec: str = ".3g", none: str = "-") -> str:
  return none if value is None else format(value, spec)


def markdown(results: dict) -> str:
  """One table: benchmark, figure, value."""
  rows = []
  w1, w2, update, ver = results["w1"], results["w2"], results["update_step"], results["verifier"]
  if w1:
    tps = w1["tokens_per_s"]
    for batch in ("1", "64", "256"):
      hf = _get(tps, "transformers", batch)
      rows.append(("W1 sampler", f"new tokens/s at B={batch}: rlscale / transformers",
                   f"{_fmt(tps['rlscale_cache'].get(batch), ',.0f')} / "
                   f"{_fmt(hf, ',.0f', 'not installed')}"))
    rows.append(("W1 sampler", "generation MFU at B=256 (prefill included)",
                 _fmt(_get(w1, "generation_mfu", "rlscale_cache", "256"), ".1%")))
  if w2:
    def split(system):
      return ", ".join(f"{k} {v:.2f}" for k, v in system["splits"].items())
    rows.append(("W2 RL step", "rlscale s/step (" + ", ".join(w2["rlscale"]["splits"]) + ")",
                 f"{w2['rlscale']['seconds_per_step']:.2f} at {w2['rlscale'].get('host_threads')} "
                 f"host thread(s) ({split(w2['rlscale'])}); s/step by host threads "
                 f"{w2['rlscale_by_host_threads']}"))
    rows.append(("W2 RL step", "TRL GRPOTrainer s/step",
                 f"{w2['trl']['seconds_per_step']:.2f} at {w2['trl']['torch_threads']} torch "
                 f"thread(s) ({split(w2['trl'])}); s/step by threads {w2['trl_by_threads']}"
                 + (f", stalled in warm-up (s): {w2['trl_stalled_threads']}"
                    if w2["trl_stalled_threads"] else "")
                 if w2["trl"] else w2["trl_status"]))
    rows.append(("W2 RL step", "TRL / rlscale (goal >= 2)",
                 _fmt(w2["ratio_trl_over_rlscale"], ".2f", w2["trl_status"])))
  if update:
    for tokens, mfu in update["mfu"].items():
      rows.append(("Update step", f"{tokens} tokens/step: tokens/s, MFU",
                   f"{update['tokens_per_s'][tokens]:,.0f}, {mfu:.1%}"))
  if ver:
    numeric = _get(ver, "categories", "numeric")
    if numeric:
      rows.append(("Verifier", f"{numeric['n']} numeric answers (s)",
                   _fmt(numeric["batch_seconds"], ".3f")))
  rows.append(("Machine", "matmul peak (float32 GFLOP/s)",
               _fmt(results["matmul_peak_flops"] and results["matmul_peak_flops"] / 1e9, ".0f")))
  rows.append(("All", "compiles after warm-up",
               ", ".join(f"{k} {v}" for k, v in results["compiles_after_warmup"].items())))
  rows.append(("All", "peak RSS (MiB)",
               ", ".join(f"{k} {v:.0f}" for k, v in results["peak_rss_mib"].items())))
  rows.append(("All", "wall seconds",
               ", ".join(f"{k} {v:.0f}" for k, v in results["seconds"].items())))
  for name, goal in results["goals"].items():
    rows.append(("Goal", f"{name} >= {goal['target']}",
                 f"{_fmt(goal['measured'], '.3g')} ({'met' if goal['met'] else 'not met' if goal['met'] is False else 'not measured'})"))
  machine = results["machine"]
  head = (f"Measured {time.strftime('%Y-%m-%d')} on {machine['cpu_count']} CPU(s) "
          f"({machine['processor'] or machine['platform']}), {'--quick' if results['quick'] else 'full'} "
          f"run; load average (1, 5, 15 min) before/after each benchmark: "
          + "; ".join(f"{n} {b} -> {a}" for n, (b, a) in machine["load_average"].items())
          + (". **Under load: other processes shared the CPU; absolute numbers are low and noisy, "
             "ratios within one benchmark are fairer.**" if machine["under_load"] else "."))
  table = ["| Benchmark | Figure | Value |", "|---|---|---|"]
  table += [f"| {a} | {b} | {c} |" for a, b, c in rows]
  return head + "\n\n" + "\n".join(table) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True, help="directory for every JSON and results.md")
  parser.add_argument("--quick", action="store_true", help="each script's quick mode")
  parser.add_argument("--only", default=",".join(BENCHMARKS),
                      help=f"comma-separated subset of {','.join(BENCHMARKS)}")
  parser.add_argument("--extra", action="append", default=[],
                      help="NAME=ARGS: more arguments for one script (repeatable), e.g. "
                           "'rl_step=--rounds 3'")
  args = parser.parse_args(argv)
  chosen = [n for n in args.only.split(",") if n]
  if not chosen or set(chosen) - set(BENCHMARKS):
    parser.error(f"--only must name some of {BENCHMARKS}, got {args.only!r}")
  extra = {}
  for item in args.extra:
    name, _, rest = item.partition("=")
    if name not in BENCHMARKS:
      parser.error(f"--extra must look like NAME=ARGS with NAME in {BENCHMARKS}, got {item!r}")
    extra[name] = extra.get(name, []) + shlex.split(rest)
  os.makedirs(args.out, exist_ok=True)
  runs = {}
  for name in BENCHMARKS:
    if name in chosen:
      runs[name] = run_benchmark(name, args.out,
                                 (QUICK_ARGS[name] if args.quick else []) + extra.get(name, []),
                                 lambda line: print(line, flush=True))
  results = summarize(args.out, runs, args.quick)
  outputs.write_json(os.path.join(args.out, "results.json"), results, indent=2)
  table = markdown(results)
  outputs.write_atomic(os.path.join(args.out, "results.md"), table)
  print(table, flush=True)
  failed = [n for n, r in runs.items() if r["returncode"]]
  for name in failed:
    print(f"{name} failed; the end of its log:\n{runs[name]['log_tail']}", file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
