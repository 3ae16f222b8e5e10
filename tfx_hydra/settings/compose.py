"""compose: the config a run gets from its overrides, and the objects its nodes describe.

`compose` is the one place a config is composed outside `python -m tfx_hydra`: reproduce
(what the recorded overrides give today), the TFRecord converter (the data a run would
read), the hardware profiles (`hardware=auto` reads them through Hydra, so a profile that
inherits from another is read whole) and the tests all get exactly the tree a run gets.
`build` turns one node into its object with `hydra.utils.instantiate`, and turns a bad
argument into a ConfigError that names the key.

Only Hydra and OmegaConf are imported here: preflight uses this module.
"""

from __future__ import annotations

import difflib
import logging
import os
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from tfx_hydra.errors import ConfigError, TfxHydraError
from tfx_hydra.settings.project import find_project, is_users, package_location

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
    """`hydra.utils.instantiate`, with our errors passed through and bad arguments named by key.
    Which code builds it is a debug line (hydra.verbose=tfx_hydra.settings.compose): the steps say what was
    chosen in the user's words."""
    log.debug(f"{key}: {node.get('_target_')}")
    return instantiate_node(node, key, **kwargs)


def choice(group: str) -> str | None:
    """The option the run selected for a group (`data` -> 'digits'), None outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get(group)


def instantiate_node(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`build` without the log line: preflight builds exporters from their settings to check them."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        target = str(node.get("_target_", "")) if isinstance(node, (DictConfig, dict)) else ""
        if isinstance(cause, TfxHydraError):
            raise cause from None
        if str(err).startswith("Error locating target"):
            raise unimportable(key, target, cause) from None
        if cause is not None and is_users(target) and raised_inside(cause):
            raise ConfigError(f"building '{key}' ({target}) raised {type(cause).__name__} in your code:\n"
                              + users_traceback(cause),
                              fix=f"fix {target} (the traceback above is its own), or the keys under '{key}'"
                              ) from None
        if key == "data" and cause is not None and not isinstance(cause, TypeError):  # not a bad argument: the files
            raise data_source_failed(node, target, cause) from None
        if isinstance(cause, (TypeError, ValueError)) or cause is None:  # a bad argument or value, bad _target_
            raise ConfigError(f"cannot build '{key}' from its config: {cause or err}",
                              fix=f"check the keys under '{key}' (python -m tfx_hydra --cfg job --package {key})"
                              ) from None
        raise


def data_source_failed(node: Any, target: str, cause: BaseException) -> Exception:
    """A data source's factory that failed unexpectedly: one DataError with what failed, where (data.path), and
    how to see more, instead of Hydra's "Error in call to target" text."""
    from tfx_hydra.errors import DataError

    path = node.get("path") if isinstance(node, (DictConfig, dict)) else None
    where = f" reading data.path={path}" if path else ""
    return DataError(f"data={choice('data') or target}{where} failed: {type(cause).__name__}: "
                     f"{str(cause).splitlines()[0][:300] if str(cause) else ''}",
                     fix="check the file is what the data option reads (the data how-to lists each one's format: a "
                     "table is UTF-8 text)")


def raised_inside(error: BaseException) -> bool:
    """The error came from inside the called code, not from the call itself (a bad keyword is a
    TypeError raised at the call: the config's mistake, said as such)."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and f"{os.sep}hydra{os.sep}" not in frames[-1].filename


def users_traceback(error: BaseException) -> str:
    """The error's traceback without Hydra's frames: the part that points into the user's code."""
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"{os.sep}hydra{os.sep}" not in f.filename]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(error), error)
    return "\n".join("  " + line for text in lines for line in text.rstrip("\n").split("\n"))


def users_code_error(error: BaseException, doing: str) -> str | None:
    """The message for an error raised inside the user's code while tfx_hydra was `doing` something (training:
    a callback, metric, loss or layer of theirs): one line of ours and the user's own frames, as a build error
    shows them; None when no frame of the traceback is the user's (then it is ours or a library's, and keeps
    its whole traceback)."""
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_users_file(f.filename)]
    if not frames:
        return None
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(error), error)
    shown = "\n".join("  " + line for text in lines for line in text.rstrip("\n").split("\n"))
    return f"{doing} raised {type(error).__name__} in your code:\n{shown}"


def is_users_file(filename: str) -> bool:
    """A traceback frame's file in the user's code: not tfx_hydra's, not an installed package's (site-packages),
    not Python's own library, not code TensorFlow generated (autograph's temporary files)."""
    import sysconfig

    path = os.path.abspath(filename)
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the tfx_hydra package
    library = {os.path.abspath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    parts = set(path.split(os.sep))
    return not (filename.startswith("<") or path.startswith(ours + os.sep) or parts & {"site-packages", "dist-packages"}
                or any(path.startswith(folder + os.sep) for folder in library) or "__autograph_generated" in path)


def targets(node: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, `_target_`) of every node of a config container that names code, Hydra's own node left out."""
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and target:
            yield key or "config", target
        for name, value in node.items():
            if not (name == "hydra" and not key):
                yield from targets(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from targets(value, f"{key}[{index}]")


def require_importable_targets(container: dict) -> None:
    """Every `_target_`'s top-level package can be found, checked before TensorFlow is imported (finding a
    top-level package imports nothing): a misspelt or uninstalled package fails in preflight, not
    after the run has started. A missing module inside a package that exists is found when it is built."""
    for key, target in targets(container):
        top = target.split(".", 1)[0]
        if package_location(top) is None:
            raise unimportable(key, target, ModuleNotFoundError(f"No module named '{top}'"))


def unimportable(key: str, target: str, cause: BaseException | None) -> ConfigError:
    """A `_target_` whose module cannot be imported: which module, and where Python looked."""
    import sys

    innermost = cause
    while innermost is not None and isinstance(innermost.__cause__, ImportError):
        innermost = innermost.__cause__  # Hydra's "Error loading ..." wraps Python's own ImportError
    reason = str(innermost or "").strip().splitlines()[0] if innermost is not None else "not found"
    try:
        project = find_project()
    except TfxHydraError:
        project = None
    where = (f"the project at {project.root} (its code from {', '.join(project.python_path)})" if project
             else "no tfx_hydra project (no pyproject.toml with [tool.tfx_hydra] here or above)")
    searched = ", ".join(p or "." for p in sys.path[:6]) + (f" ({len(sys.path)} in all)" if len(sys.path) > 6 else "")
    return ConfigError(f"{key}._target_={target} cannot be imported: {reason}. Looked in {where}; sys.path: "
                       f"{searched}.",
                       fix="install the package that holds it (pip install -e /path/to/project), run from its "
                       "project's folder, or add its folder to PYTHONPATH; check the spelling of the _target_")


# Overrides of Hydra's own config that belong to a sweep, not to one of its jobs run alone
SWEEP_ONLY = ("hydra.mode=", "hydra/launcher=", "hydra.launcher.", "hydra/sweeper=", "hydra.sweeper.", "hydra.sweep.")


def single_run_hydra_overrides(hydra_overrides: Sequence[str]) -> list[str]:
    """The overrides of Hydra's own config a run was started with that running it again alone needs
    (`hydra.searchpath=[file://...]`, `hydra.run.dir=...`, `hydra.job_logging=...`); a sweep's
    launcher, sweeper and mode stay with the sweep."""
    return [str(o) for o in hydra_overrides if not str(o).lstrip("+~").startswith(SWEEP_ONLY)]


# --- Hydra's composition errors, in a run's words ----------------------------------------------

def composition_error(err: Exception, overrides: Sequence[str] = ()) -> ConfigError | None:
    """Hydra's message for an unknown option or key, said as our errors are: what was typed, what
    exists, the override that fixes it. Hydra's own text lists its search path and OmegaConf's
    internals (`object_type=dict`); a person needs the closest option. `overrides`: the command's,
    so a key is looked for in the groups it selected (`model=cnn model.filtrs=...`). None: not one of those."""
    from hydra.errors import MissingConfigException

    if isinstance(err, MissingConfigException) and err.missing_cfg_file and "/" in err.missing_cfg_file:
        group, option = err.missing_cfg_file.rsplit("/", 1)
        return unknown_option(group, option)
    text = str(err)
    if type(err).__name__ == "OverrideParseException":  # `data.path=~/x`: the one parse error we can say better
        tilde = next((o for o in overrides if "=~" in o and o.split("=~", 1)[0] in text), None)
        return home_in_a_value(tilde) if tilde else None
    if text.startswith("Could not override '"):
        key = text.split("'")[1]
        typed = text.rsplit("use +", 1)[-1].strip() if "use +" in text else f"{key}=..."
        others = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
        return unknown_key(key, typed.split("=", 1)[1] if "=" in typed else "...", others)
    return None


def home_in_a_value(override: str) -> ConfigError:
    """`data.path=~/mnist.npz`: a shell expands `~` only at a word's start, so Hydra gets it as typed,
    and its grammar has no unquoted `~` in a value."""
    key, value = override.split("=", 1)
    return ConfigError(f"{override}: the shell does not expand ~ after '=', and Hydra's override syntax does not take "
                       "it unquoted.", fix=f"{key}=$HOME{value[1:]}" if value.startswith("~/") else
                       f"{key}=<the full path>")


def unknown_option(group: str, option: str) -> ConfigError:
    options = group_options(group)
    guess = difflib.get_close_matches(option, options, n=1)
    listed = ", ".join(options) or "(none)"
    fix = f"{group}={guess[0]} (the closest option)" if guess else f"{group}=<one of the options above>"
    return ConfigError(f"{group}={option} is not an option of '{group}'; its options are: {listed}.", fix=fix)


def keys_beside(config: DictConfig | None, key: str) -> tuple[list[str], list[str]]:
    """(the keys of `key`'s parent node in `config`, those spelt closest to its last part): what a
    message about a key that is not there lists, and suggests."""
    from omegaconf import OmegaConf

    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(config, parent) if parent and config is not None else config
    keys = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
    return keys, difflib.get_close_matches(name, keys, n=3)


def unknown_key(key: str, value: str, others: Sequence[str] = ()) -> ConfigError:
    """`trainer.epoch=3`: the keys of `trainer` (in the config the command's other overrides give,
    else the default one) and the closest one."""
    parent = key.rpartition(".")[0]
    node = None
    for overrides in (others, ()):  # the other overrides may not compose alone (a sweep's `a=1,2`)
        try:
            node = compose(overrides)
            break
        except Exception:  # noqa: BLE001 - only a hint: without a config, no suggestion
            continue
    keys, guess = keys_beside(node, key)
    if not parent:  # `modle=cnn`: a group whose option was typed beats a key spelled alike
        guess = [g for g in guess if value in group_options(g)] or guess
    where = f"'{parent}'" if parent else "the config"
    fix = f"{parent + '.' if parent else ''}{guess[0]}={value}" if guess else \
        f"+{key}={value} to add a new key, or see every key with: python -m tfx_hydra --cfg job"
    return ConfigError(f"{key} is not a key of {where}" + (f" (its keys: {', '.join(keys)})." if keys else "."),
                       fix=fix)
