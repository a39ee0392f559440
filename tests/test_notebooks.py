"""The notebooks in colab/ run top to bottom in a fresh kernel (nbclient), from the repository root,
in smoke settings: a cell inserted after each notebook's cell tagged "parameters" shrinks what it
trains (tiny model, few steps), as a user would edit that cell."""

import glob
import json
import os
import re

import nbclient
import nbformat
import pytest

from tests.timeouts import hang_timeout

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
COLAB = os.path.join(ROOT, "colab")
CELL_TIMEOUT_S = int(hang_timeout(300))

# The runner tests' tiny model and budget (tests/runner/runner_configs.py), as flat overrides.
TINY_RUN = {
    "model.hidden_size": 32, "model.intermediate_size": 64, "model.num_layers": 1,
    "model.num_heads": 2, "model.num_kv_heads": 1, "model.head_dim": 16, "sft.steps": 5,
    "sft.batch_size": 8, "rl.prompts_per_step": 2, "rl.group_size": 2,
    "rollout.max_new_tokens": 4, "task.eval_size": 4, "eval.pass_k": 2, "train.total_steps": 2,
    "train.eval_every": 2, "train.checkpoint_every": 2,
}
SHRINK_CONFIG = ("from rlscale.scaling.hyper import apply_overrides\n"
                 f"config = apply_overrides(config, {TINY_RUN!r})")


def parameters_index(nb) -> int:
  """Index of the cell tagged "parameters"; fails the test when there is not exactly one."""
  tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
  assert len(tagged) == 1, f"{len(tagged)} cells tagged 'parameters'"
  return tagged[0]


def execute(name, parameters, tmp_path, monkeypatch):
  """Runs colab/<name> with `parameters` (code) inserted after its parameters cell, cwd = the
  repository root and temporary folders under tmp_path; returns the executed notebook."""
  nb = nbformat.read(os.path.join(COLAB, name), as_version=4)
  nb.cells.insert(parameters_index(nb) + 1, nbformat.v4.new_code_cell(parameters))
  monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel inherits it: tempfile.mkdtemp lands here
  client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                   resources={"metadata": {"path": ROOT}})
  client.execute()
  return nb


# A float printed unrounded (0.030215992647058824): seven or more decimals.
UNROUNDED = re.compile(r"\d\.\d{7,}")


def stdout(nb) -> str:
  return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                 for o in c.get("outputs", []) if o.get("name") == "stdout")


def images(nb) -> int:
  return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
             for o in c.get("outputs", []))


def test_committed_notebooks_have_no_outputs():
  for path in sorted(glob.glob(os.path.join(COLAB, "*.ipynb"))):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
      if cell.cell_type == "code":
        assert not cell.outputs and cell.execution_count is None, os.path.basename(path)


def test_quickstart(tmp_path, monkeypatch):
  nb = execute("quickstart.ipynb", SHRINK_CONFIG, tmp_path, monkeypatch)
  out = stdout(nb)
  assert '"steps": 2' in out and "max |rollout.logp - forward logp|" in out
  assert images(nb) == 2  # curves vs samples and vs wall time
  assert not UNROUNDED.findall(out)


def test_custom_loss(tmp_path, monkeypatch):
  nb = execute("custom_loss.ipynb", SHRINK_CONFIG, tmp_path, monkeypatch)
  (workdir,) = glob.glob(str(tmp_path / "rlscale_cispo_*"))
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f)["config"]["rl"]["policy_loss"] == "cispo"
  steps = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  steps = [r for r in steps if r.get("step", 0) > 0 and "train/loss" in r]
  assert len(steps) == 2 and all(0.0 <= r["train/is_weight_clipped"] <= 1.0 for r in steps)
  out = stdout(nb)
  assert images(nb) == 1 and "CISPO loss" in out
  assert re.search(r"non-zero policy loss in \d of 2 steps", out)
  assert not UNROUNDED.findall(out)


def test_batch_size_scaling_smoke_sweep_then_committed(tmp_path, monkeypatch):
  # One seed of the smoke sweep (4 runs), then the notebook again loading that study as if it
  # were the committed one.
  (tmp_path / "smoke").mkdir()
  nb = execute("batch_size_scaling.ipynb", 'SOURCE = "smoke"\nSEEDS = (0,)', tmp_path / "smoke",
               monkeypatch)
  out = stdout(nb)
  assert "study: smoke sweep" in out and "predicted time ratio" in out
  assert images(nb) == 5
  assert not UNROUNDED.findall(out)
  (study,) = glob.glob(str(tmp_path / "smoke" / "rlscale_batch_lr_*"))
  with open(os.path.join(study, "report.json")) as f:
    report = json.load(f)
  assert len(report["runs"]) == 4 and {r["seed"] for r in report["runs"]} == {0}
  with open(os.path.join(study, "sweep.json")) as f:
    record = json.load(f)  # written by rlscale.scaling.sweep.run_sweep, as for the CLI
  assert record["arg"] == "smoke" and record["cli_overrides"] == {} and record["shard"] is None
  (tmp_path / "committed").mkdir()
  nb = execute("batch_size_scaling.ipynb", f'SOURCE = "committed"\nCOMMITTED_DIR = {study!r}',
               tmp_path / "committed", monkeypatch)
  out = stdout(nb)
  assert f"study: committed ({study})" in out and "predicted time ratio" in out
  assert images(nb) == 5
  assert not glob.glob(str(tmp_path / "committed" / "rlscale_batch_lr_*"))  # nothing was run


def test_batch_size_scaling_committed_missing(tmp_path, monkeypatch):
  with pytest.raises(nbclient.exceptions.CellExecutionError, match="no committed study"):
    execute("batch_size_scaling.ipynb", f'SOURCE = "committed"\nCOMMITTED_DIR = "{tmp_path}/none"',
            tmp_path, monkeypatch)
