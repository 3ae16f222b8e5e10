"""threads: how many threads TensorFlow's ops get on the CPU (hardware.intra_op_threads, inter_op_threads).

TensorFlow fixes its thread pools at its first op, before a model exists, so `intra_op_threads=auto` (the cpu
profile's) decides from what the config says before any op: what the model function declares, else the size of one
example's input. Splitting an op over the cores pays only when the op carries enough work: an MLP on 28x28 digits
(0.4 MFLOP per example) loses 30-40 % with every core, an MLP on 32x32x3 images (1.6 MFLOP) gains 17 %, and a conv
net gains 30-60 % even on 28x28 inputs (measured on 2 cores: bench/README.md, mfu.py). The step's FLOP count
(trainer/flops.py) would say it best, but it is known only after the threads are fixed, and a count cached from an
earlier run would make a run and its `reproduce` differ in threads (and so in the order of their float sums).
"""

from __future__ import annotations

import logging

from tfx_hydra.errors import ConfigError

log = logging.getLogger(__name__)

SMALL_INPUTS = 2048  # values an example's input holds below which intra_op_threads=auto takes one thread per op
DECLARED = "intra_op_threads"  # the model function's (or class's) attribute auto follows: 0 = every core per op


def op_threads(setting, input_values: int | None, declared: int | None = None) -> tuple[int | None, str]:
    """The intra-op thread count hardware.intra_op_threads=`setting` means, and why: a number is the user's;
    auto follows the model function's declared count (ours: the conv nets say 0, every core), else one thread per
    op for inputs under SMALL_INPUTS values (or of unknown size, as text), every core from there on."""
    if setting != "auto":
        return setting, "set by hardware.intra_op_threads" if setting is not None else ""
    if declared is not None:
        return declared, "the model function declares it (intra_op_threads)"
    if input_values and input_values >= SMALL_INPUTS:
        return 0, f"inputs of {input_values:,} values ({SMALL_INPUTS:,} or more)"
    size = f"{input_values:,} values (under {SMALL_INPUTS:,})" if input_values else "unknown size"
    return 1, f"inputs of {size}: one thread per op"


def declared_threads(model_target: str | None) -> int | None:
    """What the model function (or class) model._target_ names declares for its ops' threads.

    A builder of yours may say it beside its definition, as ours do for the conv nets:

        def my_conv_net(name, input_shape, num_classes): ...
        my_conv_net.intra_op_threads = 0   # every core per op; or a number of threads

    The cpu profile's `hardware.intra_op_threads=auto` follows it before its own rule by the inputs' size (one thread
    per op under 2,048 values: right for an MLP on 28x28 digits, wrong for a conv net on them); a number set as
    `hardware.intra_op_threads` still wins. It is an attribute of the function because TensorFlow fixes its threads
    at its first op, before the model exists. None: it declares nothing, or cannot be imported (the model step says
    why then, in the words of the config); anything but a whole number >= 0 is a ConfigError."""
    if not model_target:
        return None
    from hydra.utils import get_object

    try:
        builder = get_object(model_target)
    except Exception:  # noqa: BLE001 -- any failure to import it is the model step's to report
        return None
    declared = getattr(builder, DECLARED, None)
    if declared is not None and (not isinstance(declared, int) or isinstance(declared, bool) or declared < 0):
        raise ConfigError(f"model._target_={model_target} declares {DECLARED}={declared!r}: expected a whole number "
                          "of threads for each op, 0 for every core.",
                          fix=f"{model_target.rsplit('.', 1)[-1]}.{DECLARED} = 0 beside the function, or remove it")
    return declared


def described_threads(count: int | None, why: str) -> str:
    """The intra-op threads a run's ops got, as its tag says them: `0 (every core): inputs of 3,072 values ...`."""
    said = {None: "TensorFlow's default", 0: "0 (every core)"}.get(count, str(count))
    return f"{said}: {why}" if why else said


def set_threads(tf, intra_op_threads, inter_op_threads: int | None, input_values: int | None,
                model_target: str | None) -> tuple[int | None, str]:
    """Set the profile's thread counts (auto: resolved by op_threads) and return the intra-op count in effect and
    why. Thread counts only change speed, so a TensorFlow already started is a warning, not an error, and the
    count returned is the one it kept."""
    declared = declared_threads(model_target) if intra_op_threads == "auto" else None  # a number set wins unread
    wanted, why = op_threads(intra_op_threads, input_values, declared)
    threading = tf.config.threading
    for key, count, get, set_ in (
        ("intra_op_threads", wanted, threading.get_intra_op_parallelism_threads,
         threading.set_intra_op_parallelism_threads),
        ("inter_op_threads", inter_op_threads, threading.get_inter_op_parallelism_threads,
         threading.set_inter_op_parallelism_threads),
    ):
        if count is None or get() == count:  # 0 is a count too: every core, where an earlier job set fewer
            continue
        try:
            set_(count)
        except RuntimeError:
            log.warning(f"hardware.{key}={count}{' (every core)' if count == 0 else ''} not applied: TensorFlow "
                        f"was already initialised in this process (it keeps {get() or 'its default'}). Only speed "
                        "is affected.")
            if key == "intra_op_threads":
                wanted, why = get() or None, f"{why}; not applied: TensorFlow had already started"
    return wanted, why
