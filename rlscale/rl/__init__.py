"""RL algorithms as pure functions: advantage estimators, policy and value losses, loss aggregation,
KL estimators, masks, and algorithm presets, each registered by name where a config selects it."""
