"""What every stage policy shares: the event interface and id-ordered registration.

A policy instance lives on one stage and decides, from events alone, which task that stage
runs next. Events are the same in the runtime and in the virtual-time driver:

- ``admit(y)``       (stage 0 only) subnet ``y`` enters the pipeline; its input is there.
- ``forward_arrived(y)``  the activation of ``y`` from the previous stage is here.
- ``backward_arrived(y)`` the gradient of ``y`` from the next stage (on the last stage:
  ``y``'s own forward, which produced the loss) is here.
- ``completed(task)``  the stage finished ``task``.

Subnets are *registered* on a stage in stream order, up to the highest id seen there, so
that a policy always knows every earlier subnet that may use a layer even if that subnet
has not reached this stage yet (later subnets can overtake earlier ones).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Self

from naspipe.scheduling.mirror import Mirror
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.replicas import ReplicaLayout
from naspipe.scheduling.task import FORWARD, Kind, Task, new_task

PRIORITIES = ("critical", "fifo")


@dataclass(frozen=True)
class PolicyOptions:
    """Knobs shared by policies.

    ``max_inflight``: subnets admitted into the pipeline and not yet finished on stage 0
    (bounds stashed activations and the context cache). ``bulk_size``: subnets per BSP bulk.
    ``shared_window``: subnets per shared-layer update when the shared layers are windowed.
    ``micro_batches``, ``split_backward`` and ``priority`` shape a micro-batched schedule
    (:mod:`naspipe.scheduling.policies.micro`): each subnet's batch in that many parts, the
    backward split into input-gradient and weight-gradient tasks, and how a stage orders its
    ready tasks (``critical``: an update a later subnet waits for, then backwards, forwards, weight tasks
    and the other updates; ``fifo``: update, weight, backward, forward). ``micro_batches`` 1 without a split
    is the paper's schedule.
    ``replicas``: processes per stage (R); each runs ``parts_here`` = m / R of a subnet's parts, and its update
    waits for the replicas' ordered sum of the parts' gradients (:meth:`MicroCSP.reduced`).
    ``one_holder``: a micro-batched stage lets one subnet at a time keep its layers from its first
    backward part (the last stage, which keeps its forward state: its first forward part) to its
    update, as the context manager pins them (on with the cache; see ``MicroCSP``).
    """

    max_inflight: int = 4
    bulk_size: int = 1
    shared_window: int = 8  # W of shared_policy windowed (naspipe.scheduling.windows)
    micro_batches: int = 1
    split_backward: bool = False
    priority: str = "critical"
    one_holder: bool = False
    replicas: int = 1

    @property
    def micro_batched(self) -> bool:
        """Whether the run uses micro-batch tasks (:class:`~naspipe.scheduling.task.MicroTask`): a replicated stage's
        update waits for the replicas' sum, which only the micro-batched policy knows of."""
        return self.micro_batches > 1 or self.split_backward or self.replicas > 1

    @property
    def parts_here(self) -> int:
        """The parts of each subnet that one replica of a stage runs (m / R; m without replicas)."""
        return ReplicaLayout(self.micro_batches, self.replicas).parts_per_replica

    def __post_init__(self) -> None:
        if self.max_inflight < 1:
            raise ValueError(f"max_inflight must be >= 1, got {self.max_inflight}")
        if self.bulk_size < 1:
            raise ValueError(f"bulk_size must be >= 1, got {self.bulk_size}")
        if self.shared_window < 1:
            raise ValueError(f"shared_window must be >= 1, got {self.shared_window}")
        if self.micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {self.micro_batches}")
        ReplicaLayout(self.micro_batches, self.replicas)  # R >= 1 dividing m (ValueError naming both)
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, got {self.priority!r}")


class StagePolicy(ABC):
    name: ClassVar[str]

    # What the system is, for everyone who must not re-decide it (read by naspipe.systems; the
    # workflow, the report, the config checks and the simulator ask that registry, never a name list).
    label: ClassVar[str]  # how the paper and the report call it
    report_order: ClassVar[int]  # where it appears in tables and legends (the reference first)
    uses_cache: ClassVar[bool] = False  # may run with the context manager (host store + device cache)
    causal: ClassVar[bool] = False  # the makespan's lower bound adds the CSP edge (an update -> next user's access)
    ablation: ClassVar[str | None] = None  # NASPipe minus this part (paper Figure 6's variant name)

    # What the policy asks of the executors (the runtime's worker and the simulator read these).
    stash_gradients: ClassVar[bool] = False  # keep each subnet's gradients apart until its update
    stash_weights: ClassVar[bool] = False  # backward on the parameter version its forward read
    recompute: ClassVar[bool | None] = None  # None: as configured; True/False: forced
    swap_parameters: ClassVar[bool] = False  # layers live in host memory, fetched per task
    bulk_synchronous: ClassVar[bool] = False  # drains (checkpoints, resumes) only at bulk boundaries
    predictor: ClassVar[bool] = True  # with the device cache on: prefetch the predicted next tasks' layers
    mirroring: ClassVar[bool] = False  # keeps global versions and sends mirrors (per-subnet partitions)
    # honours the windowed shared-layer rule (naspipe.scheduling.windows): every system of the registry
    # does (the baselines too, so that cross-system comparisons share one shared-layer semantics)
    windowed_shared: ClassVar[bool] = False

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        if plan.mirrored and plan.num_stages > 1 and not self.mirroring:
            raise ValueError(f"system {self.name!r} cannot run per-subnet partitions (no mirroring)")
        self.stage = stage
        self.plan = plan
        self.options = options
        self.speculative = False  # a predictor's copy: decides like the original, sends nothing
        self.is_first = stage == 0
        self.is_last = stage == plan.num_stages - 1
        self._registered = 0  # subnets [0, _registered) are registered here
        self.admitted = 0  # stage 0: subnets [0, admitted) have entered the pipeline
        self.finished = 0  # subnets whose last task on this stage is done
        self._arrived_below = 0  # every forward with a lower id has arrived here (for the predictor)
        self._arrived_ahead: set[int] = set()  # forwards at or above it that overtook earlier ones
        self._awaiting_backward: dict[int, None] = {}  # forwards done here, gradient not back yet, in order
        # Messages so far (arrivals, admissions, mirrors, stream ends, resumes: every change from outside but
        # the executor's completed/next_task). Unchanged since a prediction: the predictor may shift its answer.
        self.messages = 0

    def clone(self) -> Self:
        """A copy to run ahead without touching this policy (the predictor's); the plan is shared."""
        other = copy.deepcopy(self, {id(self.plan): self.plan, id(self.options): self.options})
        other.speculative = True
        return other

    def _clone_base(self) -> Self:
        """A shallow copy with the base class's mutable state copied (for a fast :meth:`clone`)."""
        other = copy.copy(self)
        other._arrived_ahead = set(self._arrived_ahead)
        other._awaiting_backward = dict(self._awaiting_backward)
        other.speculative = True
        return other

    def resume_at(self, start: int) -> None:
        """Continue a run whose subnets ``< start`` are finished (from a checkpoint)."""
        if self._registered or self.admitted or self.finished:
            raise RuntimeError("resume_at must be called before any event")
        self.messages += 1
        self._registered = self.finished = start
        self.admitted = self._arrived_below = start

    def stream_ends_at(self, total: int) -> None:  # noqa: B027 - optional hook
        """Subnets ``>= total`` never come (the run's end or the next drain point).

        Policies with a cool-down (1F1B) or a last partial bulk need it; others ignore it.
        """

    # -- events -------------------------------------------------------------
    def admit(self, subnet: int) -> None:
        if not self.is_first or subnet != self.admitted:
            raise RuntimeError(f"stage {self.stage}: cannot admit subnet {subnet} (next is {self.admitted})")
        self.admitted += 1
        self.forward_arrived(subnet)

    def forward_arrived(self, subnet: int) -> None:
        self.messages += 1
        while self._registered <= subnet:  # _register_through, inlined (once per forward)
            self._on_register(self._registered)
            self._registered += 1
        if subnet == self._arrived_below and not self._arrived_ahead:  # in order: _note_arrival's common case
            self._arrived_below = subnet + 1
        else:
            self._note_arrival(subnet)
        self._on_forward(subnet)

    def backward_arrived(self, subnet: int) -> None:
        self.messages += 1
        self._awaiting_backward.pop(subnet, None)
        self._on_backward(subnet)

    def mirror_arrived(self, layer: int, version: int) -> None:
        """A newer state of ``layer`` (written on another stage) is here."""
        raise RuntimeError(f"system {self.name!r} does not mirror layers")

    def take_mirrors(self) -> list[Mirror]:
        """Mirrors to send since the last call (after updates, or a later stream end)."""
        return []

    def completed(self, task: Task) -> None:
        kind = task.kind
        if kind is FORWARD and not self.is_last:
            self._awaiting_backward[task.subnet] = None
        self._on_completed(task)
        if kind is self.final_kind:
            self.finished += 1

    def completed_then_next(self, task: Task) -> Task | None:
        """:meth:`completed`, then :meth:`next_task`, in one call.

        An executor that asks a stage for its next task right after the stage's task ends, with no
        other event of that stage in between (the simulator's engine, ~19 M times at 64 x 100,000),
        calls this instead of the two. A policy may override it to decide in one pass (CSP does); it
        must decide exactly as the two calls would."""
        self.completed(task)
        return self.next_task()

    def pending_arrivals(self, end: int) -> Iterator[int]:
        """Forwards below ``end`` that have not reached this stage yet, in id order (the predictor's future)."""
        return (y for y in range(self._arrived_below, end) if y not in self._arrived_ahead)

    def awaiting_backward(self) -> list[int]:
        """Subnets whose forward ran here and whose gradient has not come back, in forward order."""
        return list(self._awaiting_backward)

    def _note_arrival(self, subnet: int) -> None:
        if subnet != self._arrived_below:
            self._arrived_ahead.add(subnet)
            return
        self._arrived_below += 1
        while self._arrived_below in self._arrived_ahead:
            self._arrived_ahead.remove(self._arrived_below)
            self._arrived_below += 1

    # -- decisions ----------------------------------------------------------
    @property
    def inflight(self) -> int:
        return self.admitted - self.finished

    @abstractmethod
    def may_admit(self, subnet: int) -> bool:
        """Stage 0: may ``subnet`` (the next in the stream) enter the pipeline now?"""

    @abstractmethod
    def next_task(self) -> Task | None:
        """Pop the task to run now, or None when nothing may run."""

    # -- hooks for subclasses ----------------------------------------------
    final_kind: ClassVar[Kind] = Kind.UPDATE

    def _register_through(self, subnet: int) -> None:
        while self._registered <= subnet:
            self._on_register(self._registered)
            self._registered += 1

    def _on_register(self, subnet: int) -> None:  # noqa: B027 - optional hook
        pass

    # The hooks of the default event methods: a policy defines each one unless it overrides that
    # event method as a whole (CSP and GPipe do, one call less per task on the simulator's hot path).
    def _on_forward(self, subnet: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} defines neither forward_arrived nor _on_forward")

    def _on_backward(self, subnet: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} defines neither backward_arrived nor _on_backward")

    def _on_completed(self, task: Task) -> None:
        raise NotImplementedError(f"{type(self).__name__} defines neither completed nor _on_completed")

    def task(self, kind: Kind, subnet: int) -> Task:
        return new_task((kind, subnet, self.stage))
