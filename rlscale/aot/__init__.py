"""Ahead-of-time compilation of a run's steps for TPU slices, on a machine without a TPU.

    python -m rlscale.aot --config=experiments/configs/default.py --topology=v5e:2x4

builds the run's own jitted steps from its config (update, sampler, held-out evaluation,
reference / old-logp / value passes) with abstract inputs on a mesh of the slice's devices,
compiles each with the real TPU compiler (libtpu: `pip install "rlscale[tpu]"`) and prints per
device: arguments, temporaries, peak against the HBM, the cost model's flops, bytes and seconds,
and the compile time; a step that does not fit is one line saying what to change.

Modules, bottom up: `topology` (devices of a slice, usable HBM), `models` (the policy's
ModelConfig from the config, kernels for the target), `steps` (the run's jitted steps with
abstract inputs), `measure` (compile one step, read the compiler's figures), `report` (table,
verdicts, JSON rows), `run` (`compile_run`, the library call), `__main__` (the command line).
Kept import-light (no JAX here), so the command line can choose JAX's platform first.
"""
