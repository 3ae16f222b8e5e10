"""text: what the text models share (model=text_baseline, model=hub_text, each in its own module). They take
raw strings (data=text_folder, data=text_table) and tokenize them in their own layers, so the SavedModel and the
MLflow model take raw text too. `text_baseline` and `hub_text` stay importable from here until 0.3.0.
"""

from __future__ import annotations

from tfx_hydra.errors import ConfigError


def require_text_inputs(input_shape, model: str) -> None:
    if list(input_shape or []) != []:
        raise ConfigError(f"model={model} takes raw text, one string per example; data.input_shape="
                          f"{list(input_shape)} is not text.", fix="data=text_folder or data=text_table")


def import_text_ops() -> None:
    """TensorFlow Text registers the ops BERT's preprocessing models use; a preprocessor of plain
    TensorFlow ops loads without it, so its absence is said only if loading then fails."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        pass


def __getattr__(name: str):
    """The builders' old home (0.1.0): imported on first use, as the modules import this one."""
    if name in ("text_baseline", "hub_text"):
        import importlib

        return getattr(importlib.import_module(f"tfx_hydra.models.{name}"), name)
    raise AttributeError(name)
