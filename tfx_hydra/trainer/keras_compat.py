"""keras_compat: a saving in Keras' first trace of a model's train step (the fixes for more than one replica
are the strategy step's: strategy/keras_fix.py).

`build_before_first_trace` builds a model's optimizer and metric state before `fit` traces its train step,
as Keras itself does under a distribution strategy; under the default strategy (one CPU or GPU) Keras
leaves it to the first trace, whose new variables make tf.function trace the whole step a second time
(tensorflow/tensorflow#48851).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def build_before_first_trace(model, dataset) -> bool:
    """Build the model's optimizer, compiled metrics and loss from `dataset`'s element spec
    before `fit` traces its train step: True if built here.

    Why: under the default strategy, Keras 3 defers this build to the train step's first trace
    (`TensorFlowTrainer._maybe_symbolic_build` returns early when the model has no strategy of its
    own); the variables that trace creates make tf.function trace the step again, which costs
    every new model ~0.2 s on a 2-core CPU (bench/hpo.py part 5), a search's every trial. The
    build is Keras' own (`_symbolic_build`, what `fit` runs under a strategy): the same
    variables, so training is bit for bit the same. Under a strategy Keras builds in the
    strategy's scope itself, so nothing is done here. Where the symbolic build cannot take the
    model or its data, nothing is lost: the first trace builds as before, and raises what a user's
    mistake deserves (a wrong input shape) from inside fit, as it always did.
    """
    import tensorflow as tf

    build = getattr(model, "_symbolic_build", None)
    if build is None or getattr(model, "_distribute_strategy", True) is not None:
        return False
    spec = getattr(dataset, "element_spec", None)
    if spec is None or not all(isinstance(s, tf.TensorSpec) for s in tf.nest.flatten(spec)):
        return False  # ragged or sparse inputs: Keras' symbolic tensors are dense
    try:
        build(data_batch=spec)
    except Exception as err:  # noqa: BLE001 -- Keras' own path (the first trace) still builds it, and says what fails
        log.debug(f"the model's state is built by its first trace instead: {err}")
        return False
    return True
