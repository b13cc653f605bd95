"""Tasks and schedules as data.

A task is one stage's piece of one subnet's step: ``F`` (forward), ``B`` (backward, which
includes recomputation when checkpointing is on) or ``U`` (the optimizer update of the
subnet's layers on that stage). It prints as ``<stage><kind><subnet>``: ``2F5`` is stage 2's
forward of subnet 5. A schedule is a list of tasks that can be printed, parsed back,
validated and replayed.
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


# Reading an enum member off its class (``Kind.FORWARD``) costs ~0.1 us in CPython 3.11, as much
# as a whole decision's arithmetic: the policies' per-task paths read these module constants.
FORWARD, BACKWARD, UPDATE = Kind.FORWARD, Kind.BACKWARD, Kind.UPDATE

_TASK_RE = re.compile(r"^(\d+)([FBU])(\d+)$")


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


def format_schedule(tasks: Iterable[Task]) -> str:
    return " ".join(str(t) for t in tasks)


def parse_schedule(text: str) -> list[Task]:
    return [Task.parse(word) for word in text.split()]
