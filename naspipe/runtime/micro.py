"""A subnet's batch in parts (``micro_batches`` = m): how it is cut, what each part's loss weighs, how long a
stage keeps the parts, which part a task runs. m = 1 is one part, the whole batch, and a subnet-level task of
the paper's schedule runs it.

What the sequential reference computes with ``micro_batches`` = m (the same at any stage count, so csp
equals it bit for bit; the arithmetic is :mod:`naspipe.runtime.executor`'s):

- **Parts.** Subnet ``y``'s batch (a pure function of (seed, y)) is cut into m parts along dimension 0 of
  every input and target by :func:`torch.tensor_split`, which depends on m and the batch only. Part ``j``
  runs forward with its own dropout masks (:class:`~naspipe.space.base.LayerContext` ``micro``; part 0
  keeps the unsplit seeds) and its own batch-norm statistics (:class:`~naspipe.space.ops.common.BatchNorm`).
- **Loss.** Part ``j``'s loss is the space's loss on the part times ``rows_j / rows``: the parts' losses
  then sum to the sample-weighted mean, which is the whole batch's mean loss whenever every sample weighs
  the same in it (toy, cv; nlp averages over non-padding tokens, so there it is the mean of the parts'
  token means weighted by their samples, as GPipe's micro-batches give). The subnet's reported loss is the
  scaled losses summed in part order (float32). m = 1 is not scaled.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from naspipe.config.validation import check_parts as check_parts  # launch checks parts from here; torch-free there
from naspipe.errors import UsageError
from naspipe.scheduling.task import UPDATE, AnyTask, MicroTask
from naspipe.space.base import Batch


def part_of(task: AnyTask) -> int:
    """The part a task runs: a subnet-level task (the paper's schedule, m = 1) runs part 0 of 1."""
    return task.micro if isinstance(task, MicroTask) else 0


def part_label(task: AnyTask) -> str:
    """How traces name a task's subnet and part: ``5`` for a subnet-level task (spans ``F5``, ``B5``), ``5.1``
    for part 1 of a micro-batched schedule's (``F5.1``, ``W5.1``); an update is the subnet's (``U5``)."""
    if isinstance(task, MicroTask) and task.kind is not UPDATE:
        return f"{task.subnet}.{task.micro}"
    return str(task.subnet)


def split_batch(batch: Batch, parts: int) -> tuple[list[Batch], list[float]]:
    """The batch's ``parts`` parts along dimension 0 and each part's loss scale (its share of the rows);
    one part is the batch itself, unscaled."""
    if parts == 1:
        return [batch], [1.0]
    rows = int(batch.inputs[0].shape[0])
    if rows < parts:
        raise UsageError(f"micro_batches {parts} exceeds the batch's {rows} samples")
    inputs = [torch.tensor_split(t, parts) for t in batch.inputs]
    targets = [torch.tensor_split(t, parts) for t in batch.targets]
    cut = [Batch(tuple(s[j] for s in inputs), tuple(s[j] for s in targets)) for j in range(parts)]
    return cut, [int(b.inputs[0].shape[0]) / rows for b in cut]


class PartBatches:
    """One stage's parts of the subnets' batches, each split once and kept until its last use here.

    Stage 0 feeds a part's inputs in its forward; the last stage reads its targets in the forward and,
    when it recomputes, again in the backward (``read_in_backward``). Batch ``i`` is a pure function of
    (seed, i) and nothing writes to it, so the copy kept is the very data a rebuild would give; building
    it is not free (0.3-0.7 ms, 3-10% of a step on the tiny spaces). The memo belongs to its stage, so a
    resumed run starts with an empty one.
    """

    def __init__(self, batch_of: Callable[[int], Batch], parts: int, read_in_backward: bool,
                 uses: int | None = None) -> None:
        self.batch_of, self.parts, self.read_in_backward = batch_of, parts, read_in_backward
        self.uses = parts if uses is None else uses  # parts read here (a stage replica runs m / R of them)
        self._split: dict[int, tuple[list[Batch], list[float]]] = {}  # subnet -> its parts and their scales
        self._done: dict[int, int] = {}  # subnet -> parts whose last use here is done

    def part(self, subnet: int, micro: int) -> Batch:
        """Part ``micro`` of ``subnet``'s batch."""
        return self._parts(subnet)[0][micro]

    def scale(self, subnet: int, micro: int) -> float:
        """Part ``micro``'s loss scale (1.0 for the one part of m = 1)."""
        return self._parts(subnet)[1][micro]

    def used(self, subnet: int, backward: bool) -> None:
        """A part's forward (``backward`` False) or backward is done: after its last use the subnet's last
        part frees the batch."""
        if backward != self.read_in_backward or subnet not in self._split:
            return
        done = self._done.pop(subnet, 0) + 1
        if done == self.uses:
            del self._split[subnet]
        else:
            self._done[subnet] = done

    def _parts(self, subnet: int) -> tuple[list[Batch], list[float]]:
        split = self._split.get(subnet)
        if split is None:
            split = self._split[subnet] = split_batch(self.batch_of(subnet), self.parts)
        return split
