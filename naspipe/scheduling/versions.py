"""The CSP version rule, kept incrementally with one counter and one queue per layer.

For a trainable layer ``l`` let ``W_l`` be the ordered list of subnets that use it. Subnet
``y`` may touch ``l`` (forward, recompute or backward) only when the copy of ``l`` includes
the writes of every earlier user ``x < y`` in ``W_l``. Subnets register in id order, so
``y``'s required version is simply the number of users registered before it; the layer's
version is the number of writes applied. The whole rule is :meth:`VersionTable.may_access`.

Because a write can only unblock the *next* user of that layer, :meth:`write` returns that
user: callers keep a per-subnet count of blocking layers and never rescan earlier subnets.

With per-subnet partitions a layer's users are spread over stages. A stage then registers
its users with their *global* required version (earlier users on any stage, counted by the
caller), and a newer state written elsewhere arrives as a mirror: :meth:`advance` moves the
local version to it. A user is blocked while the local version differs from its required
one; only the head of a layer's local queue can match, so both calls return at most one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class VersionTable:
    def __init__(self) -> None:
        self._version: dict[int, int] = {}
        self._waiting: dict[int, list[int]] = {}  # users not yet written, in id order (short: lists copy fast)
        self._required: dict[int, dict[int, int]] = {}

    def copy(self) -> VersionTable:
        """An independent table (a registered subnet's required versions never change: shared)."""
        other = VersionTable()
        other._version = dict(self._version)
        other._waiting = {layer: queue[:] for layer, queue in self._waiting.items()}  # once per prediction
        other._required = dict(self._required)
        return other

    def may_access(self, subnet: int, layer: int) -> bool:
        """The CSP rule: ``layer`` already holds the writes of every earlier user of it."""
        return self._version.get(layer, 0) == self._required[subnet][layer]

    def register(self, subnet: int, layers: Iterable[int], required: Mapping[int, int] | None = None) -> int:
        """Append ``subnet`` to the users of ``layers``; returns how many it must wait on.

        Subnets must register in increasing id order (the stream order). ``required`` gives
        each layer's global required version (mirroring); without it, earlier local users count.
        """
        if subnet in self._required:
            raise ValueError(f"subnet {subnet} registered twice")
        required_here: dict[int, int] = {}
        blocked = 0
        waiting, version = self._waiting, self._version
        if required is None:  # once per (subnet, stage): earlier local users count, each one blocks
            for layer in layers:
                queue = waiting.get(layer)
                if queue is None:
                    waiting[layer] = [subnet]
                    required_here[layer] = version.get(layer, 0)
                    continue
                if queue:
                    if queue[-1] > subnet:
                        raise ValueError(f"subnet {subnet} registered after later subnet {queue[-1]} on layer {layer}")
                    blocked += 1
                required_here[layer] = version.get(layer, 0) + len(queue)
                queue.append(subnet)
            self._required[subnet] = required_here
            return blocked
        for layer in layers:
            queue = waiting.get(layer)
            if queue is None:
                queue = waiting[layer] = []
            elif queue and queue[-1] > subnet:
                raise ValueError(f"subnet {subnet} registered after later subnet {queue[-1]} on layer {layer}")
            current = version.get(layer, 0)
            need = required[layer]
            required_here[layer] = need
            if current != need:
                blocked += 1
            queue.append(subnet)
        self._required[subnet] = required_here
        return blocked

    def write(self, subnet: int, layer: int) -> int | None:
        """Record ``subnet``'s update of ``layer``; returns the user that this write unblocks."""
        version = self._version.get(layer, 0)
        if version != self._required[subnet][layer]:
            raise RuntimeError(
                f"subnet {subnet} wrote layer {layer} at version {version}, "
                f"but its turn is version {self._required[subnet][layer]}"
            )
        queue = self._waiting[layer]
        del queue[0]
        self._version[layer] = version + 1
        return self._head_if_ready(layer)

    def advance(self, layer: int, version: int) -> int | None:
        """A newer state of ``layer`` (written on another stage) arrived; returns the user it unblocks."""
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
        return head if self._required[head][layer] == self._version[layer] else None

    def write_all(self, subnet: int, layers: Iterable[int] | None = None) -> list[int]:
        """:meth:`write` every layer (None: those ``subnet`` registered, in that order), then
        :meth:`forget` the subnet; returns the users unblocked.

        The same steps as :meth:`write` and :meth:`forget`, inlined: it runs once per update task.
        """
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
        del self._required[subnet]

    def version(self, layer: int) -> int:
        return self._version.get(layer, 0)

    def required(self, subnet: int, layer: int) -> int:
        return self._required[subnet][layer]
