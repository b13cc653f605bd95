"""AmoebaNet style image-classification space (NASPipe's CV space).

Positions: a shared convolutional stem, ``blocks`` choice blocks, a shared classifier.
Candidate ``c`` of a block runs operation ``IMAGE_OPS[c % 10]`` (see
:mod:`naspipe.space.ops.vision`); candidates beyond the 10 distinct operations are
independent copies with their own weights.

- ``reductions`` blocks, spread evenly (block ``(i + 1) * blocks // (reductions + 1)``), halve
  the resolution and double the channels; their op names carry a ``reduce.`` prefix and
  their output is ``op(x)``.
- Every other block keeps the shape: ``x + dropout(op(x))``, and the identity candidate
  skips the block (``x``).
- Stem: 3x3 convolutions (the first one stride 2 unless ``stem_stride`` is 1, then one more
  stride-2 conv per remaining factor of 2), ReLU between, no batch norm, so the frozen shared
  layer has no running statistics. Classifier: ReLU, mean over height and width (not
  adaptive pooling), linear.

Batch norm in candidate layers updates running statistics exactly once per subnet step (in
the non-recompute forward; see :class:`naspipe.space.ops.common.BatchNorm`). State between
positions: ``(images,)`` float ``(B, 3, H, W)`` into the stem, then ``(x,)``.

Data: by default deterministic generated images, a pure function of (seed, step): each
class is an orientation of a sinusoidal grating (random frequency and phase) plus a weak
class colour tint and Gaussian noise. With ``data`` set to prepared image shards, batches
come from :class:`naspipe.data.batches.ImageBatches` (imported on first use), normalised
with the ImageNet channel mean and standard deviation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from naspipe.errors import UsageError
from naspipe.seeding import derive_seed
from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State
from naspipe.space.cv_shape import IMAGE_OPS, CvShape
from naspipe.space.ops.common import dropout, label_smoothed_cross_entropy
from naspipe.space.ops.vision import make_image_op

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Stem(SpaceLayer):
    def __init__(self, channels: int, stem_stride: int) -> None:
        super().__init__()
        convs = [nn.Conv2d(3, channels, 3, 2 if stem_stride > 1 else 1, 1)]
        factor = stem_stride // 2
        while factor > 1:
            convs.append(nn.Conv2d(channels, channels, 3, 2, 1))
            factor //= 2
        self.convs = nn.ModuleList(convs)

    def forward(self, state: State, ctx: LayerContext) -> State:
        (x,) = state
        for i, conv in enumerate(self.convs):
            x = conv(x if i == 0 else F.relu(x))
        return (x,)


class ChoiceBlock(SpaceLayer):
    def __init__(self, op: str, c_in: int, c_out: int, stride: int, dropout_p: float, bn_momentum: float) -> None:
        super().__init__()
        self.reduce = stride != 1 or c_in != c_out
        self.skip = op == "identity" and not self.reduce
        self.op = make_image_op(op, c_in, c_out, stride, bn_momentum)
        self.dropout = dropout_p

    def forward(self, state: State, ctx: LayerContext) -> State:
        (x,) = state
        if self.skip:
            return (x,)
        y = self.op(x, ctx)
        if self.reduce:
            return (y,)
        return (x + dropout(y, self.dropout if self.training else 0.0, ctx),)


class Classifier(SpaceLayer):
    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, classes)

    def forward(self, state: State, ctx: LayerContext) -> State:
        (x,) = state
        return (self.fc(F.relu(x).mean(dim=(2, 3))),)


class CvSpace(CvShape, SearchSpace):
    """The CV space's layers, batches and loss; options, structure, costs and sizes are :class:`CvShape`'s."""

    def make_layer(self, layer: int) -> SpaceLayer:
        o, s = self.options, self.structure
        op = s.op_name(layer)
        if op == "stem":
            return Stem(o["channels"], o["stem_stride"])
        if op == "classifier":
            c_last = o["channels"] * 2 ** o["reductions"]
            return Classifier(c_last, o["classes"])
        block = s.block_of(layer)
        if block is None:
            raise ValueError(f"layer {layer} ({op!r}) is neither a prefix/suffix layer nor in a choice block")
        c_in, c_out, stride, _ = self.block_shape(block)
        return ChoiceBlock(
            op.removeprefix("reduce."), c_in, c_out, stride, float(o["dropout"]), float(o["bn_momentum"])
        )

    # -- data ---------------------------------------------------------------------------------
    def _synthetic_batch(self, step: int, seed: int) -> Batch:
        o = self.options
        bsz, size, classes = o["batch_size"], o["image_size"], o["classes"]
        gen = torch.Generator().manual_seed(derive_seed(seed, "batch", step))
        labels = torch.randint(0, classes, (bsz,), generator=gen)
        jitter = (torch.rand(bsz, generator=gen) - 0.5) * (0.5 * math.pi / classes)
        theta = math.pi * labels.double() / classes + jitter.double()
        freq = 1.5 + 2.0 * torch.rand(bsz, generator=gen, dtype=torch.float64)
        phase = 2 * math.pi * torch.rand(bsz, generator=gen, dtype=torch.float64)
        coords = torch.linspace(0.0, 1.0, size, dtype=torch.float64)
        yy, xx = torch.meshgrid(coords, coords, indexing="ij")
        along = xx * torch.cos(theta)[:, None, None] + yy * torch.sin(theta)[:, None, None]
        grating = torch.sin(2 * math.pi * freq[:, None, None] * along + phase[:, None, None])
        task = torch.Generator().manual_seed(derive_seed(seed, "task"))
        tints = 0.3 * (torch.rand(classes, 3, generator=task, dtype=torch.float64) - 0.5)
        gain = 0.75 + 0.5 * torch.rand(bsz, 3, generator=gen, dtype=torch.float64)
        images = grating[:, None] * gain[:, :, None, None] + tints[labels][:, :, None, None]
        noise = torch.randn(bsz, 3, size, size, generator=gen, dtype=torch.float64)
        images = images + float(o["noise"]) * noise
        return Batch((images.float(),), (labels,))

    def _dataset_batch(self, step: int, seed: int) -> Batch:
        o = self.options
        source = self._dataset(seed)
        out = source.batch(step)
        images, labels = out.images, out.labels
        images = torch.as_tensor(images)
        labels = torch.as_tensor(labels, dtype=torch.long).clone()
        expected = (o["batch_size"], 3, o["image_size"], o["image_size"])
        if tuple(images.shape) != expected:
            raise UsageError(
                f"space {self.name!r}: image shards {o['data']} gave a batch of shape {tuple(images.shape)}, "
                f"expected {expected}; set space.image_size to the prepared crop size"
            )
        if int(labels.max()) >= o["classes"]:
            raise UsageError(
                f"space {self.name!r}: image shards {o['data']} have label {int(labels.max())} "
                f">= classes {o['classes']}"
            )
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        x = (images.to(torch.float32) / 255.0 - mean) / std
        return Batch((x,), (labels,))

    def _dataset(self, seed: int):  # noqa: ANN202 - the reader's class lives in naspipe.data
        return self._reader(seed, self._open_dataset)

    def _open_dataset(self, seed: int):  # noqa: ANN202
        from naspipe.data.batches import ImageBatches

        o = self.options
        return ImageBatches(o["data"], o["split"], batch_size=o["batch_size"], seed=seed)

    # -- objective ----------------------------------------------------------------------------
    def loss(self, output: State, batch: Batch) -> torch.Tensor:
        (logits,) = output
        (labels,) = batch.targets
        return label_smoothed_cross_entropy(logits, labels.to(logits.device))

    def accuracy(self, output: State, batch: Batch) -> torch.Tensor:
        """Top-1 accuracy."""
        (logits,) = output
        (labels,) = batch.targets
        return (logits.argmax(-1) == labels.to(logits.device)).float().mean()


__all__ = ["IMAGE_OPS", "CvSpace"]
