"""Hydra finds search-path plugins only in the `hydra_plugins` namespace: this one adds a user's
project (tfx_hydra.settings.project: the [tool.tfx_hydra] table of the project's pyproject.toml) to
tfx_hydra's config search path, after tfx_hydra's own configs, and puts the project's code on
sys.path. Other Hydra apps in the same environment are left alone. Light on purpose: Hydra imports
every plugin for `--help` too.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from tfx_hydra.settings.compose import CONFIG_MODULE
from tfx_hydra.settings.project import activate, find_project

OUR_CONFIGS = f"pkg://{CONFIG_MODULE}"


class ProjectSearchPath(SearchPathPlugin):
    """The user's project's config folder, for tfx_hydra's app and its compose calls."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if not any(element.path == OUR_CONFIGS for element in search_path.get_path()):
            return  # another Hydra app
        project = find_project()
        if project is None:
            return
        activate(project)
        search_path.append(provider="tfx_hydra-project", path=project.search_path)
