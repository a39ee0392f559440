"""The device layout, the bottom layer of rlscale: a `jax.sharding.Mesh` from the config (one
device is the mesh {data: 1}), logical axis rules, shardings of parameter trees, host batches as
global arrays.

Modules: `mesh` (the mesh from `config.mesh`, the batch axes), `rules` (logical axis names ->
mesh axes, the regex table over parameter paths), `shardings` (NamedShardings of a tree, the FSDP
sufficiency check, placing a tree on the mesh), `data` (host rows -> global arrays, one process or
several). The steps jitted over a mesh live above: the update step and the forward passes in
`rlscale.train` (`update_fn`, `passes`), the sampler in `rlscale.sampler`. Nothing here imports
from train/, sampler/ or runner/.
"""
