"""Moved to tfx_hydra.trainer.losses in 0.2.0. This path stays importable until 0.3.0: a `.keras` file
saved by 0.1.x names this module for its loss, and Keras imports that module to load it."""

from tfx_hydra.trainer.losses import SmoothedSparseCrossentropy, smoothed

__all__ = ["SmoothedSparseCrossentropy", "smoothed"]
