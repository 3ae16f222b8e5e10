"""The floating-point operations of a model's step, counted from what XLA compiles.

Keras has no FLOP count, and an analytic one per layer type misses a user's own layers. XLA does not: the step
compiled with `jit_compile=True` and read back as optimized HLO (`experimental_get_compiler_ir`, nothing run) holds
every matrix product and convolution the step does, whatever layers made them. Counted, as MaxText and torchtitan
count for MFU: `dot` (dense layers, attention's products, embeddings' gradients) as 2 x the output's elements x the
contracted size, and `convolution` (forward and both gradients) as 2 x the output's elements x the kernel's elements
per output feature. Element-wise ops, reductions, bias adds and activations are not counted: they are a few per cent
of a dense or convolutional step and run far from the device's peak, which is what MFU compares with.

The training step is `model.train_step` on one batch (forward, backward, the optimizer's update); the forward one
`model(x, training=False)`. XLA cannot compile string ops: a functional model that takes raw text (a
TextVectorization inside it: model=text_baseline, a user's Transformer) is counted from its first numeric tensors
on (the token ids), the string preprocessing doing no matmul; any other model XLA cannot compile has no count, and
the reason is returned instead.

A run counts once (`counted_step_flops`), on a batch of zeros of its pipeline's element spec (the data is not read:
the counts depend on shapes alone), and keeps the count per model, batch and TensorFlow version in the user's cache
beside the record counts: compiling a step costs 0.5-1 s for a small model on 2 cores, seconds for a large one, and
the same model trained again (a sweep's jobs, a resumed run) does not pay it twice.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass

from tfx_hydra.user_cache import cache_file, read_json, remember

CACHE_FILE = "step_flops.json"
COUNTED = "XLA's optimized HLO: dot and convolution ops"  # what the count holds (the run's tag says it)

# `%MatMul.4 = f32[4,10]{1,0} dot(%fusion, %copy.12), lhs_contracting_dims={1}, ...`: a named instruction, its shape
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*[a-z]+\d*\[(?P<dims>[\d,]*)\]\S*\s+"
                         r"(?P<op>[\w\-]+)\((?P<args>[^)]*)\)(?P<attrs>.*)$")


@dataclass(frozen=True)
class StepFlops:
    """A step's counted FLOPs on one batch of `batch` examples."""
    forward: float | None
    training: float | None
    batch: int
    why_not: str | None = None  # set when XLA could not compile the step

    @property
    def forward_per_example(self) -> float | None:
        return None if self.forward is None else self.forward / self.batch

    @property
    def training_per_example(self) -> float | None:
        return None if self.training is None else self.training / self.batch


def hlo_flops(hlo: str) -> float:
    """The FLOPs of the `dot` and `convolution` instructions of an HLO module's text (every computation: fused
    ones included, each called once in a step's module). Operands are named, not shaped, in the text: their
    shapes are read from the instructions that define them."""
    instructions = [found for found in map(INSTRUCTION.match, hlo.splitlines()) if found]
    shapes = {found["name"]: dims_of(found["dims"]) for found in instructions}
    total = 0.0
    for found in instructions:
        if found["op"] in ("dot", "convolution"):
            operands = [shapes.get(name, []) for name in re.findall(r"%([\w.\-]+)", found["args"])]
            total += instruction_flops(found["op"], dims_of(found["dims"]), operands, found["attrs"])
    return total


def instruction_flops(op: str, output: list[int], operands: list[list[int]], attrs: str) -> float:
    """A dot: 2 x the output's elements x the contracted dimensions' size. A convolution (forward or either
    gradient): 2 x the output's elements x the kernel's elements per output feature."""
    if op == "dot":
        contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", attrs)
        dims = [int(d) for d in contracting.group(1).split(",") if d] if contracting else []
        return 2.0 * math.prod(output) * math.prod(operands[0][d] for d in dims)
    kernel = operands[1]
    labels = re.search(r"dim_labels=\w+_(\w+)->\w+", attrs)
    features = kernel[labels.group(1).index("o")] if labels else 1
    return 2.0 * math.prod(output) * math.prod(kernel) / features


def dims_of(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d]


def step_flops(model, x, y) -> StepFlops:
    """The forward and training FLOPs of `model` on the batch (`x`, `y`), from the optimized HLO of each step
    compiled by XLA (not run: no weight or optimizer state changes). The optimizer and metrics must be built, as
    they are once the run's first trace is done."""
    import tensorflow as tf

    batch = int(tf.nest.flatten(x)[0].shape[0])
    numeric = past_the_strings(model, batch) if any(t.dtype == tf.string for t in tf.nest.flatten(x)) else None
    if numeric is not None:  # raw text in: counted from the token ids on
        model, x = numeric
    try:
        forward = tf.function(lambda inputs: model(inputs, training=False), jit_compile=True)
        forward_hlo = forward.experimental_get_compiler_ir(x)(stage="optimized_hlo")
        training = tf.function(lambda inputs, targets: model.train_step((inputs, targets)), jit_compile=True)
        training_hlo = training.experimental_get_compiler_ir(x, y)(stage="optimized_hlo")
    except Exception as err:  # noqa: BLE001 - XLA refuses the step (string ops, an op without a kernel): no count
        return StepFlops(None, None, batch, why_not=f"XLA cannot compile the step ({type(err).__name__}: "
                                                    f"{str(err).strip().splitlines()[0][:200] if str(err) else ''})")
    return StepFlops(hlo_flops(forward_hlo), hlo_flops(training_hlo), batch)


def past_the_strings(model, batch: int):
    """(the part of functional `model` after its string preprocessing, a batch of zeros of its inputs): a model
    from the first numeric tensors that string tensors feed (a TextVectorization's token ids) to the outputs,
    compiled with the model's loss (its optimizer's updates are element-wise: not counted); None where the model
    is not functional, or its strings reach further than one step."""
    import keras
    import tensorflow as tf

    frontier = []
    for operation in getattr(model, "operations", []):
        nodes = getattr(operation, "_inbound_nodes", [])
        if len(nodes) != 1 or not any(t.dtype == "string" for t in nodes[0].input_tensors):
            continue
        if any(t.dtype == "string" for t in nodes[0].output_tensors):
            return None  # strings to strings (a lower-caser): the numeric part starts further on
        frontier += nodes[0].output_tensors
    try:
        numeric = keras.Model(frontier, model.outputs)
        numeric.compile(optimizer="sgd", loss=model.loss)
        numeric.optimizer.build(numeric.trainable_variables)
    except Exception:  # noqa: BLE001 - not a graph keras can cut there
        return None
    zeros = [tf.zeros([batch, *t.shape[1:]], t.dtype) for t in frontier]
    return numeric, zeros[0] if len(zeros) == 1 else zeros


def counted_step_flops(model, element_spec, batch: int, cache: str | None = None) -> StepFlops:
    """The model's step FLOPs on a batch of `batch` zeros shaped as `element_spec` says (inputs, targets[, weights]),
    from the cache when this model (its config, its trainable layers), batch and TensorFlow have been counted."""
    path = cache or cache_file(CACHE_FILE)
    key = model_key(model, element_spec, batch)
    known = read_json(path) if key else {}
    if key in known:
        return StepFlops(**known[key])
    x, y = zeros_batch(element_spec, batch)[:2]
    counted = step_flops(model, x, y)
    if key and counted.why_not is None:
        remember(path, {key: asdict(counted)})
    return counted


def zeros_batch(element_spec, batch: int):
    """A batch of zeros as the pipeline's element spec says (its unknown batch dimension `batch`)."""
    import tensorflow as tf

    def zeros(spec):
        shape = [batch if d is None else d for d in spec.shape.as_list()] if spec.shape.rank is not None else [batch]
        return tf.zeros(shape, spec.dtype) if spec.dtype != tf.string else tf.fill(shape, "")

    return tf.nest.map_structure(zeros, element_spec)


def model_key(model, element_spec, batch: int) -> str | None:
    """What a count holds for: each layer's class, config (its name aside: Keras numbers names by the layers made
    before, so the same model built twice in one process is named apart) and trainable flag (a frozen backbone has
    fewer gradients), the weights' shapes, the pipeline's shapes, the batch, TensorFlow's version; None for a model
    with a layer Keras cannot describe (a layer without get_config): counted every run."""
    import json

    import tensorflow as tf

    try:
        layers = [(type(layer).__name__, {k: v for k, v in layer.get_config().items() if k != "name"},
                   layer.trainable) for layer in model._flatten_layers(include_self=False)]
        described = json.dumps([type(model).__name__, layers, [list(w.shape) for w in model.weights]],
                               sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 -- a layer without a config: no key, no cache
        return None
    text = f"{described}|{element_spec}|{batch}|tf {tf.__version__}"
    return hashlib.sha256(text.encode()).hexdigest()
