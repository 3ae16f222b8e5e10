"""Hydra finds sweepers and launchers only in the `hydra_plugins` namespace, and instantiates one only by a class
name there: this is where it finds ours.

The search itself is `tfx_hydra.sweeps.hparams_search.sweeper.OptunaSweeper`; this subclass only
gives it the name Hydra looks for (conf/hydra/sweeper/hparams_search.yaml); the same for the Ray launcher,
`tfx_hydra.sweeps.ray_launcher.RayLauncher` (conf/hydra/launcher/ray.yaml). Importing it stays light:
Hydra imports every plugin for `--help` too, so Optuna is imported only when a search starts.
"""

from tfx_hydra.sweeps import ray_launcher
from tfx_hydra.sweeps.hparams_search import sweeper


class OptunaSweeper(sweeper.OptunaSweeper):
    """`hydra/sweeper=hparams_search` (selected by `hparams_search=optuna`)."""


class RayLauncher(ray_launcher.RayLauncher):
    """`hydra/launcher=ray`: every sweep job a Ray task, through Hydra's Ray launcher (imported when it launches)."""
