"""Training: TrainState, the pure update step and its pmap wrapper, optimizer, schedules and LR
scaling."""
