"""settings: one home for what a run is told and how it is checked, before TensorFlow or MLflow loads.

    compose.py   the config a run gets from its overrides (`compose`), the objects its nodes describe
                 (`build`), and composition's errors said in the user's words
    project.py   a user's own project: its [tool.tfx_hydra] table, config folder and code
    schemas.py   the dataclasses of the settings that are not objects (trainer, hardware, tracking, ...)
    checked.py   `validate(cfg) -> Settings`: the settings sections merged into their schemas and checked
    checks.py    the one vocabulary of checks (require_choice, require_bool, require_positive, ...)

The mistakes they find are tfx_hydra/errors.py's (ConfigError, DataError, ...): a room of its own below this
one, since every step raises them and the vocabulary this home checks with (metric names, precision policies)
raises them too.

Everything here imports Hydra and OmegaConf at most: preflight, `--help` and `--cfg job` use it.
"""
