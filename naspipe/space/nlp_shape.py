"""The NLP space's shape: options, structure, MACs and layer sizes without torch (layers: :mod:`naspipe.space.nlp`).

A shared embedding layer, ``blocks`` choice blocks (the first ``blocks // 2`` encoder blocks,
the rest decoder blocks), a shared output projection; candidate ``c`` of a block runs
``SEQ_OPS[c % 24]``. The paper's presets are registered here, with their sizes' derivation.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from naspipe.errors import UsageError
from naspipe.space.ops.seq_sizes import SEQ_OPS, cross_attention_sizes, parse_seq_op, seq_op_macs, seq_op_sizes
from naspipe.space.registry import register_preset
from naspipe.space.shape import FLOAT32_BYTES, SpaceShape, TensorSizes, buffers, layer_norm, linear, parameters
from naspipe.space.structure import SpaceStructure

BOS, PAD, EOS, UNK = 0, 1, 2, 3
FIRST_WORD = 4  # first id of an ordinary token


class NlpShape(SpaceShape):
    defaults: ClassVar[dict[str, Any]] = {
        "blocks": 6,
        "candidates": 8,
        "dim": 32,
        "cross_heads": 4,
        "vocab": 48,
        "seq_len": 12,
        "batch_size": 8,
        "dropout": 0.1,
        "label_smoothing": 0.1,
        "data": None,
        "split": "train",
    }
    space_class_name: ClassVar[str] = "naspipe.space.nlp:NlpSpace"

    def _structure(self) -> SpaceStructure:
        o = self.options
        self.require_positive_ints("blocks", "candidates", "dim", "cross_heads", "vocab", "seq_len", "batch_size")
        if o["blocks"] < 2:
            raise UsageError(
                f"space {self.name!r}: option 'blocks' must be >= 2 (encoder and decoder), got {o['blocks']}"
            )
        if o["seq_len"] < 3:
            raise UsageError(f"space {self.name!r}: option 'seq_len' must be >= 3, got {o['seq_len']}")
        if o["vocab"] <= FIRST_WORD + 1:
            raise UsageError(f"space {self.name!r}: option 'vocab' must be > {FIRST_WORD + 1}, got {o['vocab']}")
        if not 0.0 <= float(o["dropout"]) < 1.0:
            raise UsageError(f"space {self.name!r}: option 'dropout' must be in [0, 1), got {o['dropout']!r}")
        if not 0.0 <= float(o["label_smoothing"]) < 1.0:
            raise UsageError(
                f"space {self.name!r}: option 'label_smoothing' must be in [0, 1), got {o['label_smoothing']!r}"
            )
        ops = [SEQ_OPS[c % len(SEQ_OPS)] for c in range(o["candidates"])]
        for op in ops:  # divisibility (attention heads, lightweight-conv sharing)
            family, args = parse_seq_op(op)
            need = args.get("heads") or args.get("share") or 1
            if o["dim"] % need:
                raise UsageError(f"space {self.name!r}: option 'dim' ({o['dim']}) must be divisible by {need} for {op}")
        if o["dim"] % o["cross_heads"]:
            raise UsageError(f"space {self.name!r}: option 'dim' ({o['dim']}) must be divisible by 'cross_heads'")
        if o["dim"] % 2:
            raise UsageError(f"space {self.name!r}: option 'dim' must be even, got {o['dim']}")
        n_enc = self.encoder_blocks
        blocks = tuple(
            tuple(("enc." if b < n_enc else "dec.") + op for op in ops) for b in range(o["blocks"])
        )
        return SpaceStructure(self.name, ("embedding",), blocks, ("output",), self.shared_policy)

    @property
    def encoder_blocks(self) -> int:
        return self.options["blocks"] // 2

    def shape_key(self, layer: int) -> Hashable:
        """A layer's shapes follow from its op name (the options are fixed for the space)."""
        return self.structure.op_name(layer)

    def tensor_sizes(self, layer: int) -> TensorSizes:
        """The parameters (and the embedding's position table, a buffer) of :mod:`naspipe.space.nlp`'s layers."""
        o = self.options
        d, v = o["dim"], o["vocab"]
        op = self.structure.op_name(layer)
        if op == "embedding":  # source and target tables; sinusoidal positions
            return parameters(2 * v * d) + buffers(o["seq_len"] * d * FLOAT32_BYTES)
        if op == "output":
            return layer_norm(d) + linear(d, v)
        role, name = op.split(".", 1)
        sizes = layer_norm(d) + seq_op_sizes(name, d)
        if role == "dec":  # cross-attention with its query and memory norms
            sizes = sizes + layer_norm(d) + layer_norm(d) + cross_attention_sizes(d)
        return sizes

    def unmoved_bytes(self, layer: int) -> int:
        """The embedding's position table (:mod:`naspipe.space.nlp` registers it non-persistent)."""
        if self.structure.op_name(layer) == "embedding":
            return int(self.options["seq_len"] * self.options["dim"] * FLOAT32_BYTES)
        return 0

    def layer_cost(self, layer: int) -> float:
        """Forward multiply-accumulates per batch (no layer is built)."""
        o = self.options
        d, t, v, b = o["dim"], o["seq_len"], o["vocab"], o["batch_size"]
        op = self.structure.op_name(layer)
        if op == "embedding":
            macs = 2.0 * t * d
        elif op == "output":
            macs = float(t * d * v)
        else:
            role, name = op.split(".", 1)
            macs = seq_op_macs(name, d, t)
            if role == "dec":
                macs += 4.0 * d * d * t + 2.0 * t * t * d
        return 1.0 + b * macs


# The paper's spaces (NASPipe Table 2): 48 blocks (24 encoder, 24 decoder) x 96/72/48/24
# candidates, WMT14 En-De, sequences of 64 tokens, batch 32. The paper states no vocabulary; the
# authors' artifact (hku-systems/naspipe, throughput/translation/main_with_runtime.py) declares
# NASPipe's logits 33,712 wide (its joined WMT14 En-De dictionary), and its throughput runs feed
# 64-token sentences (throughput/runtime.py: a 32-token pattern repeated twice).
# The paper gives whole-supernet sizes ("Para." of GPipe: NLP.c1/c2/c3 = 14.8B/10.8B/5.8B
# parameters) but not the model width; ``dim`` = 992 makes these Evolved-Transformer ops give
# 16.0B/10.7B/5.4B (within 9%; tests/test_sim_presets.py checks 15%), 992 being divisible by
# every head and weight-sharing count (16). nlp.c0 (96 candidates) is then 21.3B.
_FULL = {"blocks": 48, "dim": 992, "cross_heads": 8, "vocab": 33712, "seq_len": 64, "batch_size": 32}
register_preset("nlp.tiny", NlpShape, {})
for _name, _candidates in (("nlp.c0", 96), ("nlp.c1", 72), ("nlp.c2", 48), ("nlp.c3", 24)):
    register_preset(_name, NlpShape, {**_FULL, "candidates": _candidates})

__all__ = ["BOS", "EOS", "FIRST_WORD", "PAD", "UNK", "NlpShape"]
