"""What a running sweep has started, ended however the sweep ends (done, failed, Ctrl-C or SIGTERM).

`sweep.execute` records here, stage by stage, what must not outlive the sweep: the services started
before Ray (MPS), Ray when the sweep started it, the prepare stage's thread, MLflow runs that must not
stay RUNNING, and the run directory's driver lock (taken before this record exists). `end` ends them.
"""
from __future__ import annotations

import contextlib

from orchestration.rundir import release_driver
from orchestration.stages.plan import SweepPlan


class Teardown:
    """The sweep's started pieces; each stage sets its own attribute as soon as the piece exists, so an
    interruption at any point ends exactly what was started."""

    def __init__(self, plan: SweepPlan) -> None:
        self.plan = plan
        self.services = contextlib.ExitStack()   # MPS: started before Ray, stopped after it
        self.ray_started = False                 # Ray was started by this sweep (not connected to)
        self.runs = None        # the sweep's MLflow runs (tracking.SweepRuns), until they are closed
        self.parent = None      # (MLflow URI, parent run id) while the parent run is open
        self.points = None      # the point runs being created beside the trials (track.PointsStage)
        self.prep = None        # the prepare stage (watched on a thread when overlapped)

    def tracking_closed(self) -> None:
        """The runs were closed by the sweep's own end: nothing left to mark KILLED."""
        self.runs = self.parent = None

    def end(self) -> None:
        """Each step runs even if an earlier one fails or a second Ctrl-C/SIGTERM interrupts it:
        MPS stops after Ray, and the run directory's lock is always released last."""
        from orchestration.report.figure_pool import discard_prestarted
        from orchestration.stages.track import abort_tracking
        from orchestration.stages.tune import wait_prestarted
        wait_prestarted(self.plan.rd.root)
        discard_prestarted()        # the report's drawing processes, when it was never built
        try:
            try:
                if self.runs is None and self.points is not None:     # interrupted: close the point runs made so far
                    self.runs = self.points.stop()
                abort_tracking(self.plan, self.runs, self.parent)
            finally:
                try:
                    if self.prep is not None:
                        self.prep.stop()     # its thread must not outlive the sweep (nor this Ray)
                finally:
                    if self.ray_started:
                        import ray
                        ray.shutdown()
        finally:
            try:
                self.services.close()
            finally:
                release_driver(self.plan.rd)
