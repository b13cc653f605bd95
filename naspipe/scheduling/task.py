"""Tasks and schedules as data.

A task is one stage's piece of one subnet's step: ``F`` (forward), ``B`` (backward, which
includes recomputation when checkpointing is on) or ``U`` (the optimizer update of the
subnet's layers on that stage). It prints as ``<stage><kind><subnet>``: ``2F5`` is stage 2's
forward of subnet 5. A schedule is a list of tasks that can be printed, parsed back,
validated and replayed.

A micro-batched schedule (``micro_batches`` > 1, or a split backward) uses :class:`MicroTask`,
which adds the micro-batch index and the kind ``W`` (the weight gradient of a split backward,
whose ``B`` then computes only the input gradient): ``2F5.1`` is stage 2's forward of micro-batch
1 of subnet 5, ``1W3.0`` a weight-gradient task, ``0U7`` an update (once per subnet and stage,
after every micro-batch; it prints without a micro-batch).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from enum import StrEnum
from functools import partial
from typing import NamedTuple, cast


class Kind(StrEnum):
    """Prints as its letter: ``str(Kind.FORWARD) == "F"``."""

    FORWARD = "F"
    BACKWARD = "B"
    UPDATE = "U"
    WEIGHT = "W"  # a split backward's weight-gradient task (micro-batched schedules only)


# Reading an enum member off its class (``Kind.FORWARD``) costs ~0.1 us in CPython 3.11, as much
# as a whole decision's arithmetic: the policies' per-task paths read these module constants.
FORWARD, BACKWARD, UPDATE, WEIGHT = Kind.FORWARD, Kind.BACKWARD, Kind.UPDATE, Kind.WEIGHT

_TASK_RE = re.compile(r"^(\d+)([FBU])(\d+)$")
_MICRO_RE = re.compile(r"^(\d+)(?:([FBW])(\d+)\.(\d+)|U(\d+))$")


class Task(NamedTuple):
    """Immutable and hashable; a NamedTuple because policies create one per decision."""

    kind: Kind
    subnet: int
    stage: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.subnet}"

    @classmethod
    def parse(cls, text: str) -> Task:
        match = _TASK_RE.match(text.strip())
        if match is None:
            raise ValueError(f"not a task: {text!r} (expected <stage><F|B|U><subnet>, e.g. 2F5)")
        stage, kind, subnet = match.groups()
        return cls(Kind(kind), int(subnet), int(stage))


new_task = cast(Callable[[tuple[Kind, int, int]], Task], partial(tuple.__new__, Task))
"""``new_task((kind, subnet, stage)) == Task(kind, subnet, stage)``, without the NamedTuple's
argument-parsing ``__new__`` (half the price; policies create one task per decision)."""


class MicroTask(NamedTuple):
    """A task of a micro-batched schedule: :class:`Task` plus the micro-batch (0 for an update)."""

    kind: Kind
    subnet: int
    stage: int
    micro: int = 0

    def __str__(self) -> str:
        if self.kind is UPDATE:
            return f"{self.stage}U{self.subnet}"
        return f"{self.stage}{self.kind.value}{self.subnet}.{self.micro}"

    @classmethod
    def parse(cls, text: str) -> MicroTask:
        match = _MICRO_RE.match(text.strip())
        if match is None:
            raise ValueError(f"not a micro-batch task: {text!r} (expected <stage><F|B|W><subnet>.<micro>, "
                             "e.g. 2F5.1, or <stage>U<subnet>)")
        stage, kind, subnet, micro, updated = match.groups()
        if updated is not None:
            return cls(UPDATE, int(updated), int(stage))
        return cls(Kind(kind), int(subnet), int(stage), int(micro))


AnyTask = Task | MicroTask


def format_schedule(tasks: Iterable[AnyTask]) -> str:
    return " ".join(str(t) for t in tasks)


def parse_schedule(text: str) -> list[Task]:
    return [Task.parse(word) for word in text.split()]


def parse_micro_schedule(text: str) -> list[MicroTask]:
    return [MicroTask.parse(word) for word in text.split()]
