"""The floating-point operations of a model's step, counted from what XLA compiles.

Keras has no FLOP count, and an analytic one per layer type misses a user's own layers. XLA does not: the step
compiled with `jit_compile=True` and read back as optimized HLO (`experimental_get_compiler_ir`, nothing run) holds
every matrix product and convolution the step does, whatever layers made them. Counted, as MaxText and torchtitan
count for MFU: `dot` (dense layers, attention's products, embeddings' gradients) as 2 x the output's elements x the
contracted size, and `convolution` (forward and both gradients) as 2 x the output's elements x the kernel's elements
per output feature. Element-wise ops, reductions, bias adds and activations are not counted: they are a few per cent
of a dense or convolutional step and run far from the device's peak, which is what MFU compares with.

The training step is `model.train_step` on one batch (forward, backward, the optimizer's update); the forward one
`model(x, training=False)`. A model XLA cannot compile (string ops: a tokenizer inside the model) has no count; the
reason is returned instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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
    try:
        forward = tf.function(lambda inputs: model(inputs, training=False), jit_compile=True)
        forward_hlo = forward.experimental_get_compiler_ir(x)(stage="optimized_hlo")
        training = tf.function(lambda inputs, targets: model.train_step((inputs, targets)), jit_compile=True)
        training_hlo = training.experimental_get_compiler_ir(x, y)(stage="optimized_hlo")
    except Exception as err:  # noqa: BLE001 - XLA refuses the step (string ops, an op without a kernel): no count
        return StepFlops(None, None, batch, why_not=f"XLA cannot compile the step ({type(err).__name__}: "
                                                    f"{str(err).strip().splitlines()[0][:200] if str(err) else ''})")
    return StepFlops(hlo_flops(forward_hlo), hlo_flops(training_hlo), batch)
