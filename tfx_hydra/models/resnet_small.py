"""model=resnet_small: a small ResNet for 8-64 px images (He et al.'s CIFAR design)."""

from __future__ import annotations

from tfx_hydra.errors import ConfigError
from tfx_hydra.models.blocks import conv_bn_relu, image_inputs, residual_block
from tfx_hydra.models.heads import head as output_head
from tfx_hydra.settings.checks import require_positive, require_range


def resnet_small(name, input_shape, num_classes, stages=(16, 32, 64), blocks_per_stage=2, dropout=0.0,
                 head="softmax"):
    """A small ResNet for 8-64 px images (He et al.'s CIFAR design): a 3x3 stem, then per stage
    `blocks_per_stage` residual blocks (two 3x3 conv + batch norm, identity or 1x1 projection
    shortcut), each stage after the first halving the resolution; global average pool; the task's head."""
    import keras

    if not stages:
        raise ConfigError("model.stages is empty: expected the filters of each stage.", fix="model.stages=[16,32,64]")
    for f in stages:
        require_positive("model.stages", f, 16)
    require_positive("model.blocks_per_stage", blocks_per_stage, 2)
    require_range("model.dropout", dropout, 0.0, 1.0, 0.2, high_inclusive=False)
    inputs, x = image_inputs(input_shape, "resnet_small")
    x = conv_bn_relu(x, stages[0], 3, True, "stem")
    for s, filters in enumerate(stages):
        for b in range(blocks_per_stage):
            x = residual_block(x, filters, stride=2 if s > 0 and b == 0 else 1, name=f"stage{s}_block{b}")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    return keras.Model(inputs, output_head(x, num_classes, head), name=name)


# hardware.intra_op_threads=auto gives its ops every core whatever the image size (threads.py), as for model=cnn.
resnet_small.intra_op_threads = 0
