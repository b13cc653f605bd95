"""Moved to :mod:`naspipe.runplan.job` (the torch-free run plan both executors share); kept for one release."""

from __future__ import annotations

from naspipe.runplan.job import Job, build_job, check_bulk_boundary, layer_costs, position_costs

__all__ = ["Job", "build_job", "check_bulk_boundary", "layer_costs", "position_costs"]
