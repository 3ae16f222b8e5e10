"""hparams_search=optuna end to end under the process launchers (joblib, submitit_local): each
trial in a process of its own, which opens the study and reports its epochs there.
"""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from tests.helpers.in_process import run_cli_in_process
from tests.helpers.search import assert_pruned_trials_look_pruned, parent_and_children, search, study_of

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("launcher", ["parallel", "local_gpus"])
def test_trials_report_and_prune_under_the_process_launchers(launcher, tmp_path, capfd):
    """joblib (hydra/launcher=parallel) and submitit_local: each trial in a process of its own, which
    opens the study and reports its epochs there. The idle time of a batch is measured. Under joblib
    four trials run as two batches of two, so the second batch can be pruned against the first's
    finished trials. Resuming a search is the launching process's own code, the same under every
    launcher: tests/e2e/test_hparams_search.py kills one with -9 and resumes it (the suite's time)."""
    workers = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"] if launcher == "parallel" else [
        "hydra/launcher=local_gpus", "hydra.launcher.gpus_per_node=0", "hydra.launcher.tasks_per_node=1"]
    two_batches = launcher == "parallel"
    trials = 4 if two_batches else 2
    # the launching process is this one; the trials run in the processes the launcher starts
    done = run_cli_in_process([*workers, *search(trials, "hparams_search.n_jobs=2")], cwd=tmp_path, multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = done.stdout + done.stderr + "".join(capfd.readouterr())  # Optuna's handler writes to the real stderr
    assert "A new study created" not in shown and "[I " not in shown, shown[-3000:]
    assert "A new study created in RDB with name: mlp-digits" in (tmp_path / "multirun" / "mlp-digits" /
                                                                  "sweep.log").read_text()  # Optuna's lines: there
    study = study_of(tmp_path)
    assert len(study.trials) == trials and {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert all(t.params not in [s.params for s in study.trials[:2]] for t in study.trials[2:])  # the sampler goes on
    client, parent, children = parent_and_children(tmp_path)
    assert len(children) == trials and parent.info.status == "FINISHED"
    assert parent.data.tags["sweep.launcher"].endswith("JoblibLauncher" if launcher == "parallel" else
                                                       "LocalLauncher")
    pruned = assert_pruned_trials_look_pruned(study, client, children)
    if two_batches:  # one batch of two has no finished trial to be pruned against
        assert pruned >= 1, [(t.number, t.state.name, t.params) for t in study.trials]
    else:  # each trial reported every epoch to the study from its own process: what the pruner reads
        assert [len(t.intermediate_values) for t in study.trials] == [3, 3]
    assert "sweep.idle_worker_seconds" in parent.data.metrics
    assert all(c.data.params["paths.output_dir"].endswith(f"trial_{c.data.tags['optuna.trial']}") for c in children)
