r"""Verifier throughput: answers/s for numeric, fraction and expression answers, plus bounds.

  python benchmarks/verifier.py [--out DIR] [--quick]

--out is the directory for verifier.json (default benchmarks/results; a path ending in .json is
taken as the file itself); --quick measures each category once instead of best of 3 (seconds).

Measures, on this machine's CPU (best of --repeats runs, result cache cleared before each):
  * numeric: 1,024 chain_sum-style responses ("17", "-3", "answer: 12") through
    `rewards.score_batch` -- the main job's reward path (goal: < 0.5 s per batch);
  * fraction: LaTeX/plain fractions and decimals (`\frac{3}{4}` vs `0.75`), fast path;
  * fraction_sympy: fraction arithmetic needing sympy (`\frac{1}{2}+\frac{1}{4}` vs `3/4`);
  * expression: algebraic answers (`(x+3)^2` vs `x^2+6x+9`), sympy in the worker process;
  * worker cold start, the slowest adversarial input, the hard time limit firing (a 30 s
    request; a native scorer's parse_expr on a power tower), and the CLI's wall time.
Writes one JSON object.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position (after the sys.path line)
from rlscale import outputs
from rlscale.tasks import arithmetic
from rlscale.tasks import reasoning_gym_source
from rlscale.tasks import rewards
from rlscale.tasks import verifier
from rlscale.tasks import worker


def _numeric_batch(n):
  task = arithmetic.ArithmeticSource(seed=0, num_operands=3, max_operand=9)
  examples = [task.train_example(i) for i in range(n)]
  # Right, wrong and wordy answers, as a character model produces them.
  styles = ["{a}", "{w}", "answer: {a}", "{a}\n", "= {w}", r"\boxed{{{a}}}", "{a} ", "-{a}"]
  responses = [styles[i % len(styles)].format(a=e.answer, w=int(e.answer) + 1)
               for i, e in enumerate(examples)]
  return task, responses, examples


def _pairs(kind, n):
  out = []
  for i in range(n):
    p, q = i % 97 + 1, i % 89 + 2
    if kind == "fraction":
      out.append((rf"\boxed{{\frac{{{p}}}{{{q}}}}}", f"{p / q:.12f}" if i % 2 else f"{p}/{q}"))
    elif kind == "fraction_sympy":
      out.append((rf"\boxed{{\frac{{{p}}}{{{q}}}+\frac{{1}}{{{q}}}}}", f"{p + 1}/{q}"))
    else:
      out.append((rf"\boxed{{(x+{p})^2 - {q}y}}", f"x^2+{2 * p}x+{p * p}-{q}y" if i % 2 else
                  f"x^2+{2 * p}x+{p * p}+{q}y"))
  return out


def _best(fn, repeats):
  times = []
  for _ in range(repeats):
    verifier._cache.clear()  # pylint: disable=protected-access (measure real work, not the cache)
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"),
                      help="directory for verifier.json (or a .json file path)")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs per category (best kept)")
  parser.add_argument("--quick", action="store_true", help="one timed run per category")
  args = parser.parse_args()
  if args.quick:
    args.repeats = 1
  out_path = args.out if args.out.endswith(".json") else os.path.join(args.out, "verifier.json")

  worker.client().close()
  start = time.perf_counter()
  verifier.verify(r"\boxed{x+1}", "1+x")
  cold_start_s = time.perf_counter() - start

  result = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": os.cpu_count()},
            "worker_cold_start_s": round(cold_start_s, 3), "categories": {}}
  task, responses, examples = _numeric_batch(1024)
  seconds = _best(lambda: rewards.score_batch(task, responses, examples), args.repeats)
  mean_reward = float(rewards.score_batch(task, responses, examples)[0].mean())
  result["categories"]["numeric"] = {
      "n": 1024, "batch_seconds": round(seconds, 4), "answers_per_s": round(1024 / seconds),
      "goal_batch_seconds": 0.5, "meets_goal": seconds < 0.5, "mean_reward": mean_reward,
      "path": "score_batch, plain-number fast path"}
  for kind, n in (("fraction", 1024), ("fraction_sympy", 256), ("expression", 256)):
    pairs = _pairs(kind, n)
    scores = []
    seconds = _best(lambda: scores.append([verifier.verify(a, r) for a, r in pairs]),
                    args.repeats)
    rewards_list = [s.reward for s in scores[-1]]
    result["categories"][kind] = {
        "n": n, "batch_seconds": round(seconds, 4), "answers_per_s": round(n / seconds),
        "mean_reward": sum(rewards_list) / n,
        "path": "fast path" if kind == "fraction" else f"sympy worker ({verifier.VerifierConfig().timeout_s:g} s hard limit)"}

  hostile = [r"\boxed{9^{9^{9^{9}}}}", "9**9**9**9", "{" * 100_000, "\x00" * 10,
             rf"\boxed{{{'(' * 5000}}}", r"\boxed{(a+b+c+d+e+f+g+h)^{40}}",
             "__import__('os').system('ls')", r"\boxed{" + "x+" * 5000 + "1}"]
  slowest = 0.0
  for text in hostile:
    for order in ("boxed,last_number", "full"):
      start = time.perf_counter()
      score = verifier.verify(text, "17", verifier.VerifierConfig(extract_order=order))
      slowest = max(slowest, time.perf_counter() - start)
      assert score.reward == 0.0, (text[:30], score)
  result["adversarial"] = {"inputs": len(hostile) * 2, "max_seconds": round(slowest, 4),
                           "all_zero": True}

  # The hard limit itself: a request that would run for 30 s. Beside it, a power tower sent to
  # the native countdown scorer, which rlscale scores on its own parser (rlscale.tasks.
  # native_scorers): refused in milliseconds, where reasoning-gym's parse_expr ran to the limit.
  start = time.perf_counter()
  timeout_s = verifier.VerifierConfig().timeout_s
  response, reason = worker.client().call({"op": "sleep", "seconds": 30}, timeout_s=timeout_s)
  sleep_seconds = time.perf_counter() - start
  assert response is None, reason
  countdown = reasoning_gym_source.ReasoningGymSource(
      "countdown", {}, seed=0, scorer="native",
      verifier_config=verifier.VerifierConfig(extract_order="full"))
  example = countdown.train_example(0)
  countdown.score(example.answer, example)  # warm: worker running, reasoning-gym imported
  start = time.perf_counter()
  score = countdown.score("9**9**9**9", example)
  result["hard_limit"] = {
      "timeout_s": timeout_s, "sleep_30s_request_seconds": round(sleep_seconds, 3),
      "native_countdown_tower_seconds": round(time.perf_counter() - start, 3),
      "native_countdown_tower_reason": score.reason}

  start = time.perf_counter()
  out = subprocess.run([sys.executable, "-m", "rlscale.verify", r"\boxed{\dfrac12}", "0.5"],
                       capture_output=True, text=True, cwd=ROOT, check=True).stdout
  cli_fast = time.perf_counter() - start
  start = time.perf_counter()
  out_sympy = subprocess.run(
      [sys.executable, "-m", "rlscale.verify", r"\boxed{(x+1)^2}", "x^2+2x+1"],
      capture_output=True, text=True, cwd=ROOT, check=True).stdout
  result["cli"] = {"fast_path_wall_seconds": round(cli_fast, 3), "output": json.loads(out),
                   "sympy_wall_seconds": round(time.perf_counter() - start, 3),
                   "sympy_output": json.loads(out_sympy)}
  outputs.write_atomic(out_path, json.dumps(result, indent=2) + "\n")
  print(json.dumps(result, indent=2))


if __name__ == "__main__":
  main()
