"""Every training job of a plan against the hardware it names, before any job runs.

A job that the memory model says cannot fit would otherwise die hours into a cluster allocation
(or after its references ran). Systems with the context manager (the csp family and the
sequential reference) keep their layers in host memory and a bounded device cache when their
resident layers do not fit the device: the same results, bitwise, on a device that holds only a
few subnets' layers. Anything else that does not fit stops the plan with one line naming the job
and the bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from naspipe import systems
from naspipe.errors import UsageError
from naspipe.plan.cost import Estimate
from naspipe.plan.jobs import TrainJob

CACHE_ON = "cache.enabled=true"
Estimator = Callable[[TrainJob], Estimate]


class FitError(UsageError):
    """A job of the plan that cannot run: ``key`` is the workflow config key to change."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Fitted:
    job: TrainJob  # with cache.enabled=true added where the resident layers did not fit
    estimate: Estimate


def fit_jobs(jobs: list[TrainJob], estimator: Estimator) -> dict[str, Fitted]:
    """Run directory -> the job as it will run and its estimate; raises UsageError naming a job that
    cannot fit. Jobs differing only by seed share one estimate."""
    by_key: dict[tuple[object, ...], Fitted] = {}
    out = {}
    for job in jobs:
        key = (job.rule, job.space, job.system, job.stages, job.sets)
        if key not in by_key:
            by_key[key] = _fit(job, estimator)
        fitted = by_key[key]
        out[job.out] = Fitted(replace(fitted.job, seed=job.seed, out=job.out), fitted.estimate)
    return out


def _fit(job: TrainJob, estimator: Estimator) -> Fitted:
    try:
        estimate = estimator(job)
        if not estimate.fits and job.system in systems.with_capability("uses_cache") and CACHE_ON not in job.sets:
            cached = replace(job, sets=(*job.sets, CACHE_ON))
            with_cache = estimator(cached)
            if with_cache.fits:
                return Fitted(cached, with_cache)
    except UsageError as exc:
        raise FitError(config_key(job, str(exc)), f"job {job.name}: {exc}") from None
    if not estimate.fits:
        raise FitError("hardware", f"job {job.name}: {_needs(estimate)}")
    return Fitted(job, estimate)


def config_key(job: TrainJob, message: str) -> str:
    """The workflow config key behind a job's invalid settings (its message names the run setting)."""
    if "--stages" in message:
        return "ablation.stages" if job.rule == "ablation" else "stages"
    if "checkpoint_every" in message:
        return "search.checkpoint_every"
    if message.startswith(f"space {job.space!r}"):
        return f"spaces.{job.space}.options"
    if job.rule == "ablation" and "cache." in message:
        return "ablation"
    return "train_options"


def _needs(e: Estimate) -> str:
    if e.device_bytes > e.device_limit:
        return (f"needs {e.device_bytes / 1e9:.1f} GB on one device, more than the {e.device_limit / 1e9:.1f} GB "
                f"usable (batch {e.batch}; at most {e.max_batch} fits)")
    return f"needs {e.host_bytes / 1e9:.1f} GB of host memory, more than the {e.host_limit / 1e9:.1f} GB there"
