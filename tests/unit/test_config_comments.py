"""conf/config.yaml's comments list each group's options: they must be the files in conf/<group>/,
so the list a user reads first never drifts from what exists."""

from __future__ import annotations

import re

from tests.helpers import REPO

DEFAULT_LINE = re.compile(r"^\s+- (?P<group>\w+): \S+\s+# (?P<options>[^(]*)")


def listed_options() -> dict[str, list[str]]:
    listed = {}
    for line in (REPO / "conf" / "config.yaml").read_text().splitlines():
        match = DEFAULT_LINE.match(line)
        if match:
            listed[match["group"]] = [o.strip() for o in match["options"].split("|") if o.strip()]
    return listed


def test_every_group_in_the_defaults_list_has_its_options_listed_as_they_are_on_disk():
    listed = listed_options()
    assert set(listed) == {"hardware", "precision", "strategy", "data", "model", "optimizer", "trainer", "tracking",
                           "export", "task", "cv", "lr_schedule", "experiment", "hparams_search", "debug"}
    for group, options in listed.items():
        on_disk = sorted(path.stem for path in (REPO / "conf" / group).glob("*.yaml"))
        assert sorted(options) == on_disk, \
            f"conf/config.yaml lists {group} options {options}; conf/{group}/ has {on_disk}"
        assert len(set(options)) == len(options), f"{group} lists an option twice"
