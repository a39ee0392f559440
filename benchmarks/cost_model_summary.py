"""Summary of the cost-model throughput profiles (benchmarks/cost_model_profile.sh).

  python benchmarks/cost_model_summary.py benchmarks/results/cost_model_profile

Reads DIR/*/throughput.json (`rlscale.aot.profile`) and writes DIR/summary.json: per model and
response length, the generation-throughput ratio between the largest and the smallest batch
(generation responses/s at B_max over B_min; the paper measured 2.29x on GPUs between 64 and
1,024) from the roofline and from the cost model's own seconds, and the share of generation in
the step at each batch (verl measured 70%). A cost-model estimate, not a measurement.
"""

import glob
import json
import os
import sys


def generation_rate(row, key="seconds"):
  """Generation responses/s of a throughput.json row, from the roofline ("seconds") or from the
  cost model's own seconds ("cost_model_seconds_by_phase"); None where missing."""
  seconds = (row["seconds"]["generation"]["median"] if key == "seconds"
             else row["cost_model_seconds_by_phase"]["generation"])
  return row["batch_size"] / seconds if seconds else None


def summarize(profile):
  """One summary row of a profile: batches, ratio, shares, seconds, bounds, not fitting."""
  rows = sorted(profile["batches"], key=lambda r: r["batch_size"])
  out = {"model": profile["model"], "layers": profile["layers"], "topology": profile["topology"],
         "chips": profile["chips"], "mesh": profile["mesh"], "prompt_len": profile["prompt_len"],
         "response_len": profile["response_len"], "estimate": profile["label"],
         "not_fitting": [r["batch_size"] for r in profile["not_fitting"]], "batches": {}}
  for row in rows:
    progs = row["programs"]
    out["batches"][str(row["batch_size"])] = {
        "step_seconds": row["seconds"]["step"]["median"],
        "generation_seconds": row["seconds"]["generation"]["median"],
        "training_seconds": row["seconds"]["training"]["median"],
        "generation_share": row["generation_share"],
        "responses_per_s": row["responses_per_s"],
        "generation_responses_per_s": generation_rate(row),
        "decode_step_seconds": progs["decode"]["seconds"], "decode_bound": progs["decode"]["bound"],
        "update_microbatch_bound": progs["update"]["bound"],
        "cost_model_generation_share": _share(row["cost_model_seconds_by_phase"])}
  if len(rows) >= 2:
    lo, hi = rows[0], rows[-1]
    out["generation_throughput_ratio"] = generation_rate(hi) / generation_rate(lo)
    rates = [generation_rate(r, "cost_model") for r in (lo, hi)]
    out["cost_model_generation_throughput_ratio"] = (rates[1] / rates[0] if all(rates) else None)
    out["end_to_end_ratio"] = hi["responses_per_s"] / lo["responses_per_s"]
  return out


def _share(by_phase):
  """Generation's share of the step from the cost model's own per-phase seconds, or None."""
  values = [v for v in by_phase.values()]
  if any(v is None for v in values) or not sum(values):
    return None
  return by_phase["generation"] / sum(values)


def main(directory):
  rows = []
  for path in sorted(glob.glob(os.path.join(directory, "*", "throughput.json"))):
    with open(path, encoding="utf-8") as f:
      rows.append({"profile": os.path.relpath(path, directory), **summarize(json.load(f))})
  with open(os.path.join(directory, "summary.json"), "w", encoding="utf-8") as f:
    json.dump({"command": "bash benchmarks/cost_model_profile.sh", "rows": rows}, f, indent=2)
  for r in rows:
    shares = ", ".join(f"B={b}: {v['generation_share']:.0%}" for b, v in r["batches"].items())
    ratio = r.get("generation_throughput_ratio")
    print(f"{r['model']} Tr={r['response_len']}: generation ratio "
          f"{'-' if ratio is None else f'{ratio:.2f}x'}; generation share {shares}"
          + (f"; not fitting: {r['not_fitting']}" if r["not_fitting"] else ""))


if __name__ == "__main__":
  main(sys.argv[1])
