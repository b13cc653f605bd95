"""Messages between stages as exact bytes.

A message is one uint8 tensor: an 8-byte little-endian header length, a JSON header (kind,
subnet, the micro-batch when it is not 0, and dtype + shape of each tensor or null), then the
raw bytes of each tensor. The
bytes are the tensors' own memory, so what arrives is bit-for-bit what was sent, and it
works the same for CPU tensors over gloo and CUDA tensors over nccl.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

_DTYPES = {
    str(d): d
    for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool,
              torch.uint8)
}


@dataclass(frozen=True)
class Message:
    kind: str  # "F" activation, "B" gradient, "END" the sender is done
    subnet: int
    tensors: tuple[torch.Tensor | None, ...] = ()
    micro: int = 0  # the part of the subnet's batch (micro-batched schedules)


def pack(message: Message, device: torch.device) -> torch.Tensor:
    specs = [None if t is None else [str(t.dtype), list(t.shape)] for t in message.tensors]
    fields: dict[str, object] = {"k": message.kind, "s": message.subnet, "t": specs}
    if message.micro:
        fields["j"] = message.micro
    header = json.dumps(fields).encode()
    prefix = len(header).to_bytes(8, "little") + header
    parts = [torch.frombuffer(bytearray(prefix), dtype=torch.uint8).to(device)]
    for t in message.tensors:
        if t is not None:
            parts.append(t.detach().contiguous().reshape(-1).view(torch.uint8).to(device))
    return torch.cat(parts)


def unpack(buffer: torch.Tensor) -> Message:
    size = int.from_bytes(bytes(buffer[:8].cpu().tolist()), "little")
    header = json.loads(bytes(buffer[8 : 8 + size].cpu().tolist()))
    offset = 8 + size
    tensors: list[torch.Tensor | None] = []
    for spec in header["t"]:
        if spec is None:
            tensors.append(None)
            continue
        dtype, shape = _DTYPES[spec[0]], spec[1]
        nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        chunk = buffer[offset : offset + nbytes].clone()
        tensors.append(chunk.view(dtype).reshape(shape))
        offset += nbytes
    return Message(header["k"], header["s"], tuple(tensors), header.get("j", 0))
