"""One device layer: a `jax.sharding.Mesh` from the config, logical axis rules, shardings of the
train state, host batches as global arrays, and the update step jitted over the mesh.

Modules: `mesh` (the mesh from `config.mesh`), `rules` (logical axis names -> mesh axes, the regex
table over parameter paths), `shardings` (NamedShardings of a state tree, the FSDP sufficiency
check), `data` (host rows -> global arrays), `update` (the pure update step under `jax.jit`).
The runner still uses the pmap path of `rlscale.train.update` (issue 20, later phases).
"""
