"""VPipe: GPipe's bulk synchronous schedule with parameter swapping (Zhao et al., TPDS'21).

NASPipe section 2.2 / Table 2 baseline "VPipe": the schedule and the update semantics are
exactly :class:`~naspipe.scheduling.policies.gpipe.GPipe`'s (a bulk of ``B`` subnets reads
the version from before the bulk; updates at the flush, in subnet order, one optimizer
step per subnet with that subnet's own stashed gradient), so its results equal GPipe's
bitwise. What differs is memory: the supernet lives in host memory and a task's layers are
fetched on demand, synchronously, right before it runs (no prediction, no cache), and go
back to the host when it is done: a layer's parameters (and, around an update, its
optimizer state, and the subnet's stashed gradients) are copied back after the update.
Only the running task's subnet has layers on the device. The runtime records the copied
bytes and the time spent waiting on copies (``swap_bytes``, ``swap_wait_s``).

Shared layers train as under :class:`~naspipe.scheduling.policies.gpipe.GPipe` (one step per
subnet at the flush under ``causal``; one per window under ``windowed``, the window's older
version and sum staying where the layer was built), swapped like any other layer.
"""

from __future__ import annotations

from typing import ClassVar

from naspipe.scheduling.policies.gpipe import GPipe


class VPipe(GPipe):
    name = "vpipe"
    label = "BSP with parameter swapping (VPipe)"
    report_order = 5

    swap_parameters: ClassVar[bool] = True
