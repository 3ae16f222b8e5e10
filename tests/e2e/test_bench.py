"""Benchmarks run in their quick modes: they work and print their ratios (no speed is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, cli_env

pytestmark = pytest.mark.slow


def test_gpu_precision_benchmark_runs_tiny_on_cpu(tmp_path):
    out = tmp_path / "precision.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_precision.py"), "--tiny", "--json", str(out)],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ratio to fp32 without XLA:" in done.stdout
    report = json.loads(out.read_text())
    combos = {(r["policy"], r["xla"]) for r in report["results"]}
    assert combos == {(p, x) for p in ("float32", "mixed_float16", "mixed_bfloat16") for x in ("off", "on")}
    assert all(r["examples_per_sec"] > 0 for r in report["results"])
    baseline = next(r for r in report["results"] if (r["policy"], r["xla"]) == ("float32", "off"))
    assert baseline["ratio"] == 1.0
