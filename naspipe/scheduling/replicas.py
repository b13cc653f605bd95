"""How a subnet's micro-batch parts are shared out over the replicas of one pipeline stage (issue 42).

With replicated stages each of the D stages runs on R processes, and the m parts of a subnet's
batch are spread over a stage's replicas. The bits must depend on m alone (docs/DESIGN.md,
section 2: the layout is never part of the reference), and sequential training sums a layer's
part gradients in part order, ``((g0 + g1) + g2) + ...``. Float addition is not associative, so
the replicas must reproduce that exact association, not merely the same set of terms.

The layout is chosen so that this costs nothing to arrange: replica ``r`` owns the *contiguous*
part range ``[r * m / R, (r + 1) * m / R)``. The sequential sum then splits into R consecutive
runs, one per replica in replica order, and the running sum after replica ``r``'s last part is
exactly the prefix the next replica must continue from. An ordered chain ``0 -> 1 -> ... -> R-1``
of partial sums (each replica adding its own parts, in order, onto the prefix it received)
computes the sequential sum bit for bit; the last replica holds the total. A round-robin layout
(part ``j`` on replica ``j mod R``) would interleave the replicas in the sum and need a hop per
part instead of one per replica.

R must divide m: every replica then runs the same number of parts, so the stages' replicas stay
in step, and the partial sums are the same shape of work on each. Pure Python (no torch), shared
by the runtime (:mod:`naspipe.runtime.reduce`) and, later, the scheduling core and the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaLayout:
    """The m parts of a subnet over the R replicas of a stage: contiguous, equal ranges in replica order."""

    micro_batches: int
    replicas: int

    def __post_init__(self) -> None:
        m, r = self.micro_batches, self.replicas
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ValueError(f"micro_batches must be a positive integer, not {m!r} (replicas = {r!r})")
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"replicas must be a positive integer, not {r!r} (micro_batches = {m})")
        if m % r:
            raise ValueError(f"replicas = {r} must divide micro_batches = {m}: each replica runs the same "
                             f"number of parts (more replicas than parts leaves one idle)")

    @property
    def parts_per_replica(self) -> int:
        """How many consecutive parts each replica runs (m / R)."""
        return self.micro_batches // self.replicas

    def parts(self, replica: int) -> range:
        """The parts ``replica`` runs, in the order it runs and sums them."""
        self._check_replica(replica)
        k = self.parts_per_replica
        return range(replica * k, (replica + 1) * k)

    def owner(self, part: int) -> int:
        """The replica that runs ``part``."""
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < self.micro_batches:
            raise ValueError(f"part {part!r} is not one of the {self.micro_batches} parts")
        return part // self.parts_per_replica

    def chain(self) -> tuple[int, ...]:
        """The order of the cross-replica sum: replica 0 first (from no prefix), the last one holds the total.

        It is replica order because the part ranges are contiguous and ascending: following it
        adds the parts in part order, which is the sequential association.
        """
        return tuple(range(self.replicas))

    def previous(self, replica: int) -> int | None:
        """The replica whose partial sum ``replica`` continues from (None for replica 0: no prefix)."""
        self._check_replica(replica)
        return replica - 1 if replica > 0 else None

    def next(self, replica: int) -> int | None:
        """The replica ``replica`` passes its partial sum to (None for the last: it holds the total)."""
        self._check_replica(replica)
        return replica + 1 if replica < self.replicas - 1 else None

    @property
    def last(self) -> int:
        """The replica that ends the chain with the total and broadcasts it to the others."""
        return self.replicas - 1

    def _check_replica(self, replica: int) -> None:
        if isinstance(replica, bool) or not isinstance(replica, int) or not 0 <= replica < self.replicas:
            raise ValueError(f"replica {replica!r} is not one of the {self.replicas} replicas")


@dataclass(frozen=True)
class ProcessGrid:
    """Where each (stage, replica) process of a D x R run sits among the ranks: ``rank = replica * D + stage``.

    Replica 0's stages are ranks 0 .. D-1, the ranks of a run without replicas, so rank 0 (stage 0 of replica 0,
    which publishes the outputs) and every rank of an R = 1 run keep their places. Each replica is a pipeline of
    its own (stage ``s`` of replica ``r`` sends to stage ``s + 1`` of replica ``r``): a part stays on its replica
    from the first stage to the last, and only the gradient sums cross between a stage's replicas.
    """

    stages: int
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.stages < 1 or self.replicas < 1:
            raise ValueError(f"a grid needs stages >= 1 and replicas >= 1, not {self.stages} x {self.replicas}")

    @property
    def size(self) -> int:
        """Processes in the run: D x R."""
        return self.stages * self.replicas

    def rank(self, stage: int, replica: int) -> int:
        if not (0 <= stage < self.stages and 0 <= replica < self.replicas):
            raise ValueError(f"(stage {stage}, replica {replica}) is not in a {self.stages} x {self.replicas} grid")
        return replica * self.stages + stage

    def place(self, rank: int) -> tuple[int, int]:
        """``(stage, replica)`` of ``rank``."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is not in a {self.stages} x {self.replicas} grid")
        return rank % self.stages, rank // self.stages
