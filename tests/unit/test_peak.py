"""The device's peak FLOP/s (peak.py): the datasheets' table for every GPU profile tfx_hydra ships, by the names
TensorFlow gives the devices, and a CPU's peak measured once by a matmul and then read from its cache."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.helpers import REPO
from tfx_hydra.peak import dtype_of, gpu_peak, measured_peak


@pytest.mark.parametrize("name, dtype, flops", [
    ("NVIDIA A100-SXM4-40GB", "bf16", 312e12), ("NVIDIA A100 80GB PCIe", "tf32", 156e12),
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4e12), ("NVIDIA H100 PCIe", "bf16", 756e12),
    ("NVIDIA H200", "fp16", 989.4e12), ("NVIDIA GeForce RTX 4090", "fp32", 82.6e12),
    ("NVIDIA GeForce RTX 3090", "fp16", 71e12), ("Tesla V100-SXM2-16GB", "fp16", 125e12),
    ("Tesla T4", "tf32", 8.1e12),
])
def test_a_gpu_s_peak_is_its_datasheet_s_by_the_name_tensorflow_gives_it(name, dtype, flops):
    peak = gpu_peak(name, dtype)
    assert peak.flops_per_second == flops and peak.dtype == dtype and peak.source.startswith("table: NVIDIA")


def test_no_figure_for_a_unit_the_gpu_lacks_or_a_gpu_not_in_the_table():
    assert gpu_peak("Tesla V100-SXM2-16GB", "bf16") is None  # Volta has no bfloat16 units
    assert gpu_peak("Quadro P1000", "fp32") is None  # measured instead, and said so


def test_every_gpu_profile_shipped_has_its_peak_in_every_dtype_it_runs():
    profiles = [yaml.safe_load(path.read_text()) for path in sorted((REPO / "conf" / "hardware").glob("*.yaml"))]
    named = {(profile.get("expect") or {}).get("name_pattern") for profile in profiles} - {None}
    assert named == {"A100", "H100", "H200", "RTX 3090", "RTX 4090", "T4", "V100"}
    for pattern in named:
        runs = ("fp32", "tf32", "fp16") + (("bf16",) if pattern not in ("V100", "T4") else ())
        assert all(gpu_peak(f"NVIDIA {pattern}", dtype) is not None for dtype in runs), pattern


def test_the_compute_dtypes_name_the_tables_columns():
    assert [dtype_of(d) for d in ("float32", "float16", "bfloat16")] == ["tf32", "fp16", "bf16"]
    assert dtype_of("float32", tf32=False) == "fp32"


@pytest.mark.slow  # two small matmuls measured (~5 s)
def test_a_cpu_s_peak_is_measured_once_then_read_from_its_cache(tmp_path):
    cache = str(tmp_path / "peak_flops.json")
    measured = measured_peak("fp32", size=256, cache=cache)
    assert measured.source == "measured: a 256x256 float32 matmul on this CPU" and measured.measured_size == 256
    assert measured.flops_per_second == pytest.approx(2 * 256**3 / measured.measured_seconds)
    assert 1e8 < measured.flops_per_second < 1e14  # a CPU's, whatever its cores
    (key,) = json.loads((tmp_path / "peak_flops.json").read_text())
    assert key.endswith("|fp32|256") and "cores|tf " in key
    assert measured_peak("fp32", size=256, cache=cache) == measured  # read back, not measured again
    assert measured_peak("bf16", size=256, cache=cache).source == "measured: a 256x256 bfloat16 matmul on this CPU"


def test_a_peak_that_cannot_be_measured_costs_the_run_its_mfu_not_its_training(caplog):
    """A GPU the table does not know is measured on the first GPU; on this machine there is none (a real fault: no
    mock), so the measurement fails, and the run's ComputeRate is None with the reason said -- training goes on."""
    from types import SimpleNamespace

    import tensorflow as tf

    from tfx_hydra.trainer.callbacks.compute_rate import for_run

    setup = SimpleNamespace(hardware=SimpleNamespace(gpus=[SimpleNamespace(name="Mystery Accelerator 9000")]),
                            strategy=tf.distribute.get_strategy(), plan=SimpleNamespace(global_size=32), chief=True)
    datasets = SimpleNamespace(train=tf.data.Dataset.from_tensors((tf.zeros((4,)), 0)).batch(1))
    with caplog.at_level("WARNING"):
        assert for_run(datasets, SimpleNamespace(count_flops=True), setup, None) is None
    assert "compute: no TFLOP/s or MFU this run: measuring the Mystery Accelerator 9000's peak failed: no GPU is " \
           "visible to measure the Mystery Accelerator 9000's peak on" in caplog.text
