"""The peak FLOP/s of the device a run trains on, in the run's compute dtype: what model FLOPs utilisation (MFU)
divides by. Part of the hardware step's knowledge of the machine (hardware.py says which device; this, how fast it
can go at most).

GPUs: a table by device name and dtype, dense (no 2:4 sparsity), from the vendors' datasheets, for the profiles
tfx_hydra ships (conf/hardware/). CPUs, and any GPU not in the table: the rate a large matmul reaches on this
machine in the dtype, measured once (in a process of its own, at TensorFlow's default threads) and cached per machine
(CPU model, cores, TensorFlow version, dtype) beside the record counts ($XDG_CACHE_HOME/tfx_hydra/peak_flops.json),
with the measurement's size and time kept. A machine busy with other work while it is measured keeps a low figure:
delete the file to measure again. MaxText and torchtitan compute MFU the same way for their accelerators.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass

from tfx_hydra.environment import cpu_model
from tfx_hydra.user_cache import cache_file, read_json, remember

CACHE_FILE = "peak_flops.json"
MEASURE_SIZE = 2048  # the measured matmul's side: large enough to run a CPU's matmul kernel at its best
MEASURE_REPEATS = 5  # the best of these is the peak

# Dense peak FLOP/s by dtype: tf32 is what Ampere and later run float32 matmuls at when TensorFloat-32 is on
# (TensorFlow's default); fp16/bf16 with float32 accumulation, as Keras' mixed precision does.
GPU_PEAKS = {
    # NVIDIA H100 Tensor Core GPU datasheet (2023): SXM5 / PCIe, dense (the datasheet's figures halved for sparsity)
    "H100 PCIe": {"fp32": 51.2e12, "tf32": 378e12, "fp16": 756e12, "bf16": 756e12},
    "H100": {"fp32": 66.9e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12},
    # NVIDIA H200 Tensor Core GPU datasheet (2024): SXM, dense; the same compute as the H100 SXM
    "H200": {"fp32": 66.9e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12},
    # NVIDIA A100 Tensor Core GPU datasheet (2021): 40 GB and 80 GB, SXM4 and PCIe, dense
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12},
    # NVIDIA Ada Lovelace GPU architecture whitepaper v1.01, table 2: RTX 4090, fp16/bf16 with fp32 accumulate
    "RTX 4090": {"fp32": 82.6e12, "tf32": 82.6e12, "fp16": 165.2e12, "bf16": 165.2e12},
    # NVIDIA Ampere GA102 GPU architecture whitepaper v2.1, table 9: RTX 3090, fp16/bf16 with fp32 accumulate
    "RTX 3090": {"fp32": 35.6e12, "tf32": 35.6e12, "fp16": 71e12, "bf16": 71e12},
    # NVIDIA V100 datasheet (SXM2): no tf32 or bf16 units; float32 matmuls run at the fp32 rate
    "V100": {"fp32": 15.7e12, "tf32": 15.7e12, "fp16": 125e12},
    # NVIDIA T4 datasheet: no tf32 or bf16 units
    "T4": {"fp32": 8.1e12, "tf32": 8.1e12, "fp16": 65e12},
}
SOURCES = {"H100 PCIe": "NVIDIA H100 datasheet (PCIe, dense)", "H100": "NVIDIA H100 datasheet (SXM5, dense)",
           "H200": "NVIDIA H200 datasheet (SXM, dense)", "A100": "NVIDIA A100 datasheet (dense)",
           "RTX 4090": "NVIDIA Ada Lovelace whitepaper (RTX 4090, dense, fp32 accumulate)",
           "RTX 3090": "NVIDIA GA102 whitepaper (RTX 3090, dense, fp32 accumulate)",
           "V100": "NVIDIA V100 datasheet (SXM2)", "T4": "NVIDIA T4 datasheet"}


@dataclass(frozen=True)
class Peak:
    """A device's peak FLOP/s in a dtype, and where the figure comes from."""
    flops_per_second: float
    dtype: str
    source: str  # "table: <datasheet>" or "measured: <what>"
    measured_size: int | None = None  # a measured peak: the matmul's side,
    measured_seconds: float | None = None  # the best repeat's seconds,
    measured_at: str | None = None  # and when


def dtype_of(compute_dtype: str, tf32: bool = True) -> str:
    """The table's dtype for a Keras compute dtype ('float32', 'float16', 'bfloat16'): float32 runs as tf32 where
    TensorFloat-32 is on."""
    return {"float16": "fp16", "bfloat16": "bf16"}.get(compute_dtype, "tf32" if tf32 else "fp32")


def gpu_peak(device_name: str, dtype: str) -> Peak | None:
    """The table's peak for a GPU whose name holds one of its keys (the most specific first: 'H100 PCIe' before
    'H100'), or None: not in the table, or no such unit (bf16 on a V100)."""
    for key, peaks in GPU_PEAKS.items():
        if re.search(re.escape(key).replace(r"\ ", r"[ _-]?"), device_name, re.IGNORECASE) and dtype in peaks:
            return Peak(peaks[dtype], dtype, f"table: {SOURCES[key]}")
    return None


def measured_peak(dtype: str, size: int = MEASURE_SIZE, cache: str | None = None, gpu: str | None = None) -> Peak:
    """This machine's CPU peak in `dtype` ('fp32' or 'tf32': float32; 'bf16', 'fp16'), measured by a `size` x
    `size` matmul once per machine and dtype, then read from the cache; `gpu` (a GPU the table does not know, by
    name): its peak, measured the same way on the first GPU. RuntimeError when the measurement fails."""
    path = cache or cache_file(CACHE_FILE)
    key = machine_key(dtype, size) + (f"|{gpu}" if gpu else "")
    known = read_json(path)
    if key in known:
        return Peak(**known[key])
    measured = measured_apart(dtype, size, gpu)
    remember(path, {key: asdict(measured)})
    return measured


def measured_apart(dtype: str, size: int, gpu: str | None) -> Peak:
    """`measure_matmul` in a fresh process: the device's peak, not the run's -- a run has set TensorFlow's threads
    already (one for a small model under the cpu profile), which would halve a 2-core CPU's figure, and it may share
    the machine with its own input pipeline."""
    import json
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-m", "tfx_hydra.peak", dtype, str(size), *([gpu] if gpu else [])],
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"measuring the {gpu or 'CPU'}'s peak took over 600 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"measuring the {gpu or 'CPU'}'s peak failed: {last[:300]}")
    return Peak(**json.loads(done.stdout.strip().splitlines()[-1]))


def measure_matmul(dtype: str, size: int, on: str | None = None) -> Peak:
    """The best of a few `size` x `size` matmuls (2 x size^3 FLOPs each), the result read back each time: on the
    CPU, or (`on`: a GPU's name) on the first GPU."""
    import tensorflow as tf

    if on and not tf.config.list_physical_devices("GPU"):  # tf.device would run it on the CPU, and say nothing
        raise SystemExit(f"no GPU is visible to measure the {on}'s peak on")
    tf_dtype = {"bf16": tf.bfloat16, "fp16": tf.float16}.get(dtype, tf.float32)
    with tf.device("/GPU:0" if on else "/CPU:0"):
        a = tf.random.uniform((size, size), dtype=tf.float32, seed=1)
        a, b = tf.cast(a, tf_dtype), tf.cast(tf.transpose(a), tf_dtype)
        matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32)))
        matmul(a, b).numpy()  # traced, and the kernel warmed
        best = float("inf")
        for _ in range(MEASURE_REPEATS):
            started = time.perf_counter()
            matmul(a, b).numpy()
            best = min(best, time.perf_counter() - started)
    where = f"the {on} (not in the GPU peaks table)" if on else "this CPU"
    return Peak(2.0 * size**3 / best, dtype, f"measured: a {size}x{size} {tf_dtype.name} matmul on {where}",
                measured_size=size, measured_seconds=best, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"))


def machine_key(dtype: str, size: int) -> str:
    """What a measurement holds for: the CPU's model, its cores this process may use, TensorFlow's version."""
    import tensorflow as tf

    return f"{cpu_model()}|{len(os.sched_getaffinity(0))} cores|tf {tf.__version__}|{dtype}|{size}"


def run_peak(gpu_names: list[str], compute_dtype: str, tf32: bool = True) -> tuple[Peak, int]:
    """The peak of one device the run trains on, and how many it trains on: the first GPU's from the table (else
    measured on it, and said so in the source), or this machine's CPU, measured."""
    dtype = dtype_of(compute_dtype, tf32)
    if gpu_names:
        return gpu_peak(gpu_names[0], dtype) or measured_peak(dtype, gpu=gpu_names[0]), len(gpu_names)
    return measured_peak("fp32" if dtype == "tf32" else dtype), 1


if __name__ == "__main__":  # measured_apart's process: python -m tfx_hydra.peak DTYPE SIZE [GPU NAME]
    import json
    import sys

    print(json.dumps(asdict(measure_matmul(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))))
