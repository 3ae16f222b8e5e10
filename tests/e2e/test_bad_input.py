"""Every mistake the first-experiment issue lists: one readable message, exit != 0, no FINISHED run."""

from __future__ import annotations

import pytest

from tests.helpers import free_ports, mlflow_runs, run_cli

pytestmark = pytest.mark.slow


CASES = {
    "unknown data option": (["data=imagenet"], ["Could not find 'data/imagenet'", "Available options in 'data':",
                                                 "digits", "mnist", "synthetic"]),
    "unknown hardware option": (["hardware=tpu9000"], ["Could not find 'hardware/tpu9000'", "a100", "auto", "cpu"]),
    "epochs not a number": (["trainer.epochs=abc"], ["trainer.epochs got 'abc'", "expected an integer",
                                                     "Fix: trainer.epochs=5"]),
    "negative epochs": (["trainer.epochs=-1"], ["trainer.epochs=-1 is out of range", "Fix: trainer.epochs=5"]),
    "missing data.path": (["data=mnist", "data.path=/nonexistent/mnist.npz"],
                          ["data.path=/nonexistent/mnist.npz does not exist"]),
    "strict hardware mismatch": (["hardware=a100", "hardware.strict=true"],
                                 ["HardwareMismatch: hardware=a100 expects 1 GPU matching 'A100' with at least 39 GiB; found no GPU",
                                  "Fix: use hardware=auto"]),
    "unreachable tracking server": ([f"tracking.uri=http://127.0.0.1:{free_ports(1)[0]}"],
                                    ["TrackingError: tracking.uri=http://127.0.0.1:", "is unreachable",
                                     "tracking=none"]),
    "unknown model argument": (["+model.width=3"], ["cannot build 'model' from its config",
                                                    "unexpected keyword argument 'width'"]),
    "unknown export option": (["export=coreml"], ["Could not find 'export/coreml'", "tflite", "onnx", "tfjs"]),
    # In a list Hydra names the bad option but does not list the others (its message, before our code runs).
    "unknown export in a list": (["export=[savedmodel,coreml]"], ["Could not load 'export/coreml'"]),
    "bad tflite quantization": (["export=[tflite]", "export.tflite.quantization=int4", "export.strict=true"],
                                ["export.tflite.quantization=int4 is not one of: none, float16, dynamic_range, int8"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gives_one_clear_message(name, tmp_path):
    overrides, expected = CASES[name]
    done = run_cli([*overrides, "trainer.epochs=1"] if "epochs" not in name else overrides, cwd=tmp_path)
    assert done.returncode != 0
    for text in expected:
        assert text in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert [r.info.status for r in mlflow_runs(tmp_path) if r.info.status in ("FINISHED", "RUNNING")] == []


def test_a_corrupt_npz_fails_the_started_run(tmp_path):
    bad = tmp_path / "mnist.npz"
    bad.write_bytes(b"PK\x03\x04 truncated zip")
    done = run_cli(["data=mnist", f"data.path={bad}"], cwd=tmp_path)
    assert done.returncode == 1
    assert f"DataError: data.path={bad} is not a valid .npz file" in done.stderr
    assert "Traceback" not in done.stderr
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"].startswith("DataError: data.path=")
