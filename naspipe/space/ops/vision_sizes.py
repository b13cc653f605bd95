"""The image operations by name, and what each costs without building it: MACs and tensor sizes.

Torch-free, so a space's shape (:mod:`naspipe.space.cv_shape`) prices and sizes its layers
without importing torch; the modules themselves are in :mod:`naspipe.space.ops.vision`, and
``tests/test_space_sizes.py`` checks :func:`image_op_sizes` against them built on the meta device.
"""

from __future__ import annotations

from naspipe.space.shape import FLOAT32_BYTES, INT64_BYTES, TensorSizes, buffers, conv, parameters

IMAGE_OPS: tuple[str, ...] = (
    "conv3x3",
    "sep3x3",
    "maxpool3x3",
    "dil3x3",
    "identity",
    "avgpool3x3",
    "sep5x5",
    "conv1x7_7x1",
    "dil5x5",
    "sep7x7",
)


def image_op_macs(name: str, c_in: int, c_out: int, stride: int, height: int, width: int) -> float:
    """Multiply-accumulates per image of the op (forward), for analytic layer costs."""
    out_pixels = ((height + stride - 1) // stride) * ((width + stride - 1) // stride)
    if name == "conv3x3":
        return 9.0 * c_in * c_out * out_pixels
    if name.startswith(("sep", "dil")):
        k = int(name[3])
        return float((k * k * c_in + c_in * c_out) * out_pixels)
    if name == "conv1x7_7x1":
        return float(7 * c_in * c_out * height * ((width + stride - 1) // stride) + 7 * c_out * c_out * out_pixels)
    if name.endswith("pool3x3"):
        return float(9 * c_in * out_pixels + (c_in * c_out * out_pixels if c_in != c_out else 0))
    if stride == 1 and c_in == c_out:
        return float(c_in * out_pixels)
    return float(c_in * c_out * out_pixels)


def batch_norm_sizes(channels: int) -> TensorSizes:
    """:class:`naspipe.space.ops.common.BatchNorm`: weight and bias; running mean and variance (float32) and
    the step count (int64) as buffers."""
    return parameters(2 * channels) + buffers(2 * channels * FLOAT32_BYTES + INT64_BYTES)


def image_op_sizes(name: str, c_in: int, c_out: int, stride: int) -> TensorSizes:
    """The op's tensors: ``make_image_op(name, c_in, c_out, stride)`` (convolutions without bias, then batch norm)."""
    bn = batch_norm_sizes(c_out)
    if name == "conv3x3":
        return conv(c_in, c_out, 9, bias=False) + bn
    if name.startswith(("sep", "dil")):
        k = int(name[3])
        return conv(c_in, c_in, k * k, groups=c_in, bias=False) + conv(c_in, c_out, 1, bias=False) + bn
    if name == "conv1x7_7x1":
        return conv(c_in, c_out, 7, bias=False) + conv(c_out, c_out, 7, bias=False) + bn
    if name.endswith("pool3x3"):
        return conv(c_in, c_out, 1, bias=False) + bn if c_in != c_out else TensorSizes(0, 0)
    if stride == 1 and c_in == c_out:  # identity
        return TensorSizes(0, 0)
    return conv(c_in, c_out // 2, 1, bias=False) + conv(c_in, c_out // 2, 1, bias=False) + bn  # factorized reduce
