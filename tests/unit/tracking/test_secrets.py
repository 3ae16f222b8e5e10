"""secrets: credentials are masked before anything reaches MLflow."""

from __future__ import annotations

from tfx_hydra.tracking import flatten, mask_secrets


def test_flatten_and_mask_credentials():
    flat = flatten({"db": {"password": "hunter2", "host": "x"}, "tracking": {"uri": "http://bob:s3cr3t@host:5000"},
                    "api_key": "abc", "layers": [1, 2], "token": None})
    masked = mask_secrets(flat)
    assert masked == {"db.password": "***", "db.host": "x", "tracking.uri": "http://***@host:5000",
                      "api_key": "***", "layers": "[1, 2]", "token": "None"}
