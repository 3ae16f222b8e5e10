"""paths: folders a run will write to, checked before it starts (a typo in a path must not
surface after the last epoch)."""

from __future__ import annotations

import os

from tfx_hydra.errors import ConfigError


def require_writable_folder(key: str, value: str, folder: str, create: bool) -> None:
    """`folder` (where `key`=`value` writes) exists and is writable, or (create=True) its nearest
    existing parent is a writable folder."""
    path = os.path.abspath(os.path.expanduser(folder))
    existing = path
    while create and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "is a file" if os.path.exists(existing) else "does not exist"
        raise ConfigError(f"{key}={value} cannot be written: {existing} {what}.", fix=f"{key}=<a writable folder>")
    if not os.access(existing, os.W_OK):
        raise ConfigError(f"{key}={value} cannot be written: {existing} is not writable.",
                          fix=f"{key}=<a writable folder>")
