"""The CSP version rule, kept incrementally with one counter and one queue per layer.

For a trainable layer ``l`` let ``W_l`` be the ordered list of subnets that use it. Subnet
``y`` may touch ``l`` (forward, recompute or backward) only when the copy of ``l`` includes
the writes of every earlier user ``x < y`` in ``W_l``. Subnets register in id order, so
``y``'s required version is simply the number of users registered before it; the layer's
version is the number of writes applied. The whole rule is :meth:`VersionTable.may_access`.

Because a write can only unblock the *next* user of that layer, :meth:`write` returns that
user: callers keep a per-subnet count of blocking layers and never rescan earlier subnets.

Local users (a static partition: every user of a layer runs on this stage) are registered
without a required version: the one of the user at position ``j`` of the layer's queue is
the version plus ``j`` (each write adds one to the version and pops the head), so the head
is always the one at its turn and nothing per user needs storing. This is the simulator's
hot path at scale (once per subnet and stage; ``docs/performance.md``, "The simulator at scale").

With per-subnet partitions a layer's users are spread over stages. A stage then registers
its users with their *global* required version (earlier users on any stage, counted by the
caller), and a newer state written elsewhere arrives as a mirror: :meth:`advance` moves the
local version to it. A user is blocked while the local version differs from its required
one; only the head of a layer's local queue can match, so both calls return at most one.
A table holds users of one kind only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence


class VersionTable:
    def __init__(self) -> None:
        self._version: defaultdict[int, int] = defaultdict(int)
        self._waiting: defaultdict[int, list[int]] = defaultdict(list)  # users not yet written, in id order
        self._required: dict[int, dict[int, int]] = {}  # users registered with their global versions
        self._local: dict[int, Sequence[int]] = {}  # users registered locally: their layers, in order (never changed)

    def copy(self) -> VersionTable:
        """An independent table (a registered subnet's required versions and layers never change: shared)."""
        other = VersionTable()
        other._version = self._version.copy()
        other._waiting = defaultdict(list, {layer: queue[:] for layer, queue in self._waiting.items() if queue})
        other._required = dict(self._required)
        other._local = dict(self._local)
        return other

    def may_access(self, subnet: int, layer: int) -> bool:
        """The CSP rule: ``layer`` already holds the writes of every earlier user of it."""
        return self.version(layer) == self.required(subnet, layer)

    def register(self, subnet: int, layers: Iterable[int], required: Mapping[int, int] | None = None) -> int:
        """Append ``subnet`` to the users of ``layers``; returns how many it must wait on.

        Subnets must register in increasing id order (the stream order). ``required`` gives
        each layer's global required version (mirroring); without it, earlier local users count.
        """
        if required is None:
            return self.register_local(subnet, tuple(layers))
        if subnet in self._required or self._local:
            raise ValueError(f"subnet {subnet} registered twice, or beside local users")
        required_here: dict[int, int] = {}
        blocked = 0
        waiting, version = self._waiting, self._version
        for layer in layers:
            queue = waiting[layer]
            if queue and queue[-1] > subnet:
                raise ValueError(f"subnet {subnet} registered after later subnet {queue[-1]} on layer {layer}")
            need = required[layer]
            required_here[layer] = need
            if version.get(layer, 0) != need:
                blocked += 1
            queue.append(subnet)
        self._required[subnet] = required_here
        return blocked

    def register_local(self, subnet: int, layers: Sequence[int]) -> int:
        """:meth:`register` without required versions: each earlier user still queued blocks it."""
        if subnet in self._local or self._required:
            raise ValueError(f"subnet {subnet} registered twice, or beside users with global versions")
        waiting = self._waiting
        blocked = 0
        for layer in layers:  # once per (subnet, stage)
            queue = waiting[layer]
            if queue:
                if queue[-1] > subnet:
                    raise ValueError(f"subnet {subnet} registered after later subnet {queue[-1]} on layer {layer}")
                blocked += 1
            queue.append(subnet)
        self._local[subnet] = layers
        return blocked

    def write(self, subnet: int, layer: int) -> int | None:
        """Record ``subnet``'s update of ``layer``; returns the user that this write unblocks."""
        version = self._version.get(layer, 0)
        turn = self.required(subnet, layer)
        if version != turn:
            raise RuntimeError(
                f"subnet {subnet} wrote layer {layer} at version {version}, but its turn is version {turn}"
            )
        del self._waiting[layer][0]
        self._version[layer] = version + 1
        return self._head_if_ready(layer)

    def advance(self, layer: int, version: int) -> int | None:
        """A newer state of ``layer`` (written on another stage) arrived; returns the user it unblocks."""
        if self._local:
            raise RuntimeError(f"layer {layer}: a mirror arrived at a table of local users")
        current = self._version.get(layer, 0)
        if version <= current:
            raise RuntimeError(f"layer {layer}: a mirror of version {version} arrived, the copy here is at {current}")
        self._version[layer] = version
        return self._head_if_ready(layer)

    def _head_if_ready(self, layer: int) -> int | None:
        queue = self._waiting.get(layer)
        if not queue:
            return None
        head = queue[0]
        return head if self.required(head, layer) == self._version[layer] else None

    def write_all(self, subnet: int, layers: Iterable[int] | None = None) -> list[int]:
        """:meth:`write` every layer (None: those ``subnet`` registered, in that order), then
        :meth:`forget` the subnet; returns the users unblocked.

        The same steps as :meth:`write` and :meth:`forget`, inlined: it runs once per update task.
        """
        own = self._local.pop(subnet, None)
        if own is None:
            return self._write_all_global(subnet, layers)
        versions, waiting = self._version, self._waiting
        unblocked = []
        for layer in own if layers is None else layers:  # a local user: its turn when it heads the queue
            queue = waiting[layer]
            if not queue or queue[0] != subnet:
                self._local[subnet] = own
                self.write(subnet, layer)  # raises, naming the versions
                raise AssertionError("unreachable: write raised")
            del queue[0]
            versions[layer] += 1
            if queue:  # the next local user is at its turn now
                unblocked.append(queue[0])
        return unblocked

    def _write_all_global(self, subnet: int, layers: Iterable[int] | None) -> list[int]:
        required, versions, waiting, registered = self._required[subnet], self._version, self._waiting, self._required
        unblocked = []
        for layer in required if layers is None else layers:
            version = versions.get(layer, 0)
            if version != required[layer]:
                self.write(subnet, layer)  # raises, naming the versions
                raise AssertionError("unreachable: write raised")
            queue = waiting[layer]
            del queue[0]
            version += 1
            versions[layer] = version
            if queue and registered[queue[0]][layer] == version:
                unblocked.append(queue[0])
        del registered[subnet]
        return unblocked

    def write_registered(self, subnet: int) -> list[int]:
        """:meth:`write_all` of the layers ``subnet`` registered, in the order it registered them."""
        return self.write_all(subnet)

    def forget(self, subnet: int) -> None:
        """Drop a subnet that has written all its layers."""
        if self._local.pop(subnet, None) is None:
            del self._required[subnet]

    def version(self, layer: int) -> int:
        return self._version.get(layer, 0)

    def required(self, subnet: int, layer: int) -> int:
        """The version ``subnet`` needs of ``layer`` (a local user's: the version plus the users ahead of it)."""
        own = self._local.get(subnet)
        if own is None:
            return self._required[subnet][layer]
        if layer not in own:
            raise KeyError(layer)
        return self.version(layer) + self._waiting[layer].index(subnet)
