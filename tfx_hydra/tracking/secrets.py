"""secrets: credentials never land in MLflow.

Config keys that look like credentials are masked in params and tags, `user:password@` in
URIs everywhere, and `key=value` overrides and `key: value` YAML lines in the saved configs.
"""

from __future__ import annotations

import os
import re

# Keys whose values never reach MLflow.
SECRET_KEY = re.compile(r"pass(?:word|wd)?|token|secret|credential|api[_-]?key|private[_-]?key|access[_-]?key"
                        r"|[_-]key\b", re.IGNORECASE)  # aws_key, encryption-key; not resume.key or key_path
URI_CREDENTIALS = re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+@")
MASK = "***"


def mask_uri(value: str) -> str:
    """http://user:pw@host -> http://***@host"""
    return URI_CREDENTIALS.sub(MASK + "@", value)


# key=value in an override or a command line, whose key's last part looks like a credential
SECRET_ASSIGNMENT = re.compile(r"(?P<key>[\w.+~/-]*?(?:" + SECRET_KEY.pattern + r")[\w-]*)=(?P<value>[^\s,\]'\"]+)",
                               re.IGNORECASE)
# `key: value` in YAML, whose key looks like a credential
SECRET_YAML_LINE = re.compile(r"^(?P<lead>\s*(?:-\s+)?)(?P<key>[\w.-]*(?:" + SECRET_KEY.pattern +
                              r")[\w.-]*):\s+(?P<value>\S.*)$", re.IGNORECASE)


def mask_text(text: str) -> str:
    """Credentials inside free text: `api_token=x` overrides, `password: x` YAML lines, user:pw@ URIs."""
    lines = []
    for line in text.splitlines(keepends=True):
        found = SECRET_YAML_LINE.match(line.rstrip("\n"))
        if found and found["value"].strip() not in ("null", "None", "''", '""', MASK, f"'{MASK}'"):
            line = f"{found['lead']}{found['key']}: '{MASK}'" + ("\n" if line.endswith("\n") else "")
        line = SECRET_ASSIGNMENT.sub(lambda m: f"{m['key']}={MASK}", line)
        lines.append(mask_uri(line))
    return "".join(lines)


def mask_secrets(flat: dict[str, str]) -> dict[str, str]:
    """Mask values whose key looks like a credential, and credentials inside other values."""
    return {key: MASK if SECRET_KEY.search(key.rsplit(".", 1)[-1]) and value not in ("None", "") else mask_text(value)
            for key, value in flat.items()}


def mask_files(folder: str) -> None:
    """Mask credentials in place in every YAML/text file of `folder` (Hydra's saved configs)."""
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and name.endswith((".yaml", ".yml", ".txt", ".json")):
            with open(path, encoding="utf-8") as source:
                text = source.read()
            masked = mask_text(text)
            if masked != text:
                with open(path, "w", encoding="utf-8") as target:
                    target.write(masked)
