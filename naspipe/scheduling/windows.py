"""The windowed shared-layer rule: which version of a shared layer each subnet reads, and when
the shared layers are updated. Pure arithmetic on subnet ids and ``W`` (no torch).

Under ``shared_policy: windowed`` the subnet stream is cut into windows of ``W`` consecutive
subnets: window ``w`` holds subnets ``wW .. wW + W - 1``. Every shared (non-choice) layer
has versions ``S_0`` (its seeded init), ``S_1``, ... and:

- **Read.** Every task of subnet ``y`` (forward, recompute, backward) on a shared layer reads
  version ``S_r`` with ``r = max(0, w(y) - 1)``: the window before last's result, so a
  window never waits for the window just before it (double buffering, as PipeDream-2BW,
  but with the version fixed by the subnet's index, never by timing).
- **Accumulate.** Subnet ``y``'s gradient of the shared layer (taken at ``S_r``) is added to
  the window's accumulator in subnet order (the first subnet of a window assigns it).
- **Update.** After the window's last subnet ``wW + W - 1`` has accumulated, the
  accumulator divided by ``W`` (the window's mean gradient) is applied by the layer's own
  optimizer to the newest version ``S_w``, giving ``S_{w+1}``. A window the run ends inside
  is not applied (a resumed longer run applies it exactly as an uninterrupted one).

So the result depends only on the subnet stream and ``W``: never on the number of stages,
the partition, the timing or the placement. Choice layers keep the CSP version rule.

Two versions suffice: while window ``w`` runs, it reads ``S_{w-1}`` and the newest is ``S_w``
(or both are ``S_0``); window ``w + 1`` cannot start reading ``S_w`` before window ``w - 1``
was applied, and once window ``w`` is applied nobody reads ``S_{w-1}`` any more. Together
with the one accumulator that is the whole memory of the rule.

Scheduling (:class:`~naspipe.scheduling.policies.csp.CSP`): on a stage holding shared
layers, ``y``'s first access waits until ``r`` windows have been applied there (an edge from
the update of subnet ``rW - 1``, ``W + 1`` or more subnets earlier), and its update (the
accumulation) waits for ``y - 1``'s. With ``W`` at least the pipeline's in-flight window the
first edge never binds, and the second only orders updates that CSP runs in id order anyway.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SharedWindow:
    """The rule for one run: ``size`` is ``W``, the subnets per shared-layer update."""

    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"shared_window must be >= 1, got {self.size}")

    def window_of(self, subnet: int) -> int:
        return subnet // self.size

    def read_version(self, subnet: int) -> int:
        """The shared-layer version ``subnet`` reads: windows applied before it may start."""
        return max(0, subnet // self.size - 1)

    def closes_window(self, subnet: int) -> bool:
        """Whether ``subnet`` is its window's last: its accumulation is followed by the update."""
        return (subnet + 1) % self.size == 0

    def opens_window(self, subnet: int) -> bool:
        """Whether ``subnet`` is its window's first: it assigns the accumulator instead of adding."""
        return subnet % self.size == 0

    def applied_before(self, done: int) -> int:
        """Windows applied once subnets ``< done`` have accumulated (the version a checkpoint holds)."""
        return done // self.size

    def last_writer(self, version: int) -> int:
        """The subnet whose accumulation produces ``version`` (>= 1): its window's last subnet."""
        return version * self.size - 1
