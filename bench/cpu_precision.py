"""float32 against mixed_bfloat16 on this CPU, per model family: what the cpu profile's precision=auto decides.

    python bench/cpu_precision.py            # mlp (28x28), cnn and resnet_small (64x64x3), batch 64, 3 rounds each
    python bench/cpu_precision.py --quick    # mlp and cnn, 1 round of 4 steps of 8: checks the script
    python bench/cpu_precision.py --json out.json

Each model trains on random inputs (speed only: accuracy is checked on the digits by tests/unit/test_precision.py)
with every core, as intra_op_threads=auto gives large inputs; rounds alternate float32 and bfloat16, and each
round's first steps (tracing) are left out. Printed: training examples/s per policy, the ratio, the CPU's
AMX-BF16 flag and what precision=auto picks for that model's inputs. On a CPU with AMX-BF16 (Sapphire Rapids and
newer Xeons) bfloat16 should win for the convolutional models; elsewhere it is emulated and loses.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from harness import write_json

FAMILIES = (("mlp", (28, 28)), ("cnn", (64, 64, 3)), ("resnet_small", (64, 64, 3)))


def examples_per_second(name: str, shape: tuple[int, ...], policy: str, steps: int, batch: int = 64,
                        warm: int = 16) -> float:
    import keras
    import numpy as np
    import tensorflow as tf

    from tfx_hydra import models
    from tfx_hydra.precision import set_precision

    set_precision(policy)
    keras.utils.set_random_seed(0)
    model = getattr(models, name)(name, list(shape), 10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", steps_per_execution=8)
    rng = np.random.default_rng(0)
    x = rng.random((batch * 8, *shape), dtype=np.float32)
    y = rng.integers(0, 10, size=batch * 8)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat().prefetch(-1)
    model.fit(data, steps_per_epoch=warm, epochs=1, verbose=0)  # traced and warm
    started = time.perf_counter()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    return steps * batch / (time.perf_counter() - started)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="mlp and cnn, 1 round of 4 steps of 8 (emulated "
                        "bfloat16 trains a conv net at ~10 examples/s on a CPU without AMX)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    rounds, steps, batch, warm = (1, 4, 8, 2) if args.quick else (args.rounds, 160, 64, 16)

    import tensorflow as tf

    from tfx_hydra.precision import cpu_flags, cpu_policy

    tf.config.threading.set_intra_op_parallelism_threads(0)  # every core, as intra_op_threads=auto gives images
    flags = cpu_flags()
    rows = []
    for name, shape in FAMILIES[:2] if args.quick else FAMILIES:
        rates: dict[str, list[float]] = {"float32": [], "mixed_bfloat16": []}
        for index in range(rounds):
            order = ("float32", "mixed_bfloat16") if index % 2 == 0 else ("mixed_bfloat16", "float32")
            for policy in order:
                rates[policy].append(examples_per_second(name, shape, policy, steps, batch, warm))
        fp32, bf16 = (statistics.median(rates[p]) for p in ("float32", "mixed_bfloat16"))
        picked, _ = cpu_policy(math.prod(shape), flags)
        rows.append({"model": name, "input": list(shape), "fp32_ex_s": fp32, "bf16_ex_s": bf16,
                     "bf16_over_fp32": bf16 / fp32, "auto_picks": picked})
    print(f"CPU AMX-BF16: {'yes' if 'amx_bf16' in flags else 'no'} (amx_bf16 in /proc/cpuinfo's flags)")
    print(f"{'model':14}{'input':>14}{'fp32 ex/s':>12}{'bf16 ex/s':>12}{'bf16/fp32':>11}  precision=auto picks")
    for row in rows:
        shown = "x".join(map(str, row["input"]))
        print(f"{row['model']:14}{shown:>14}{row['fp32_ex_s']:>12,.0f}{row['bf16_ex_s']:>12,.0f}"
              f"{row['bf16_over_fp32']:>10.2f}x  {row['auto_picks']}")
    write_json(args.json, {"amx_bf16": "amx_bf16" in flags, "families": rows})


if __name__ == "__main__":
    main()
