"""config.build: our errors pass through, bad arguments are named by their key."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from tfx_hydra.errors import ConfigError, DataError
from tfx_hydra.hardware import load_profiles
from tfx_hydra.settings.compose import build, compose, composition_error, group_options


def test_build_passes_our_errors_through_unwrapped():
    node = OmegaConf.create({"_target_": "tfx_hydra.models.mlp", "name": "m", "input_shape": [8, 8],
                             "num_classes": 10, "units": -4})
    with pytest.raises(ConfigError, match=r"model.units=-4 is out of range: expected a positive integer"):
        build(node, "model")


def test_build_names_the_group_of_an_unknown_argument():
    node = OmegaConf.create({"_target_": "tfx_hydra.models.mlp", "name": "mlp", "input_shape": [8, 8],
                             "num_classes": 10, "colour": "red"})
    with pytest.raises(ConfigError,
                       match=r"cannot build 'model' from its config: .*unexpected keyword argument 'colour'"):
        build(node, "model")
    data = OmegaConf.create({"_target_": "tfx_hydra.data.digits", "input_shape": [8, 8], "num_classes": 10,
                             "batch_size": 32, "seed": 0, "colour": "red"})
    with pytest.raises(ConfigError, match=r"data.colour is not an option of this data source"):
        build(data, "data")


def test_build_reports_data_errors_as_data_errors(tmp_path):
    node = OmegaConf.create({"_target_": "tfx_hydra.data.keras_dataset", "name": "mnist",
                             "path": str(tmp_path / "x.npz"), "input_shape": [28, 28], "num_classes": 10,
                             "batch_size": 32, "seed": 0})
    with pytest.raises(DataError, match="does not exist"):
        build(node, "data")


def test_compose_gives_the_config_the_command_line_gives():
    cfg = compose(["hardware=h100", "data=mnist", "trainer.epochs=3"])
    assert "hydra" not in cfg
    assert (cfg.trainer.epochs, cfg.data.name, cfg.data._target_) == (3, "mnist", "tfx_hydra.data.keras_dataset")
    assert cfg.data.shuffle_buffer == 60000 and cfg.data.prefetch == "auto"  # its own value; the shared options
    assert cfg.hardware.expect.name_pattern == "H100" and cfg.hardware.allocator == "cuda_malloc_async"  # from a100


def test_group_options_are_the_files_of_the_group():
    assert group_options("tracking") == ["mlflow", "none"]
    assert {"a100", "auto", "cpu", "h100", "t4"} <= set(group_options("hardware"))


def test_profiles_that_inherit_are_read_whole_by_hardware_auto():
    profiles = load_profiles()
    a100, t4 = profiles["a100"], profiles["t4"]
    assert (t4.expect.name_pattern, t4.precision, t4.per_replica_batch_size) == ("T4", "mixed_float16", 128)
    assert (t4.allocator, t4.xla, t4.steps_per_execution) == (a100.allocator, a100.xla, a100.steps_per_execution)
    assert profiles["a100_80gb"].expect.name_pattern == "A100" and profiles["a100_80gb"].expect.min_memory_gb == 79


def test_an_unknown_option_is_said_with_the_options_and_the_closest_as_the_fix():
    with pytest.raises(MissingConfigException) as raised:
        compose(["data=mnst"])
    said = composition_error(raised.value)
    assert said.message.startswith("data=mnst is not an option of 'data'; its options are: cifar10, cifar100, ")
    assert "digits" in said.message and "tfrecord" in said.message
    assert said.fix == "data=mnist (the closest option)"
    assert "Config search path" not in str(said)


def test_an_unknown_option_inside_a_list_is_named_too():
    with pytest.raises(MissingConfigException) as raised:
        compose(["export=[savedmodel,coreml]"])
    said = composition_error(raised.value)
    assert said.message == "export=coreml is not an option of 'export'; its options are: " \
        "keras, none, onnx, savedmodel, tfjs, tflite."
    assert said.fix == "export=<one of the options above>"


def test_a_misspelt_key_gets_the_keys_it_could_be_and_the_right_override():
    with pytest.raises(ConfigCompositionException) as raised:
        compose(["trainer.epoch=3"])
    said = composition_error(raised.value)
    assert said.message.startswith("trainer.epoch is not a key of 'trainer' (its keys: epochs, batch_size, ")
    assert said.fix == "trainer.epochs=3"
    assert composition_error(_composition_failure(["modle=cnn"])).fix == "model=cnn"  # a group, by its option
    # a key of the group the command selected, not of the default option
    cnn = composition_error(_composition_failure(["model=cnn", "model.filtrs=[8]"]), ["model=cnn", "model.filtrs=[8]"])
    assert cnn.fix == "model.filters=[8]" and "convs_per_block" in cnn.message
    unknown = composition_error(_composition_failure(["colour=red"]))
    assert unknown.fix.startswith("+colour=red to add a new key")


def _composition_failure(overrides):
    try:
        compose(overrides)
    except ConfigCompositionException as err:
        return err
    raise AssertionError(f"{overrides} composed")


def test_a_target_whose_package_is_nowhere_is_found_before_tensorflow_and_named_by_key():
    from tfx_hydra.settings.compose import require_importable_targets

    require_importable_targets({"model": {"_target_": "tfx_hydra.models.mlp"},
                                "optimizer": {"_target_": "keras.optimizers.Adam"}})  # found: nothing said
    with pytest.raises(ConfigError) as raised:
        require_importable_targets({"trainer": {"callbacks": [{"_target_": "keras.callbacks.History"},
                                                              {"_target_": "mypackage_nowhere.Log"}]}})
    said = str(raised.value)
    assert said.startswith("ConfigError: trainer.callbacks[1]._target_=mypackage_nowhere.Log cannot be imported: "
                           "No module named 'mypackage_nowhere'. Looked in no tfx_hydra project"), said
