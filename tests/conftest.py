"""Shared pytest setup: keep JAX on the CPU and quiet."""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests choose where data and scratch folders go (tmp_path); a user's RLSCALE_HOME must not.
os.environ.pop("RLSCALE_HOME", None)



def _user_compile_cache() -> str:
  """A compile cache of this user's own (XDG cache folder, as rlscale's data cache): a fixed
  folder in the shared /tmp would mix users' compiled programs, or fail on another's permissions."""
  root = os.environ.get("XDG_CACHE_HOME", "")
  if not os.path.isabs(root):
    root = os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "rlscale", "test-jax-cache")


# Identical programs (the same tiny model in several end-to-end runs) compile once per session.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _user_compile_cache())
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
