"""The scheduling core: tasks, the CSP version rule, stage policies, and a virtual-time driver.

Pure Python with no torch import, so it is unit-testable in microseconds and is shared
verbatim by the multi-process runtime and the simulator.
"""

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import POLICY_NAMES, PolicyOptions, StagePolicy, make_policy
from naspipe.scheduling.task import Kind, Task, format_schedule, parse_schedule
from naspipe.scheduling.versions import VersionTable

__all__ = [
    "Kind",
    "POLICY_NAMES",
    "PipelinePlan",
    "PolicyOptions",
    "StagePolicy",
    "Task",
    "VersionTable",
    "format_schedule",
    "make_policy",
    "parse_schedule",
]
