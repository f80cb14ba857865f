"""How a job's trials talk to Ray: reports (metrics, with a checkpoint or not) and the latest checkpoint
to continue from. Two executors (resources.executor):

- 'train': the trials run in the one worker of a Ray Train job (`ray.train.report`,
  `ray.train.get_checkpoint`); Ray Train names each checkpoint folder as asked ('<trial>.epoch_XXXX').
- 'tune' (the default, DEFAULT_EXECUTOR: measured faster on a GPU, docs/orchestration.md): the trials run
  in Ray Tune's trial process itself, a function trainable holding the trial's
  CPUs and GPU (`ray.tune.report`, `ray.tune.get_checkpoint`): no Ray Train controller, worker group or
  worker process to start. Tune names checkpoint folders itself, so the name a checkpoint would have had
  is written into it (OWNER_FILE) and read back from there.

A checkpoint's name says whose it is and its epoch (trial.checkpoint_epoch): a pack's trials share one
Ray run, and a trial continues only from its own checkpoint.

Ray gets of a report only what the driver reads (DRIVER_KEYS: the progress bar, the retries, the early
report, storage mode's sync). An epoch's metrics (every head's estimates: 60 heads, about 700 numbers) go
to MLflow and the trial's files; handed to Ray as well, Ray Tune's logger callbacks wrote each of them on
the driver's event loop at every report (its TensorBoard writer: 0.27 s a report on 2 cores, 0.5-0.9 s on
an H200 machine running 8 trials, while the loop could start no trial; docs/performance.md).
"""
from __future__ import annotations

from pathlib import Path

EXECUTORS = ("train", "tune")
DEFAULT_EXECUTOR = "tune"      # resources.executor unset
TUNE_REPORT_S = 10.0           # under 'tune', an epoch report waits for Tune's loop to take it: at most one this often


def executor_of(resources) -> str:
    """resources.executor, or the default when unset."""
    return getattr(resources, "executor", None) or DEFAULT_EXECUTOR
OWNER_FILE = "ray_checkpoint_name"     # in a checkpoint reported to Tune: the name Ray Train would have given it
# what the driver's Tune callbacks read of a result (tune.py, progress.py): the rest of a report stays out of Ray
DRIVER_KEYS = frozenset({"epoch", "member", "head_epochs", "member_finished", "finished", "skipped",
                         "input_error", "oom"})


def for_ray(metrics: dict) -> dict:
    """The part of a report Ray gets: its DRIVER_KEYS (module doc)."""
    return {k: v for k, v in metrics.items() if k in DRIVER_KEYS}


class RaySession:
    def __init__(self, executor: str | None = "train"):
        executor = executor or DEFAULT_EXECUTOR
        if executor not in EXECUTORS:
            raise ValueError(f"resources.executor={executor!r}: expected one of {', '.join(EXECUTORS)}")
        self.executor = executor

    def _api(self):
        if self.executor == "train":
            import ray.train
            return ray.train
        import ray.tune
        return ray.tune

    def report(self, metrics: dict, ckpt_dir: Path | None = None, name: str | None = None) -> None:
        """`metrics` to Ray (their DRIVER_KEYS: module doc), with the checkpoint folder `ckpt_dir` named
        `name` when given."""
        api = self._api()
        metrics = for_ray(metrics)
        if ckpt_dir is None:
            api.report(metrics)
        elif self.executor == "train":
            api.report(metrics, checkpoint=api.Checkpoint.from_directory(str(ckpt_dir)), checkpoint_dir_name=name)
        else:
            (Path(ckpt_dir) / OWNER_FILE).write_text(str(name))
            api.report(metrics, checkpoint=api.Checkpoint.from_directory(str(ckpt_dir)))

    def latest(self) -> tuple[object | None, str | None]:
        """(Ray's latest checkpoint of this job or None, its name)."""
        ckpt = self._api().get_checkpoint()
        if ckpt is None:
            return None, None
        return ckpt, checkpoint_name(ckpt)


def checkpoint_name(ckpt) -> str:
    """The name of a Ray checkpoint: its owner file's content when it has one (a Tune checkpoint), else its
    folder's name (Ray Train names folders as asked)."""
    base = Path(ckpt.path).name
    if "epoch_" in base:       # Ray Train's: named as asked (no download of a checkpoint in remote storage)
        return base
    with ckpt.as_directory() as d:
        f = Path(d) / OWNER_FILE
        if f.is_file():
            return f.read_text().strip()
    return base
