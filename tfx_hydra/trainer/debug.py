"""debug: what the debug= presets (conf/debug/) switch on, and what they report.

    fast      the whole pipeline end to end in seconds: data.limit_batches, one epoch, nothing kept
    overfit   a few batches, many epochs: judge_overfit says whether the training loss neared zero
    limit     a share of each split (data.limit_batches=0.1)
    profile   TensorBoard's profiler on a few batches: say_profile says where the trace is
    numerics  tf.debugging.enable_check_numerics: non_finite_op names the first op that made NaN/inf,
              say_numerics_clean says when every op stayed finite
    eager     run_eagerly=true for pdb (trainer.compile_model warns that it is slow)

The switches themselves are trainer.* and data.* keys, so any run can use them without a preset.
"""

from __future__ import annotations

import glob
import logging
import os
import re

from tfx_hydra.console import counted
from tfx_hydra.errors import TrainingError

log = logging.getLogger(__name__)


OVERFIT_SHARE = 0.05  # the last epoch's training loss under this share of the first's: the model fits the batches


def judge_overfit(history, num_examples: int | None, tracker) -> bool:
    """debug=overfit: a model that cannot drive its training loss near zero on a few batches has
    a bug (labels, loss, learning rate, a frozen or disconnected layer) before it has a capacity
    problem. Said, and tagged `debug.overfit` (passed / failed)."""
    losses = history.history.get("loss", [])
    if len(losses) < 2:
        log.warning("overfit check: fewer than two epochs, nothing to compare (trainer.epochs=100).")
        return False
    first, last = float(losses[0]), float(losses[-1])
    passed = last < OVERFIT_SHARE * first
    said = (f"overfit check: training loss {first:.4f} -> {last:.4f} in {len(losses)} epochs on "
            f"{counted(num_examples)} examples: ")
    if passed:
        log.info(said + "the model can fit them (the loss, labels and gradients are wired up).")
    else:
        log.warning(said + f"it did not fall under {OVERFIT_SHARE:.0%} of where it started. Check the labels "
                    "against the inputs, the loss, the learning rate (optimizer.learning_rate=0.01), and that "
                    "the layers are trainable; dropout and augmentation also keep it up.")
    tracker.set_tags({"debug.overfit": "passed" if passed else "failed", "debug.overfit.final_loss": last})
    return passed


def say_profile(trainer, tensorboard_dir: str) -> None:
    """Where trainer.tensorboard_profile_batches left the trace, and how to open it."""
    if not trainer.tensorboard_profile_batches:
        return
    traces = sorted(glob.glob(os.path.join(tensorboard_dir, "**", "*.xplane.pb"), recursive=True))
    if not traces:
        log.warning(f"profile: no trace was written for batches {list(trainer.tensorboard_profile_batches)} "
                    "(an epoch shorter than the last profiled batch?).")
        return
    log.info(f"profile: batches {list(trainer.tensorboard_profile_batches)} traced in {os.path.dirname(traces[-1])}. "
             f"Open it: pip install tensorboard-plugin-profile, then tensorboard --logdir {tensorboard_dir} "
             "(the Profile tab: step time, the input pipeline's share, each op).")


NUMERICS_MARK = "Detected Infinity or NaN"  # how tf.debugging.enable_check_numerics' errors begin


def say_numerics_clean(epochs: int, examples: int | None, tracker) -> None:
    """debug=numerics on a healthy model: silence would leave the user wondering whether it checked."""
    log.info(f"numerics: checked every op of the training and validation steps, {epochs} epoch"
             f"{'s' if epochs != 1 else ''} over {counted(examples)} training examples: no NaN or infinity.")
    tracker.set_tags({"debug.numerics": "clean"})


def _keras_layer_frame(frames: list[tuple[str, str, str]]) -> tuple[str, str, str] | None:
    """The innermost frame in a Keras layer's module (keras/src/layers/...), its path from `keras/`."""
    for path, line, function in reversed(frames):
        if "keras/src/layers/" in path:
            return "keras/src/layers/" + path.split("keras/src/layers/", 1)[1], line, function
    return None


def non_finite_op(message: str) -> TrainingError:
    """check_numerics' report (a screenful with the op's stack) as one error: the op, its layer
    (from the checked node's name) and the line of user code that made it."""
    found = re.search(r'Detected Infinity or NaN in output (\d+) of (?:graph|eagerly-executing) op "([^"]+)"', message)
    node = re.search(r"\{\{node ([^}]+)\}\}", message)
    frames = re.findall(r"\+ (\S+) \(L(\d+)\) (\w+)", message)
    mine = [f for f in frames if "site-packages" not in f[0] and not f[0].startswith("...")]
    op = found.group(2) if found else "an op"
    parts = node.group(1).split("/") if node else []
    layer = parts[1] if len(parts) >= 3 else (parts[0] if parts else op)  # <model>/<layer>/.../<op>/CheckNumerics
    # the user's line that made the op; a functional model's ops are made in Keras' own layers, whose
    # call is then the place (TensorFlow shortens its paths: '...packages/keras/src/layers/core/dense.py')
    where = mine[-1] if mine else _keras_layer_frame(frames)
    made = f", made at {where[0]}:{where[1]} ({where[2]})" if where else ""
    return TrainingError(f"trainer.check_numerics: op '{op}' in layer '{layer}' produced the first NaN or infinity "
                         f"(output {found.group(1) if found else 0}){made}.",
                         fix=f"look at what feeds '{layer}' (its inputs, its weights, a log/div/exp of a value near "
                         "0 or large); a smaller optimizer.learning_rate or precision=fp32 if it overflows")
