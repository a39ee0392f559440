"""Shared pytest setup: keep JAX on the CPU and quiet."""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests choose where data and scratch folders go (tmp_path); a user's RLSCALE_HOME must not.
os.environ.pop("RLSCALE_HOME", None)

# Identical programs (the same tiny model in several end-to-end runs) compile once per session.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", "/tmp/rlscale_test_jax_cache")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
