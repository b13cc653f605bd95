"""AmoebaNet style image operations on ``(batch, channels, height, width)`` tensors.

The 10 distinct operations (:data:`IMAGE_OPS`, interleaved by family so a small prefix of
the list still covers convolutions, pools and identity): 3x3 convolution, separable
convolution 3x3/5x5/7x7, dilated (separable, dilation 2) convolution 3x3/5x5, 1x7-then-7x1
convolution, 3x3 average pool, 3x3 max pool, identity. Convolutions are ReLU-conv-BN; every
op takes ``(c_in, c_out, stride)`` so the same op serves normal blocks (stride 1, same
channels) and reduction blocks (stride 2, doubled channels): pools are then followed by a
1x1 ReLU-conv-BN and identity becomes a factorized reduce (two offset 1x1 stride-2 convs).

Every op's ``forward(x, ctx)`` takes the layer context, which the batch norms need to
update their running statistics only in the non-recompute forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from naspipe.errors import UsageError
from naspipe.space.base import LayerContext
from naspipe.space.ops.common import BatchNorm
from naspipe.space.ops.vision_sizes import IMAGE_OPS, image_op_macs, image_op_sizes


class ReLUConvBN(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, bn_momentum: float) -> None:
        super().__init__()
        self.stride, self.padding = stride, kernel // 2
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False)
        self.bn = BatchNorm(c_out, bn_momentum)

    def forward(self, x: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return self.bn(self.conv(F.relu(x)), ctx)


class SepConv(nn.Module):
    """ReLU - depthwise k x k (stride, dilation) - pointwise 1x1 - BN."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, dilation: int, bn_momentum: float) -> None:
        super().__init__()
        pad = dilation * (kernel - 1) // 2
        self.depthwise = nn.Conv2d(c_in, c_in, kernel, stride, pad, dilation=dilation, groups=c_in, bias=False)
        self.pointwise = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn = BatchNorm(c_out, bn_momentum)

    def forward(self, x: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return self.bn(self.pointwise(self.depthwise(F.relu(x))), ctx)


class Conv1x7Then7x1(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, bn_momentum: float) -> None:
        super().__init__()
        self.row = nn.Conv2d(c_in, c_out, (1, 7), (1, stride), (0, 3), bias=False)
        self.col = nn.Conv2d(c_out, c_out, (7, 1), (stride, 1), (3, 0), bias=False)
        self.bn = BatchNorm(c_out, bn_momentum)

    def forward(self, x: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return self.bn(self.col(self.row(F.relu(x))), ctx)


class Pool(nn.Module):
    """3x3 average (padding excluded from the count) or max pool; 1x1 ReLU-conv-BN if channels change."""

    def __init__(self, kind: str, c_in: int, c_out: int, stride: int, bn_momentum: float) -> None:
        super().__init__()
        self.kind, self.stride = kind, stride
        self.project = ReLUConvBN(c_in, c_out, 1, 1, bn_momentum) if c_in != c_out else None

    def forward(self, x: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        if self.kind == "avg":
            y = F.avg_pool2d(x, 3, self.stride, 1, count_include_pad=False)
        else:
            y = F.max_pool2d(x, 3, self.stride, 1)
        return y if self.project is None else self.project(y, ctx)


class FactorizedReduce(nn.Module):
    """Identity at a reduction: ReLU, two 1x1 stride-2 convs on pixel grids offset by one, concat, BN."""

    def __init__(self, c_in: int, c_out: int, bn_momentum: float) -> None:
        super().__init__()
        if c_out % 2:
            raise UsageError(f"factorized reduce needs an even number of output channels, got {c_out}")
        self.even = nn.Conv2d(c_in, c_out // 2, 1, 2, bias=False)
        self.odd = nn.Conv2d(c_in, c_out // 2, 1, 2, bias=False)
        self.bn = BatchNorm(c_out, bn_momentum)

    def forward(self, x: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        x = F.relu(x)
        shifted = F.pad(x[:, :, 1:, 1:], (0, 1, 0, 1))
        return self.bn(torch.cat([self.even(x), self.odd(shifted)], dim=1), ctx)


class Identity(nn.Module):
    def forward(self, x: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return x


def make_image_op(name: str, c_in: int, c_out: int, stride: int, bn_momentum: float = 0.1) -> nn.Module:
    if name == "conv3x3":
        return ReLUConvBN(c_in, c_out, 3, stride, bn_momentum)
    if name in ("sep3x3", "sep5x5", "sep7x7"):
        return SepConv(c_in, c_out, int(name[3]), stride, 1, bn_momentum)
    if name in ("dil3x3", "dil5x5"):
        return SepConv(c_in, c_out, int(name[3]), stride, 2, bn_momentum)
    if name == "conv1x7_7x1":
        return Conv1x7Then7x1(c_in, c_out, stride, bn_momentum)
    if name in ("avgpool3x3", "maxpool3x3"):
        return Pool(name[:3], c_in, c_out, stride, bn_momentum)
    if name == "identity":
        if stride == 1 and c_in == c_out:
            return Identity()
        return FactorizedReduce(c_in, c_out, bn_momentum)
    raise UsageError(f"unknown image operation {name!r}; choose one of {', '.join(IMAGE_OPS)}")


__all__ = ["IMAGE_OPS", "image_op_macs", "image_op_sizes", "make_image_op"]
