"""Hydra finds sweepers only in the `hydra_plugins` namespace: this is where it finds ours.

The search itself lives in `tfx_hydra.hparams_search`; this class only gives it the name Hydra
looks for (conf/hydra/sweeper/tfx_optuna.yaml). Importing it stays light: Hydra imports every
plugin for `--help` too, so Optuna is imported only when a search starts.
"""

from tfx_hydra.hparams_search import sweeper as _search


class OptunaSweeper(_search.OptunaSearch):
    """`hydra/sweeper=tfx_optuna` (selected by `hparams_search=optuna`)."""
