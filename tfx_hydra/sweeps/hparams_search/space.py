"""The search space: `hydra.sweeper.params` (and sweep overrides on the command line) as Optuna
distributions, in Hydra's own override grammar.

    key: choice(64, 128, 256)        a categorical choice (also `key=64,128,256` on the command line)
    key: range(1, 10[, step])        integers 1..9 (Hydra's range stops before its end, as Python's does)
    key: interval(0.0, 0.5)          a float in [0.0, 0.5]
    key: tag(log, interval(1e-5, 1)) the same on a log scale

Distributions are compared as JSON (Optuna's own `distribution_to_json`): that is how the study
records its space, so a resumed study can say which key changed.
"""

from __future__ import annotations

import json
from typing import Any

from tfx_hydra.errors import ConfigError

EXAMPLE = "tag(log, interval(0.0001, 0.1))"


def parse(params: dict[str, Any], arguments: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(the space as {key: Optuna distribution}, the command's fixed overrides).
    A sweep override on the command line (`model.units=64,128`) joins the space; a plain one is
    passed to every trial as it is."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    space: dict[str, Any] = {}
    for key, value in (params or {}).items():
        space[str(key)] = distribution(parse_one(parser, f"{key}={value}"))
    fixed = []
    for override in parser.parse_overrides(arguments):
        if override.is_sweep_override():
            space[override.get_key_element()] = distribution(override)
        else:
            fixed.append(override.input_line)
    return space, fixed


def parse_one(parser, line: str):
    try:
        return parser.parse_override(line)
    except Exception as err:  # noqa: BLE001 - Hydra's grammar error, said with the key
        raise ConfigError(f"hydra.sweeper.params: cannot read '{line}': {err}",
                          fix=f"key: choice(a, b) | range(1, 10) | interval(0.0, 0.5) | {EXAMPLE}") from None


def distribution(override):
    """One override's value as an Optuna distribution; an empty or inverted range is refused here."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    key, value = override.get_key_element(), override.value()
    log = "log" in getattr(value, "tags", set())
    if isinstance(value, ChoiceSweep):
        if not value.list:
            raise ConfigError(f"{key}: choice() offers nothing to choose from.", fix=f"{key}: choice(64, 128)")
        return CategoricalDistribution([_plain(v) for v in value.list])
    if isinstance(value, IntervalSweep):
        low, high = float(value.start), float(value.end)
        _require_ordered(key, low, high, f"interval({low}, {high})", f"interval({high}, {low})")
        _require_positive_for_log(key, low, log)
        return FloatDistribution(low, high, log=log)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step if value.step is not None else 1
        if step <= 0 or start >= stop:
            raise ConfigError(f"{key}=range({start}, {stop}, {step}) is empty: it counts up from {start} "
                              f"in steps of {step} and stops before {stop}.", fix=f"{key}: range({min(start, stop)}, "
                              f"{max(start, stop) + 1}) (positive steps only)")
        values = list(_range(start, stop, step))
        if all(isinstance(v, int) for v in (start, stop, step)):
            return IntDistribution(values[0], values[-1], log=log, step=1 if log else step)
        return FloatDistribution(values[0], values[-1], step=None if log else step, log=log)
    raise ConfigError(f"{key}={override.input_line.split('=', 1)[-1]} is not a search-space expression.",
                      fix=f"{key}: choice(a, b) | range(1, 10) | interval(0.0, 0.5) | {EXAMPLE}")


def _range(start, stop, step):
    value = start
    while value < stop - 1e-12:
        yield value
        value = round(value + step, 12)


def _require_ordered(key: str, low: float, high: float, written: str, swapped: str) -> None:
    if low >= high:
        raise ConfigError(f"{key}={written} is empty or inverted: its low end must be below its high end.",
                          fix=f"{key}: {swapped}" if low > high else f"{key}: interval({low}, {low * 10 or 1.0})")


def _require_positive_for_log(key: str, low: float, log: bool) -> None:
    if log and low <= 0:
        raise ConfigError(f"{key}: a log-scale interval must start above 0 (it starts at {low}).",
                          fix=f"{key}: {EXAMPLE}")


def _plain(value: Any) -> Any:
    """Choices as Optuna stores them: None, bool, int, float or str."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def as_json(space: dict[str, Any]) -> dict[str, str]:
    from optuna.distributions import distribution_to_json

    return {key: distribution_to_json(d) for key, d in sorted(space.items())}


def changes(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between a study's recorded space and this command's, one line per key."""
    lines = [f"{k}: added" for k in now if k not in recorded]
    lines += [f"{k}: removed" for k in recorded if k not in now]
    lines += [f"{k}: was {_show(recorded[k])}, now {_show(now[k])}" for k in now
              if k in recorded and json.loads(recorded[k]) != json.loads(now[k])]
    return lines


def _show(distribution_json: str) -> str:
    """A recorded distribution (Optuna's JSON) as the preset writes it."""
    from optuna.distributions import json_to_distribution

    return shown(json_to_distribution(distribution_json))


def shown(distribution) -> str:
    """A key's distribution as the preset writes it: 'choice(64, 128)', 'interval(0.0, 0.5)',
    'tag(log, interval(0.0001, 0.01))', 'int(1..3)' (what the parent run's params show)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        return f"choice({', '.join(map(str, distribution.choices))})"
    if isinstance(distribution, IntDistribution):
        step = f" step {distribution.step}" if distribution.step != 1 else ""
        text = f"int({distribution.low}..{distribution.high}{step})"
    else:
        text = f"interval({distribution.low}, {distribution.high})"
    return f"tag(log, {text})" if distribution.log else text


def override(key: str, value: Any) -> str:
    """A trial's value as the override that gives it to the job."""
    if value is None:
        return f"{key}=null"
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    if isinstance(value, float):
        return f"{key}={value!r}"
    return f"{key}={value}"
