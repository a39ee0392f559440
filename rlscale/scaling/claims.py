"""The report's conclusions as sentences generated from its numbers: each with its interval and
whether it is resolved (its interval excludes no effect), never a direction from point estimates
alone.
"""

from __future__ import annotations

from rlscale.scaling import decision as decision_lib
from rlscale.scaling.groups import TUNED


def _interval_text(ci, digits=3, missing="(no interval: fewer than 3 seeds)") -> str:
  """"[lo, hi]" (None, an infinite end in JSON, as inf), or `missing` without an interval."""
  if not ci:
    return missing
  low, high = ("inf" if c is None else f"{c:.{digits}g}" for c in ci)
  return f"[{low}, {high}]"


def paired_rule_comparison(groups: list[dict], runs: list[dict], a: str, b: str, batch: int):
  """N*(rule a) / N*(rule b) at one batch, paired over seeds (q is the same, so this is the time
  ratio too); None when the groups are missing, "same runs" when both are the same run at every
  common seed key (e.g. the tuned LR is none's there)."""
  by = {(g["rule"], g["batch_size"]): g for g in groups}
  ga, gb = by.get((a, batch)), by.get((b, batch))
  if not ga or not gb:
    return None
  rows = {r["name"]: r for r in runs}
  names_a = {tuple(rows[n]["seed_key"]): n for n in ga["runs"]}
  names_b = {tuple(rows[n]["seed_key"]): n for n in gb["runs"]}
  if all(names_a[k] == names_b[k] for k in set(names_a) & set(names_b)):
    return "same runs"
  na = {tuple(rows[n]["seed_key"]): rows[n]["samples_lower_bound"] for n in ga["runs"]}
  nb = {tuple(rows[n]["seed_key"]): rows[n]["samples_lower_bound"] for n in gb["runs"]}
  paired, _ = decision_lib.paired_positive(na, nb)
  if paired is None:
    return None
  # Censoring counts on the paired seed keys only: a run the other rule has no twin of (e.g. a
  # robustness warm start run under one rule) is not in the ratio.
  censored = any(rows[names[k]]["censored"] for names in (names_a, names_b) for k in paired.seeds)
  return paired, decision_lib.verdict(paired.ci, censored=censored), censored


def claims(report: dict) -> list[dict]:
  """The report's conclusions as sentences generated from its numbers, each with its interval and
  `resolved` (True only when its interval excludes no effect); never a direction from point
  estimates alone. [{"topic", "text", "resolved"}]."""
  out = []

  def add(topic, text, resolved=None):
    out.append({"topic": topic, "text": text, "resolved": resolved})

  t = report["target"]
  z = t.get("standard_errors_above_warm_start")
  add("target", f"Target {t['metric']} >= {t['value']:g} ({t['chosen']}): "
      + (f"{z:.1f} standard errors above the warm start ({t['warm_start']:.3f} on "
         f"{t['eval_size']} prompts)" if z is not None else "distance from the warm start unknown")
      + ((" — WEAK: fewer than 3 SE, allowed because this is a smoke sweep" if report.get("smoke")
          else " — WEAK: fewer than 3 SE, reported only because --allow_weak_target was given")
         if t.get("weak") else "") + ".")
  n_seeds = len(report["seeds"])
  if n_seeds < decision_lib.MIN_SEEDS:
    add("seeds", f"{n_seeds} seed key(s): no interval is computed below {decision_lib.MIN_SEEDS}, "
        "so no comparison below can be resolved.", False)
  for name, c in (report["invariance"].get("comparisons") or {}).items():
    a, b = name.split("_minus_")
    direction = ("closer to" if c["difference"] < 0 else "further from")
    add("invariance", f"Invariance, {a} minus {b}: {c['difference']:+.4f} "
        f"{_interval_text(c['ci'])} over {c['n']} seed(s): "
        + (f"resolved, {a} keeps the sample-indexed curves {direction} the reference batch's than {b}"
           if c["resolved"] else "not resolved") + ".", c["resolved"])
  lo, hi = _measured_range(report)
  ratio = report["generation_throughput_ratio"]
  if ratio is not None:
    shares = report["phase_shares"]
    gen = [v["generation"] for v in shares.values() if v.get("generation") is not None]
    end = report["throughput"]
    e2e = end[str(hi)]["responses_per_s"] / end[str(lo)]["responses_per_s"]
    add("throughput", f"Throughput from B = {lo} to {hi} ({report['throughput_source']}"
        + (f", {report['throughput_device']}" if report.get("throughput_device") else "")
        + f"): generation {ratio:.2f}x, end to end {e2e:.2f}x; generation is "
        f"{min(gen):.0%}-{max(gen):.0%} of RL time.")
  pf = (report.get("profile_fits") or {}).get("generation") or {}
  until = pf.get("bandwidth_bound_until_batch")
  if until:
    if pf.get("bandwidth_bound_within_measured", lo <= until <= hi):
      add("throughput", f"Generation's per-row cost equals its fixed cost at B = {until:.0f}, inside "
          f"the measured range {lo}-{hi}: below it generation is bandwidth-bound.")
    else:
      add("throughput", f"The generation cost fit puts the end of the bandwidth-bound regime at "
          f"B = {until:.0f}, outside the measured range {lo}-{hi}: not claimed.")
  for d in report["decisions"]:
    add("decision", f"{d['lr_rule']}: B = {d['candidate']} vs {d['base']}: predicted time ratio "
        f"{_fmt_num(d['predicted_time_ratio'])} {_interval_text(d['time_ratio_ci'])} "
        f"(N* ratio {_fmt_num(d['samples_ratio'])}, q ratio {_fmt_num(d['throughput_ratio'])}, "
        f"{d['n_seeds']} seeds): {d['verdict']}" + (f" ({d['why']})" if d.get("why") else "") + ".",
        d["verdict"] != "unresolved")
  for w, decisions in (report.get("decisions_by_warm_start") or {}).items():
    for d in decisions:
      add("decision_by_warm_start", f"Warm start {w} alone, {d['lr_rule']}: B = {d['candidate']} vs "
          f"{d['base']}: predicted time ratio {_fmt_num(d['predicted_time_ratio'])} "
          f"{_interval_text(d['time_ratio_ci'])} ({d['n_seeds']} seeds): {d['verdict']}"
          + (f" ({d['why']})" if d.get("why") else "") + ".", d["verdict"] != "unresolved")
  batches = sorted({g["batch_size"] for g in report["groups"]})
  for other in ("sqrt", TUNED):
    for batch in batches:
      res = paired_rule_comparison(report["groups"], report["runs"], "none", other, batch)
      if res is None:
        continue
      if res == "same runs":
        if other == TUNED:
          add("retuning", f"At B = {batch} the tuned LR is none's for every seed: the same runs.")
        continue
      paired, verdict, censored = res
      words = {"faster": "none is faster", "slower": "none is slower",
               "unresolved": "not resolved"}[verdict]
      add("retuning", f"At B = {batch}, without retuning (none) vs {other}: time ratio "
          f"{paired.ratio:.3g} {_interval_text(paired.ci)} over {paired.n} seed(s): "
          f"{words}" + (" (a side is censored)" if censored else "") + ".", verdict != "unresolved")
  e = report.get("tuned_lr_exponent") or {}
  if e.get("exponent") is not None:
    missing = f"(no interval: {e['note']})" if e.get("note") else "(no interval)"
    add("tuned_lr", f"Tuned LR vs batch: exponent {e['exponent']:.2f} "
        f"{_interval_text(e['ci'], missing=missing)} over {e['n']} bracketed batches, optimum "
        "interpolated between grid points, jackknife over seed keys (0 = none, 0.5 = sqrt, "
        "1 = linear)" + (f"; {e['note']}" if e.get("note") and e.get("ci") else "") + ".",
        e.get("ci") is not None)
  elif e:
    add("tuned_lr", f"Tuned LR vs batch: no exponent ({e.get('note')}); not bracketed at B = "
        f"{', '.join(map(str, e.get('unbracketed_batches', []))) or '-'}.", False)
  for rule, fit in report["scaling_fit"].items():
    if "note" in fit:
      add("critical_batch", f"{rule}: {fit['note']}.", False)
    else:
      add("critical_batch", f"{rule}: N*(B) = N_min (1 + B / B_noise) over n = {fit['n']} batch sizes: "
          f"B_noise {_fmt_num(fit.get('b_noise'))} (R^2 {fit['r2']:.2f}, n = {fit['n']}); predicted "
          f"time-optimal batch {_fmt_num(fit.get('predicted_time_optimal_batch'))}, measured best "
          f"{_fmt_num(fit.get('measured_best_batch'))}.", None)
  gns = report["gns"]
  if gns.get("available"):
    parts = [f"{phase.replace('_', ' ')} "
             f"{'inf (noise-dominated)' if p['b_simple'] is None else _fmt_num(p['b_simple'])} "
             f"{_interval_text(p['ci'], missing='(one step: no interval)')}"
             for phase, p in gns["pooled"].items()]
    add("noise_scale", f"B_simple pooled ({gns['unit']}): " + "; ".join(parts) + ".")
  val = report["validation"]
  if val and all(v["source"] == "not run" for v in val):
    add("validation", "Validation not run: no decision's time ratio was measured on runs executed "
        "alone (`python -m rlscale.sweep ... --validate`).", False)
  elif val:
    resolved = [v for v in val if v["measured_verdict"] in ("faster", "slower")]
    agree = sum(v["measured_verdict"] == v["predicted_verdict"] for v in resolved)
    add("validation", f"Validation ({val[0]['source']}): {len(resolved)} of {len(val)} decisions "
        f"resolved on the runs' own clocks, {agree} of them as predicted.",
        bool(resolved) and agree == len(resolved))
  tokens = [v for v in report["response_tokens"].values() if v is not None]
  if tokens:
    add("data", f"Mean response length {min(tokens):.1f}-{max(tokens):.1f} tokens across batches.")
  return out


def _fmt_num(x) -> str:
  if x is None:
    return "-"
  if isinstance(x, str):
    return x
  return f"{x:.3g}"


def _measured_range(report) -> tuple[int, int]:
  measured = sorted(int(b) for b in report["throughput"])
  return (measured[0], measured[-1]) if measured else (0, 0)
