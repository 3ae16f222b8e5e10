"""checked: the config's settings sections checked and typed (`validate(cfg) -> Settings`).

Runs first, before TensorFlow or MLflow is imported, so a typo or an out-of-range value fails
in a fraction of a second. OmegaConf checks the types by merging the user's values into the
dataclasses of schemas.py; its errors are said here in the user's words (the key, the value,
what was expected, the fix). Ranges and choices are the dataclasses' own `__post_init__`.
"""

from __future__ import annotations

import functools
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from tfx_hydra.errors import ConfigError, show
from tfx_hydra.settings.checks import (
    require_bool,
    require_choice,
    require_known_keys,
    require_non_negative,
    require_range,
)
from tfx_hydra.settings.schemas import MODES, SECTIONS, Settings


def validate(cfg: DictConfig) -> Settings:
    """Check every settings section against its schema and return typed settings."""
    seed = cfg.get("seed")
    require_non_negative("seed", seed, example=42)
    require_choice("mode", cfg.get("mode", "train"), MODES)
    require_mandatory_values(cfg)
    # a config from before tasks (an old run's, reproduced) has no task: it was a classification
    sections = {name: validate_section(cfg, name) for name in SECTIONS if name != "task" or "task" in cfg}
    if "optimizer" in cfg:
        validate_optimizer(cfg.optimizer)
    validate_export_switches(cfg.get("export"))
    ema = OmegaConf.select(cfg, "optimizer.ema.enabled", default=False)
    if ema is True and sections["trainer"].keep_best.enabled:
        raise ConfigError("trainer.keep_best and optimizer.ema both choose the weights a run ends with: the best "
                          "epoch's, or the average's.", fix="one of them: trainer.keep_best.enabled=false or "
                          "optimizer.ema.enabled=false")
    weighed = [f"data.{key}" for key in ("weight_column", "weight_key") if OmegaConf.select(cfg, f"data.{key}")]
    if sections["trainer"].class_weight is not None and weighed:
        raise ConfigError(f"trainer.class_weight and {weighed[0]} both weigh the training examples, and Keras takes "
                          "one or the other.", fix="one of them: fold the class weights into the examples' weights, "
                          "or trainer.class_weight=null")
    return Settings(seed=seed, **sections)


# Ranges of the optimizer arguments Keras' optimizers share; Keras checks few of them itself
# (a negative learning rate trains uphill without a word), and only once TensorFlow is loaded.
OPTIMIZER_RANGES = {  # key: (lowest, highest, lowest allowed, highest allowed, example)
    "learning_rate": (0.0, None, False, None, "0.001"),
    "momentum": (0.0, 1.0, True, True, "0.9"),
    "beta_1": (0.0, 1.0, True, False, "0.9"),
    "beta_2": (0.0, 1.0, True, False, "0.999"),
    "epsilon": (0.0, None, False, None, "1e-07"),
    "weight_decay": (0.0, None, True, None, "0.004"),
    "rho": (0.0, 1.0, True, False, "0.9"),
    "clipnorm": (0.0, None, False, None, "1.0"),
    "clipvalue": (0.0, None, False, None, "1.0"),
    "global_clipnorm": (0.0, None, False, None, "1.0"),
}


def validate_optimizer(node: DictConfig) -> None:
    """The optimizer's numbers in range (a learning-rate schedule, itself a `_target_`, is left to Keras)."""
    for key, (low, high, low_ok, high_ok, example) in OPTIMIZER_RANGES.items():
        value = node.get(key) if isinstance(node, DictConfig) else None
        if value is None or isinstance(value, DictConfig):
            continue
        require_range(f"optimizer.{key}", value, low, high, example, low_inclusive=low_ok, high_inclusive=bool(high_ok))
    ema = node.get("ema") if isinstance(node, DictConfig) else None
    if isinstance(ema, DictConfig):
        require_bool("optimizer.ema.enabled", ema.get("enabled", False), fix=True)
        require_range("optimizer.ema.momentum", ema.get("momentum", 0.99), 0.0, 1.0, 0.99, high_inclusive=False)
    for switch in ("nesterov", "decay_biases_and_norms", "amsgrad", "centered", "relative_step"):
        if isinstance(node, DictConfig) and switch in node:
            require_bool(f"optimizer.{switch}", node[switch])


EXPORT_SWITCHES = ("strict", "mlflow_model")


def validate_export_switches(node: DictConfig | None) -> None:
    """export.strict / mlflow_model are switches, register_as and source names: a typo such as
    export.strict=yes must not read as true."""
    if not isinstance(node, DictConfig):
        return
    for key in EXPORT_SWITCHES:
        if key in node:
            require_bool(f"export.{key}", node[key])
    for key in ("register_as", "source"):
        value = node.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"export.{key}={show(value)}: expected a name or null.", fix=f"export.{key}=null")


def require_mandatory_values(cfg: DictConfig) -> None:
    """Keys a config option leaves for the user (`???`, e.g. data=tfrecord's train_files)."""
    missing = sorted(key for key in _missing_keys(cfg) if not key.startswith("hydra."))
    if missing:
        group = missing[0].split(".")[0]
        option = cfg.get(group, {}).get("_target_", "") if isinstance(cfg.get(group), DictConfig) else ""
        chosen = f" ({option.rsplit('.', 1)[-1]} needs {'them' if len(missing) > 1 else 'it'})" if option else ""
        raise ConfigError(f"{', '.join(missing)} {'have' if len(missing) > 1 else 'has'} no value{chosen}.",
                          fix=" ".join(f"{key}=..." for key in missing) + f" (python -m tfx_hydra --cfg job "
                          f"--package {group} shows the options)")


def _missing_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """Dotted keys whose value is `???`, without resolving interpolations (OmegaConf.missing_keys
    resolves them, and fails on the first that points at a missing value)."""
    found = []
    for key, value in node.items_ex(resolve=False):
        if OmegaConf.is_missing(node, key):
            found.append(f"{prefix}{key}")
        elif isinstance(value, DictConfig):
            found += _missing_keys(value, f"{prefix}{key}.")
    return found


def validate_section(cfg: DictConfig, name: str, schema: type | None = None) -> Any:
    """One settings section (`trainer`, `tracking`, ...) of `cfg` as its typed dataclass
    (`schema`: a section kept with its own package, e.g. hparams_search)."""
    schema = schema or SECTIONS[name]
    if name not in cfg:
        raise ConfigError(f"the config has no '{name}' section.", fix=f"add '{name}' to the defaults list")
    try:
        # resolved first: a section may read another (trainer.loss: ${task.loss}), which the schema cannot
        given = OmegaConf.to_container(cfg[name], resolve=True)
        require_groups_as_groups(name, schema, given)
        merged = OmegaConf.merge(_typed_defaults(schema), given)
        return OmegaConf.to_object(merged)
    except ConfigError:
        raise
    except ConfigKeyError as err:
        if err.full_key:
            require_known_keys(name, [str(err.full_key)], list(schema.__dataclass_fields__))
        raise ConfigError(f"invalid '{name}' section: {err.msg}") from None  # a key error with no key named
    except ValidationError as err:
        field_key = str(err.full_key).split("[")[0]  # a bad list element: report the list
        key = f"{name}.{field_key}"
        expected = _expected_type(schema, str(err.full_key))
        raise ConfigError(
            f"{key} got {err.value!r}, which has the wrong type: expected {expected}.",
            fix=f"{key}={_example(schema, str(err.full_key))}",
        ) from None
    except OmegaConfBaseException as err:
        raise ConfigError(f"invalid '{name}' section: {err.msg}") from None


@functools.lru_cache(maxsize=None)
def _typed_defaults(schema: type) -> DictConfig:
    """The schema as OmegaConf's typed node, made once per process: a run validates the same six
    sections, and a search's trials do so each (merge copies it, which costs a fifth of making it)."""
    return OmegaConf.structured(schema)


def require_groups_as_groups(name: str, schema: type, given: Any, prefix: str = "") -> None:
    """A group of settings set as one value (trainer.early_stopping=null, trainer.keep_best=false) is one error
    naming the switch the user meant (trainer.early_stopping.enabled=false), not OmegaConf's type error."""
    import dataclasses
    import typing

    if not isinstance(given, dict):
        return
    for field in dataclasses.fields(schema):
        hint = _field_type(schema, field.name)
        if not dataclasses.is_dataclass(hint) or field.name not in given:
            continue
        value, key = given[field.name], f"{name}.{prefix}{field.name}"
        if value is None and type(None) in getattr(typing.get_type_hints(schema)[field.name], "__args__", ()):
            continue  # an optional group, left out
        if isinstance(value, dict):
            require_groups_as_groups(name, hint, value, f"{prefix}{field.name}.")
            continue
        group = [f.name for f in dataclasses.fields(hint)]
        switch = "enabled" if "enabled" in group else group[0]
        said = " to turn it off" if switch == "enabled" and value in (None, False, "false", "off", "none") else ""
        raise ConfigError(f"{key} is a group of settings ({', '.join(group)}), not one value: {key}={show(value)} "
                          "cannot set it.", fix=f"{key}.{switch}=" + ("false" if said else "...") + said)


def _expected_type(schema: type, full_key: str) -> str:
    """Say in words what type the schema declares for `full_key`."""
    from omegaconf import BooleanNode, FloatNode, IntegerNode, ListConfig, StringNode

    if "[" in full_key:  # an element of a list: name the list's element type
        element_type = getattr(_field_type(schema, full_key.split("[")[0]), "__args__", (None,))[0]
        names = {int: "a list of integers", str: "a list of strings", float: "a list of numbers"}
        return names.get(element_type, "a list")
    node: Any = OmegaConf.structured(schema)
    for part in full_key.split("."):
        node = node._get_node(part)
    meanings = ((BooleanNode, "true or false"), (IntegerNode, "an integer"), (FloatNode, "a number"),
                (StringNode, "a string"), (ListConfig, "a list"))
    return next((meaning for kind, meaning in meanings if isinstance(node, kind)), "a value of another type")


def _field_type(schema: type, dotted: str) -> Any:
    """The (unwrapped Optional) annotation of a possibly nested dataclass field."""
    import typing

    hint: Any = schema
    for part in dotted.split("."):
        hint = typing.get_type_hints(hint)[part]
        args = [a for a in getattr(hint, "__args__", ()) if a is not type(None)]
        if getattr(hint, "__origin__", None) is typing.Union and len(args) == 1:
            hint = args[0]
    return hint


def _example(schema: type, full_key: str) -> str:
    if "[" in full_key:
        return "[0]"
    node: Any = OmegaConf.structured(schema)
    return show(OmegaConf.select(node, full_key) if full_key else None)
