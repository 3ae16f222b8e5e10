"""A step's FLOPs counted from XLA's optimized HLO (trainer/flops.py) match the analytic counts of a dense
network, a convolution and a Transformer block, forward and training, a user's own layer's matmul included."""

from __future__ import annotations

import pytest

from tfx_hydra.trainer.flops import step_flops

pytestmark = pytest.mark.slow  # compiles five models with XLA (~30 s)

B = 4  # examples per batch


def compiled(model):
    import keras

    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)
    return model


def batch(shape, dtype="float32"):
    import tensorflow as tf

    return tf.zeros((B, *shape), dtype), tf.zeros((B,), tf.int32)


def test_a_dense_network_forward_and_training():
    import keras

    model = compiled(keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                                       keras.layers.Dense(10)]))
    counted = step_flops(model, *batch((64,)))
    forward = 2 * B * (64 * 128 + 128 * 10)
    # backward: each layer's weight gradient (as many as its forward), and the input gradient of every layer but
    # the first (nothing asks for the inputs' gradient)
    training = forward + forward + 2 * B * 128 * 10
    assert (counted.forward, counted.training) == (forward, training)
    assert counted.forward_per_example == forward / B and counted.why_not is None


def test_a_convolution_forward_and_both_gradients():
    import keras

    model = compiled(keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3), keras.layers.Flatten(),
                                       keras.layers.Dense(10)]))
    counted = step_flops(model, *batch((16, 16, 3)))
    conv, dense = 2 * B * 14 * 14 * 8 * (3 * 3 * 3), 2 * B * (14 * 14 * 8) * 10
    assert counted.forward == conv + dense
    assert counted.training == (conv + dense) + conv + 2 * dense  # the kernel's gradient; the dense layer's two


def test_a_transformer_block_forward_with_a_users_own_layer():
    """Attention's projections and its two batched products, the feed-forward pair, and a matmul in a layer of
    the user's own."""
    import keras
    import tensorflow as tf

    class Mixer(keras.layers.Layer):  # the user's: x @ W over the features
        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1], shape[-1]))

        def call(self, x):
            return tf.matmul(x, self.w)

    T, D, H, K, F = 12, 16, 2, 8, 32
    inputs = keras.Input((T, D))
    x = keras.layers.MultiHeadAttention(num_heads=H, key_dim=K)(inputs, inputs)
    x = keras.layers.LayerNormalization()(x + inputs)
    x = keras.layers.Dense(D)(keras.layers.Dense(F, activation="relu")(x))
    x = Mixer()(x)
    outputs = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(x))
    counted = step_flops(compiled(keras.Model(inputs, outputs)), *batch((T, D)))
    attention = 3 * 2 * B * T * D * H * K + 2 * (2 * B * H * T * T * K) + 2 * B * T * H * K * D
    feed_forward = 2 * B * T * D * F + 2 * B * T * F * D
    assert counted.forward == attention + feed_forward + 2 * B * T * D * D + 2 * B * D * 10


def test_a_model_taking_raw_text_is_counted_from_its_token_ids_on():
    """XLA compiles no string op: a TextVectorization inside the model is left out (it does no matmul), and the rest
    counted: the dense layer on the flattened embeddings, forward; its weights' and its input's gradient, training
    (the embedding's gradient is a scatter, not a product)."""
    import keras
    import tensorflow as tf

    inputs = keras.Input((), dtype="string")
    vectorize = keras.layers.TextVectorization(max_tokens=50, output_sequence_length=8)
    vectorize.adapt(["the cat sat on the mat", "a dog ran"])
    x = keras.layers.Flatten()(keras.layers.Embedding(50, 16)(vectorize(inputs)))
    model = compiled(keras.Model(inputs, keras.layers.Dense(4)(x)))
    counted = step_flops(model, tf.constant(["the cat", "a dog", "sat", ""]), tf.zeros((B,), tf.int32))
    forward = 2 * B * (8 * 16) * 4
    assert (counted.forward, counted.training, counted.why_not) == (forward, 3 * forward, None)


def test_a_model_xla_cannot_compile_has_no_count_and_says_why():
    """Strings that reach past the first step (lower-cased, then measured): nothing numeric to start the count at."""
    import keras
    import tensorflow as tf

    inputs = keras.Input((), dtype="string")
    lowered = keras.layers.Lambda(lambda s: tf.strings.lower(s), output_shape=())(inputs)
    lengths = keras.layers.Lambda(lambda s: tf.cast(tf.strings.length(s), "float32")[:, None],
                                  output_shape=(1,))(lowered)
    model = compiled(keras.Model(inputs, keras.layers.Dense(2)(lengths)))
    counted = step_flops(model, tf.constant(["a", "bb", "ccc", "d"]), tf.zeros((B,), tf.int32))
    assert counted.forward is None and counted.training is None
    assert counted.why_not.startswith("XLA cannot compile the step")


def test_a_depthwise_convolution_counts_one_input_feature_per_output():
    import keras

    model = compiled(keras.Sequential([keras.Input((16, 16, 4)), keras.layers.DepthwiseConv2D(3),
                                       keras.layers.Flatten(), keras.layers.Dense(10)]))
    counted = step_flops(model, *batch((16, 16, 4)))
    assert counted.forward == 2 * B * 14 * 14 * 4 * (3 * 3) + 2 * B * (14 * 14 * 4) * 10


def test_a_runs_count_is_made_on_zeros_of_its_pipelines_shapes_once_per_model_and_kept(tmp_path):
    """counted_step_flops: what a run calls. Its batch is zeros shaped by the pipeline's element spec (the data is not
    read), its count the same as on real batches, written to the cache once and read back; a model with a layer
    frozen is another model (fewer gradients: a count of its own)."""
    import keras
    import tensorflow as tf

    from tfx_hydra.trainer.flops import counted_step_flops
    from tfx_hydra.user_cache import read_json

    cache = str(tmp_path / "step_flops.json")
    spec = (tf.TensorSpec((None, 64), tf.float32), tf.TensorSpec((None,), tf.int32))
    model = compiled(keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                                       keras.layers.Dense(10)]))
    counted = counted_step_flops(model, spec, B, cache=cache)
    assert counted == step_flops(model, *batch((64,)))
    assert list(read_json(cache).values()) == [{"forward": counted.forward, "training": counted.training, "batch": B,
                                                "why_not": None}]
    assert counted_step_flops(model, spec, B, cache=cache) == counted  # read back
    model.layers[0].trainable = False
    compiled(model)
    frozen = counted_step_flops(model, spec, B, cache=cache)
    # the forward, and the second layer's weight gradient alone: no gradient flows into the frozen first layer
    assert frozen.forward == counted.forward and frozen.training == counted.forward + 2 * B * 128 * 10
    assert len(read_json(cache)) == 2
