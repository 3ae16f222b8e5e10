"""config: the config a run gets from its overrides, and the objects its nodes describe.

`compose` is the one place a config is composed outside `python -m tfx_hydra`: reproduce
(what the recorded overrides give today), the TFRecord converter (the data a run would
read), the hardware profiles (`hardware=auto` reads them through Hydra, so a profile that
inherits from another is read whole) and the tests all get exactly the tree a run gets.
`build` turns one node into its object with `hydra.utils.instantiate`, and turns a bad
argument into a ConfigError that names the key.

Only Hydra and OmegaConf are imported here: preflight uses this module.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from tfx_hydra.errors import ConfigError, TfxHydraError

CONFIG_MODULE = "tfx_hydra.conf"  # conf/ as the wheel ships it
log = logging.getLogger(__name__)


@contextmanager
def config_tree() -> Iterator[None]:
    """Hydra's config search path: the running app's (its own search path, plugins' configs), or
    the packaged tree when called from outside an app (reproduce, the converter, tests)."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        yield


def compose(overrides: Sequence[str] = (), config_name: str | None = "config") -> DictConfig:
    """The config `python -m tfx_hydra <overrides>` runs with (without Hydra's own node).
    config_name=None composes only what the overrides add (`+hardware=a100`: one profile)."""
    from hydra import compose as hydra_compose

    with config_tree():
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def group_options(group: str) -> list[str]:
    """The options of a config group (`hardware` -> ['a100', 'auto', 'cpu', ...])."""
    from hydra.core.global_hydra import GlobalHydra

    with config_tree():
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


def build(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, with one log line naming what is built (as lightning-hydra-template
    does), our errors passed through and bad arguments named by key."""
    log.info(f"{key}: {node.get('_target_')}")
    return instantiate_node(node, key, **kwargs)


def instantiate_node(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`build` without the log line: preflight builds exporters from their settings to check them."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, TfxHydraError):
            raise cause from None
        if isinstance(cause, (TypeError, ValueError)) or cause is None:  # a bad argument or value, bad _target_
            raise ConfigError(f"cannot build '{key}' from its config: {cause or err}",
                              fix=f"check the keys under '{key}' (python -m tfx_hydra --cfg job --package {key})"
                              ) from None
        raise
