"""failures: what a fit that failed is said as -- the user's code's error with its own frames, the device out of
memory with the knobs that trade memory for speed."""

from __future__ import annotations

from tfx_hydra.errors import TrainingError
from tfx_hydra.settings.compose import users_code_error
from tfx_hydra.settings.schemas import TrainerConfig
from tfx_hydra.strategy import BatchPlan


def raise_if_users(err: Exception) -> None:
    """An error raised by the user's code during training, said as a build error is (its frames only); the run
    ends FAILED with its backup, so the same command resumes once the code is fixed. Else nothing: the caller
    lets the error go on with its whole traceback (ours or a library's)."""
    said = users_code_error(err, "training")
    if said is not None:
        raise TrainingError(said, fix="fix your code (the frames above are its own); the run's backup is kept: the "
                            "same command resumes from its last finished epoch") from None


def out_of_memory(err, trainer: TrainerConfig, plan: BatchPlan | None) -> TrainingError:
    """The device ran out of memory: say which knobs trade memory for speed."""
    batch = plan.global_size if plan else trainer.batch_size
    per_replica = f" ({plan.per_replica:g} per replica)" if plan else ""
    smaller = max(1, int(batch) // 2)
    return TrainingError(
        f"the device ran out of memory at trainer.batch_size={batch}{per_replica}: {err.message.splitlines()[0]}",
        fix=f"trainer.batch_size={smaller} trainer.grad_accum_steps={trainer.grad_accum_steps * 2} (same "
        "effective batch in less memory), hardware.memory_growth=true (share the GPU), or precision=mixed/bf16",
    )
