"""The benchmark's table (jax_fp8gemm/bench/report.py): the ratio is ours over the best peer, and
our own other measurements ("ours unfused", "ours, quantize kernel only") are not peers."""

from jax_fp8gemm.bench import report


def _row(results):
    return {"suite": "quantize", "case": "c", "metric": "GB/s", "ours": "ours", "results": results}


def _table_line(row):
    return next(line for line in report.table([row], "GPU").splitlines() if line.startswith("| c |"))


def test_best_peer_skips_our_own_measurements():
    row = _row({"ours": 10.0, "ours, quantize kernel only": 12.0, "ours unfused (XLA gelu)": 13.0,
                "torch copy_": 11.0, "XLA copy (elementwise)": 9.0, "broken peer": "n/a: Error"})
    assert report._best_peer(row) == ("torch copy_", 11.0)
    line = _table_line(row)
    assert line.startswith("| c | 10.0 | 12.0 | 13.0 | 11.0 | 9.0 | n/a |")
    assert line.endswith("| 0.91x (torch copy_) |")


def test_no_peer_no_ratio():
    row = _row({"ours": 10.0, "ours, quantize kernel only": 12.0})
    assert report._best_peer(row) == (None, None)
    assert _table_line(row) == "| c | 10.0 | 12.0 | - |"
