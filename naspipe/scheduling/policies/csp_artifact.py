"""The NASPipe artifact's dependency check, as a simulator policy: CSP comparing only some blocks.

The authors' throughput build (hku-systems/naspipe, ``throughput/translation``) decides on
each stage whether a received forward may run by comparing its choices with those of every
earlier subnet that has not finished its backward there, but only over a fixed range of
choice blocks per stage, taken from an 8-way split of the 48 NLP blocks:
:data:`ARTIFACT_BOUNDS` (stage ``k`` compares blocks ``[b[k], b[k + 1])``). Those ranges are
not the blocks the stage runs: at 4 GPUs the model is split 15/16/17/0 blocks, yet the stages
compare blocks 0-3, 4-9, 10-15 and 16-21, so 26 of 48 blocks are never compared and a stage
may run a subnet on a layer an earlier subnet has not written yet. At 8 stages every block is
compared, but still on the stage of the artifact's split, not necessarily where it runs.

:class:`CSPArtifact` is :class:`~naspipe.scheduling.policies.csp.CSP` with that test: a
subnet registered on stage ``k`` waits for the updates on stage ``k`` of earlier users of its
layers in stage ``k``'s compared blocks, whatever stage those layers live on. It exists to
measure how much of the paper's speedup the relaxed check buys; it is not reproducible (the
version rule no longer holds) and it changes no other policy's decisions. For spaces with
another block count the bounds are scaled (rounded) to it; stages past the eighth compare
nothing. Static partitions only.
"""

from __future__ import annotations

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions
from naspipe.scheduling.policies.csp import CSP

ARTIFACT_BLOCKS = 48
ARTIFACT_BOUNDS = (0, 4, 10, 16, 22, 29, 36, 43, 48)  # the scheduler's per-stage ranges (8 stages, 48 blocks)


def compared_blocks(stage: int, blocks: int) -> range:
    """The blocks stage ``stage`` compares, :data:`ARTIFACT_BOUNDS` scaled to ``blocks`` blocks."""
    if stage >= len(ARTIFACT_BOUNDS) - 1:
        return range(0)
    lo, hi = (round(ARTIFACT_BOUNDS[stage + i] * blocks / ARTIFACT_BLOCKS) for i in (0, 1))
    return range(lo, hi)


class CSPArtifact(CSP):
    name = "csp-artifact"
    label = "NASPipe artifact's relaxed check"
    report_order = 7
    causal = False  # the relaxed check does not keep the version rule
    mirroring = False  # the artifact's split is static

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        structure = plan.structure
        self._compared = tuple((b, structure.layer_id(b, 0)) for b in compared_blocks(stage, len(structure.blocks)))

    def _on_register(self, subnet: int) -> None:
        """Register the subnet's layers in this stage's compared blocks (CSP registers the ones it runs here).

        The window rule of shared layers is not the artifact's check but what the executor can serve: a
        stage holds only the two newest windows, so a subnet still waits for the one it reads."""
        choices = self.plan.stream[subnet].choices
        checked = tuple(first + choices[b] for b, first in self._compared)
        self._blocked[subnet] = self.versions.register(subnet, checked)
        if self._window is not None:
            self._register_window(subnet)
