"""The batch-size study: sweeps, throughput profiles, samples- and time-to-target, the decision rule.

Modules (one topic each). Sweeps: `hyper` (sweep definitions as lists of flat override dicts),
`sweep_plan` (a sweep file -> the runs, their commands and shared warm starts), `sweep` (running
them on this machine), `pinned` (a run process pinned to its cores). Throughput: `throughput`
(seconds per RL step by phase, measured alone on the machine), `throughput_model` (q(B) from a
profile or the runs' clocks). Analysis: `run_data` (reading run directories), `target` (the
pre-registered target), `curves` (smoothing, samples-to-target, invariance), `rows` (a row per run
and per group), `groups` (LR-rule and tuned groups), `tuned_lr` (the tuned LR's exponent in B),
`decision` (the decision rule with paired t intervals), `validation` (predicted vs measured time
ratios), `fits` (cost models, N*(B) and the time-optimal batch), `noise_scale` (McCandlish et al.
2018 B_simple), `claims` (the conclusions as sentences). Output: `report` (a sweep directory ->
the report dict), `report_writer` (report.json / report.md / CSV) and `figures`.
"""
