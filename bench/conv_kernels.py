"""Where a conv net's step spends its time: each convolution of the issue's reference CNN (three 3x3 convolutions of
32, 64 and 128 filters on 64x64x3, each followed by a 2x2 max-pool) timed alone in TensorFlow, forward and forward
with both gradients, at batch 64, in GFLOP/s and as a share of this CPU's float32 peak; and the examples/s a
training step of nothing but those convolutions would reach -- what bench/mfu.py's whole-model MFU is to be read
against.

    python bench/conv_kernels.py           # batch 64, 20 timed calls each (~1 min on 2 cores)
    python bench/conv_kernels.py --quick   # batch 8, 3 timed calls (the suite runs it)

Each figure is one `tf.function` (`tf.nn.conv2d`, and `tf.GradientTape` for its input's and its filters'
gradients, the way Keras' training step asks for them), two warm-up calls, then the timed ones, each result read
back to the host. The peak is tfx_hydra's (peak.py: a 2048x2048 float32 matmul, measured once per machine and
cached). The first convolution's input gradient is timed but not needed by a training step (nothing upstream
learns), so "a step of convolutions only" counts that layer forward and filter gradient only: 2x its forward FLOPs,
timed at the rate of its forward-and-both-gradients call.
"""

from __future__ import annotations

import argparse
import time

from harness import write_json

# the reference CNN's convolutions: (input side, input channels, filters); each max-pool halves the side
LAYERS = ((64, 3, 32), (32, 32, 64), (16, 64, 128))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per figure, after two warm-ups")
    parser.add_argument("--quick", action="store_true", help="batch 8, 3 timed calls")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.calls = 8, 3
    return args


def seconds_per_call(function, calls: int) -> float:
    """The mean seconds of `calls` calls of `function` (its result read back each time), after two warm-ups."""
    function().numpy()
    function().numpy()
    began = time.perf_counter()
    for _ in range(calls):
        function().numpy()
    return (time.perf_counter() - began) / calls


def time_convolution(tf, batch: int, side: int, channels: int, filters: int, calls: int) -> dict:
    """One convolution's forward and forward-with-both-gradients seconds and GFLOP/s at `batch`."""
    inputs = tf.random.normal([batch, side, side, channels])
    kernel = tf.Variable(tf.random.normal([3, 3, channels, filters]) * 0.1)
    forward_flops = 2 * batch * side * side * channels * filters * 9  # a multiply and an add per weight and pixel

    @tf.function
    def forward():
        return tf.reduce_sum(tf.nn.conv2d(inputs, kernel, 1, "SAME"))

    @tf.function
    def with_gradients():
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            total = tf.reduce_sum(tf.nn.conv2d(inputs, kernel, 1, "SAME"))
        to_inputs, to_kernel = tape.gradient(total, [inputs, kernel])
        return tf.reduce_sum(to_inputs) + tf.reduce_sum(to_kernel)

    forward_seconds = seconds_per_call(forward, calls)
    training_seconds = seconds_per_call(with_gradients, calls)
    return {"forward_flops": forward_flops, "forward_seconds": forward_seconds,
            "forward_gflops": forward_flops / forward_seconds / 1e9,
            "training_seconds": training_seconds, "training_gflops": 3 * forward_flops / training_seconds / 1e9}


def main(argv=None) -> dict:
    args = parse_args(argv)
    import tensorflow as tf

    from tfx_hydra.peak import measured_peak

    peak = measured_peak("fp32")
    layers = {f"{side}x{side}x{channels} -> {filters}": time_convolution(tf, args.batch, side, channels, filters,
                                                                          args.calls)
              for side, channels, filters in LAYERS}
    first, *rest = layers.values()
    # a step of convolutions only: the first layer's forward and filter gradient (2x), the others' all three (3x)
    step_flops = 2 * first["forward_flops"] + sum(3 * layer["forward_flops"] for layer in rest)
    step_seconds = (2 / 3) * first["training_seconds"] + sum(layer["training_seconds"] for layer in rest)
    results = {"batch": args.batch, "calls": args.calls, "peak": peak.flops_per_second, "peak_source": peak.source,
               "layers": layers, "convolutions_only": {
                   "training_flops_per_example": step_flops / args.batch,
                   "examples_per_sec": args.batch / step_seconds,
                   "mfu": step_flops / step_seconds / peak.flops_per_second}}
    print_table(results)
    write_json(args.json, results)
    return results


def print_table(results: dict) -> None:
    peak = results["peak"] / 1e9
    print(f"peak: {peak:,.0f} GFLOP/s ({results['peak_source']}); batch {results['batch']}")
    print(f"{'convolution':<24}{'forward GFLOP/s':>17}{'share':>8}{'with gradients GFLOP/s':>24}{'share':>8}")
    for name, layer in results["layers"].items():
        print(f"{name:<24}{layer['forward_gflops']:>17,.1f}{layer['forward_gflops'] / peak:>8.0%}"
              f"{layer['training_gflops']:>24,.1f}{layer['training_gflops'] / peak:>8.0%}")
    only = results["convolutions_only"]
    print(f"a training step of these convolutions only: {only['training_flops_per_example'] / 1e6:,.1f} MFLOP per "
          f"example, {only['examples_per_sec']:,.0f} examples/s, mfu {only['mfu']:.0%}")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
