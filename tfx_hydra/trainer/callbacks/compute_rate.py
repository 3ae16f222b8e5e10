"""ComputeRate: how close each epoch runs to the machine -- its achieved TFLOP/s and model FLOPs utilisation (MFU).

The training step's FLOPs are counted once, after the phase's first step (the optimizer and metrics are built by
then), by compiling one step with XLA on a batch of zeros (trainer/flops.py: its `dot` and `convolution` ops; cached
per model). The seconds that costs are taken off the epoch's clock. Each epoch then has

    tflops = training FLOPs per example x examples/s / 1e12
    mfu    = that rate / (the device's peak x the devices trained on)

the peak from the GPU table or this CPU's measured matmul (peak.py), as MaxText and torchtitan compute MFU. A step
XLA cannot compile (a tokenizer inside the model) has no count: the run says why once, and its epochs no MFU.
"""

from __future__ import annotations

import logging
import time

import keras

log = logging.getLogger("tfx_hydra")


class ComputeRate(keras.callbacks.Callback):
    """Counts the step's FLOPs after the first step; `rate(examples_per_sec)` is then (TFLOP/s, MFU), else None."""

    def __init__(self, element_spec, batch: int, peak, devices: int, tracker=None) -> None:
        super().__init__()
        self.element_spec, self.batch, self.tracker = element_spec, batch, tracker
        self.peak, self.devices = peak, devices  # peak.Peak of one device, and how many the run trains on
        self.flops = None  # trainer.flops.StepFlops, once counted
        self.spent = 0.0  # seconds the count took, not yet taken off an epoch's clock

    def on_train_batch_end(self, batch, logs=None):
        if self.flops is None:
            from tfx_hydra.trainer.flops import counted_step_flops

            started = time.perf_counter()
            self.flops = counted_step_flops(self.model, self.element_spec, self.batch)
            self.spent += time.perf_counter() - started
            self.record()

    def again(self) -> "ComputeRate":
        """A fresh counter for the next phase (fine-tuning trains more layers: more gradients to count)."""
        return ComputeRate(self.element_spec, self.batch, self.peak, self.devices, self.tracker)

    def said(self, examples_per_sec: float) -> str | None:
        """The phase's '12.3 GFLOP/s, mfu 3.7% of 336 GFLOP/s fp32 (measured: ...)', for the summary."""
        rate = self.rate(examples_per_sec)
        if rate is None:
            return None
        devices = f"{self.devices} x " if self.devices > 1 else ""
        return f"{said_flops(rate[0] * 1e12)}, mfu {said_share(rate[1])} of {devices}{said_rate(self.peak)}"

    def take_spent(self) -> float:
        """The count's seconds, once: the epoch clock takes them off the epoch they fell in."""
        spent, self.spent = self.spent, 0.0
        return spent

    def rate(self, examples_per_sec: float) -> tuple[float, float] | None:
        """(TFLOP/s, MFU) at this throughput, or None where nothing was counted."""
        per_example = self.flops.training_per_example if self.flops is not None else None
        if not per_example:
            return None
        achieved = per_example * examples_per_sec
        return achieved / 1e12, achieved / (self.peak.flops_per_second * self.devices)

    def record(self) -> None:
        """The count and the peak, as tags (and why there is no count, where there is none)."""
        from tfx_hydra.trainer.flops import COUNTED

        flops, peak = self.flops, self.peak
        tags = {"peak.flops_per_second": f"{peak.flops_per_second:.4g}", "peak.dtype": peak.dtype,
                "peak.source": peak.source, "peak.devices": self.devices,
                **({"peak.measured_seconds": f"{peak.measured_seconds:.4g}", "peak.measured_at": peak.measured_at}
                   if peak.measured_seconds else {})}  # a measured peak: its best matmul's time, and when
        if flops.why_not:
            log.info(f"compute: no FLOP count, so no MFU: {flops.why_not}")
            tags["model.flops.why_not"] = flops.why_not
        else:
            tags |= {"model.flops_per_example.forward": f"{flops.forward_per_example:.6g}",
                     "model.flops_per_example.training": f"{flops.training_per_example:.6g}",
                     "model.flops.counted": COUNTED}
            log.info(f"compute: {flops.training_per_example / 1e6:,.3g} MFLOP per example a training step "
                     f"({flops.forward_per_example / 1e6:,.3g} forward; {COUNTED}); peak {said_rate(peak)}")
        if self.tracker is not None:
            self.tracker.set_tags(tags)


def said_rate(peak) -> str:
    """'336 GFLOP/s fp32 (measured: a 2048x2048 float32 matmul on this CPU)'."""
    return f"{said_flops(peak.flops_per_second)} {peak.dtype} ({peak.source})"


def said_flops(rate: float) -> str:
    """'1.42 TFLOP/s', '60.1 GFLOP/s', '0.0291 GFLOP/s': three figures, in the unit a reader compares."""
    return f"{rate / 1e12:.3g} TFLOP/s" if rate >= 1e12 else f"{rate / 1e9:.3g} GFLOP/s"


def said_share(share: float) -> str:
    """'41%', '3.7%', '0.041%': whole per cents from 10 %, two figures below."""
    return f"{share:.0%}" if share >= 0.1 else f"{share * 100:.2g}%"


def for_run(datasets, trainer, setup, tracker) -> ComputeRate | None:
    """The run's ComputeRate, against the peak of the device it trains on (peak.py: a GPU's from the table, a CPU's
    measured once per machine) times the devices of every worker; None with trainer.count_flops=false, or when the
    peak cannot be had (its measurement failed: said, and the run goes on)."""
    if not trainer.count_flops:
        return None
    from tfx_hydra.peak import run_peak
    from tfx_hydra.strategy import cluster_workers

    compute_dtype = keras.mixed_precision.dtype_policy().compute_dtype
    try:
        peak, devices = run_peak([gpu.name for gpu in setup.hardware.gpus], compute_dtype)
    except RuntimeError as err:  # no peak to divide by: the run trains on, without MFU
        log.warning(f"compute: no TFLOP/s or MFU this run: {err}")
        return None
    workers = len((cluster_workers(setup.strategy) or "one").split(", "))
    return ComputeRate(datasets.train.element_spec, setup.plan.global_size, peak, devices * workers,
                       tracker if setup.chief else None)
