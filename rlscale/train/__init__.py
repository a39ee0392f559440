"""Training: TrainState and its mesh shardings (`state`), the per-microbatch RL objective
(`objective`), the pure update step in the global view (`update`) and its jit over a mesh
(`update_fn`), the log-prob and value passes over a mesh (`passes`), optimizer, schedules and LR
scaling (`optimizer`), per-executable XLA options (`compile_options`), memory of the compiled
step (`memory`)."""
