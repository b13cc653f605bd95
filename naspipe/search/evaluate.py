"""Scoring one subnet with a trained supernet's weights on held-out data, bit for bit.

- Held-out data: with a prepared dataset, the ``valid`` or ``test`` split (image shards call
  it ``val``; batches ``0..n-1`` in the dataset's seeded order); with generated data (no
  ``space.data``), batches at step ``offset + i`` of the run's own seed, an offset (10^12
  for valid, 2x10^12 for test) no training run reaches, so the task is the same and the examples are never trained on.
- NLP: validation loss (the training loss, label smoothing included, with teacher forcing),
  token accuracy, and corpus BLEU (sacrebleu, 13a) of detokenised beam decodes (beam 1:
  greedy) against the detokenised references.
- CV: top-1/top-5 and loss, after batch-norm recalibration: every batch-norm layer of the
  subnet gets its running statistics reset and re-estimated as the exact average over the
  first ``calib_batches`` *training* batches of the run (train mode, no gradients, no weight
  change), the standard one-shot practice of SPOS (Guo et al., 2020); the supernet's own
  running statistics mix every subnet that shared the layer.
- Any other space (``toy``): the loss only.

Determinism: the layers are fresh modules loaded from the checkpoint, the batches pure
functions of (seed, step), the caller fixes threads and deterministic kernels, and every
sum is taken in a fixed order, so the same checkpoint gives the same scores bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from naspipe.data.metrics import bleu, topk_accuracy
from naspipe.search.decode import Detokenizer, beam_decode, strip
from naspipe.search.supernet import TrainedSupernet
from naspipe.space import Batch, LayerContext, SearchSpace, SpaceLayer, State, make_space
from naspipe.space.cv import CvSpace
from naspipe.space.nlp import NlpSpace
from naspipe.space.ops.common import BatchNorm
from naspipe.subnet import Subnet

HELD_OUT_OFFSET = {"valid": 10**12, "test": 2 * 10**12}
SPLITS: tuple[str, ...] = tuple(HELD_OUT_OFFSET)
EVAL_SUBNET = -1  # the LayerContext subnet index of evaluation passes (dropout is off in eval mode anyway)


@dataclass(frozen=True)
class EvalSettings:
    split: str = "valid"
    batches: int = 4
    beam: int = 1
    calib_batches: int = 8


def default_metric(space: SearchSpace) -> str:
    """What a search maximises by default: BLEU (NLP), top-1 (CV), else minus the loss."""
    return "bleu" if isinstance(space, NlpSpace) else "top1" if isinstance(space, CvSpace) else "loss"


def metric_names(space: SearchSpace) -> tuple[str, ...]:
    if isinstance(space, NlpSpace):
        return ("bleu", "loss", "token_acc")
    if isinstance(space, CvSpace):
        return ("top1", "top5", "loss")
    return ("loss",)


def higher_is_better(metric: str) -> bool:
    return metric != "loss"


def _dataset_split(space: SearchSpace, split: str) -> str:
    """The dataset's name for a held-out split: prepared image shards call the validation split ``val``."""
    return "val" if isinstance(space, CvSpace) and split == "valid" else split


class Evaluator:
    """Scores subnets of one trained supernet with fixed settings on one device."""

    def __init__(self, supernet: TrainedSupernet, settings: EvalSettings, device: torch.device) -> None:
        self.supernet, self.settings, self.device = supernet, settings, device
        self.space = supernet.space
        self.seed = supernet.config.seed
        data = self.space.options.get("data")
        split = _dataset_split(self.space, settings.split)
        self._held_out = make_space(self.space.name, {**supernet.config.space_options, "split": split},
                                    supernet.config.shared_policy) if data is not None else self.space
        self._offset = 0 if data is not None else HELD_OUT_OFFSET[settings.split]
        self._detok = Detokenizer(data) if isinstance(self.space, NlpSpace) else None

    def batch(self, i: int) -> Batch:
        return self._held_out.batch(self._offset + i, self.seed)

    def score(self, subnet: Subnet) -> dict[str, float]:
        layers = self.supernet.layers(subnet, self.device)
        if isinstance(self.space, CvSpace):
            self._recalibrate(layers)
        for _, module in layers:
            module.eval()
        with torch.no_grad():
            forward = self._forward(layers)
            if isinstance(self.space, NlpSpace):
                return self._translation_scores(forward)
            if isinstance(self.space, CvSpace):
                return self._classification_scores(forward)
            return {"loss": self._mean_loss(forward)}

    def _forward(self, layers: list[tuple[int, SpaceLayer]], recompute: bool = False) -> Callable[[State], State]:
        def run(state: State) -> State:
            state = tuple(t.to(self.device) for t in state)
            for lid, module in layers:
                state = module(state, LayerContext(self.seed, EVAL_SUBNET, lid, recompute))
            return state
        return run

    def _mean_loss(self, forward: Callable[[State], State]) -> float:
        total = 0.0
        for i in range(self.settings.batches):
            batch = self.batch(i)
            total += float(self.space.loss(forward(batch.inputs), batch))
        return total / self.settings.batches

    def _translation_scores(self, forward: Callable[[State], State]) -> dict[str, float]:
        assert self._detok is not None and isinstance(self.space, NlpSpace)
        hyps, refs, loss, acc = [], [], 0.0, 0.0
        for i in range(self.settings.batches):
            batch = self.batch(i)
            output = forward(batch.inputs)
            loss += float(self.space.loss(output, batch))
            acc += float(self.space.accuracy(output, batch))
            src = batch.inputs[0].to(self.device)
            hyps += [self._detok(ids) for ids in beam_decode(forward, src, self.settings.beam)]
            refs += [self._detok(strip(row.tolist())) for row in batch.targets[0]]
        n = self.settings.batches
        return {"bleu": bleu(hyps, refs), "loss": loss / n, "token_acc": acc / n}

    def _classification_scores(self, forward: Callable[[State], State]) -> dict[str, float]:
        logits, labels, loss = [], [], 0.0
        for i in range(self.settings.batches):
            batch = self.batch(i)
            (out,) = forward(batch.inputs)
            loss += float(self.space.loss((out,), batch))
            logits.append(out.cpu())
            labels.append(batch.targets[0])
        classes = int(logits[0].shape[1])
        top = topk_accuracy(torch.cat(logits), torch.cat(labels), ks=(1, min(5, classes)))
        return {"top1": top[1], "top5": top[min(5, classes)], "loss": loss / self.settings.batches}

    def _recalibrate(self, layers: list[tuple[int, SpaceLayer]]) -> None:
        """Running statistics := the exact mean over the calibration batches (momentum 1/(k+1) at batch k)."""
        norms = [m for _, module in layers for m in module.modules() if isinstance(m, BatchNorm)]
        if not norms or self.settings.calib_batches < 1:
            return
        saved = [bn.momentum for bn in norms]
        for bn in norms:
            bn.running_mean.zero_()
            bn.running_var.fill_(1.0)
            bn.num_batches_tracked.zero_()
        for _, module in layers:
            module.train()
        forward = self._forward(layers)
        with torch.no_grad():
            for k in range(self.settings.calib_batches):
                for bn in norms:
                    bn.momentum = 1.0 / (k + 1)
                forward(self.space.batch(k, self.seed).inputs)
        for bn, momentum in zip(norms, saved, strict=True):
            bn.momentum = momentum
