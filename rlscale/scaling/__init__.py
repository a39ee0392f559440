"""The batch-size study: sweeps, throughput profiles, samples- and time-to-target, the decision rule.

Modules (one topic each): `hyper` (sweep definitions as lists of flat override dicts), `sweep`
(running them), `throughput` (seconds per RL step by phase, alone on the machine), `fits` (linear
cost models, N*(B) and the time-optimal batch), `curves` (smoothing, samples-to-target,
invariance), `noise_scale` (McCandlish et al. 2018 B_simple), `decision` (the decision rule with
bootstrap intervals), `report` (run directories -> report.json / report.md / CSV) and `figures`.
"""
