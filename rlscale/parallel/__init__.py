"""One device layer: a `jax.sharding.Mesh` from the config, logical axis rules, shardings of the
train state, host batches as global arrays, and the update step and forward passes jitted over
the mesh.

Modules: `mesh` (the mesh from `config.mesh`), `rules` (logical axis names -> mesh axes, the regex
table over parameter paths), `shardings` (NamedShardings of a state tree, the FSDP sufficiency
check), `data` (host rows -> global arrays), `update` (the pure update step under `jax.jit`),
`forward` (the reference / behaviour log-prob and value passes under `jax.jit`). The runner uses
them, with `rlscale.sampler.mesh_sampler`, when config.mesh asks for fsdp or tensor parallelism
(`rlscale.runner.layout`); data-only meshes keep the pmap path of `rlscale.train.update`.
"""
