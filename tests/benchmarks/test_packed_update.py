"""benchmarks/packed_update.py --quick: W3's batch by hand, and one update padded and packed with
the same loss."""

import os

import numpy as np

from tests.benchmarks import load_script

packed_update = load_script("packed_update")


def test_w3_batch_by_hand():
  assert len(packed_update.W3_LENGTHS) == 64 and sum(packed_update.W3_LENGTHS) == 10_240
  host = packed_update.w3_batch(packed_update.W3_LENGTHS, vocab=512)
  assert host["tokens"].shape == (64, 32 + 1024)  # 67,584 padded tokens
  assert int(host["input_mask"].sum()) == 64 * 32 + 10_240
  np.testing.assert_array_equal(np.sort(host["response_mask"].sum(1)),
                                np.sort(packed_update.W3_LENGTHS))


def test_quick_run_writes_the_same_loss_packed_and_padded(tmp_path):
  report = packed_update.main(["--out", str(tmp_path), "--quick", "--repeats", "1"])
  assert os.path.exists(tmp_path / "packed_update.json")
  assert report["real_tokens"] == 64 * 32 + sum(n // 16 for n in packed_update.W3_LENGTHS)
  assert report["loss_diff"] < 1e-5 and report["grad_norm_diff"] < 1e-4
  packed = report["results"]["packed_96"]
  assert packed["packed_rows"] * 96 >= report["real_tokens"]
  assert report["packed_over_padded"] > 0
