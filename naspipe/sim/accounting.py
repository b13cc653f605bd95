"""How simulated steps become throughput: samples/s and tokens/s, under the paper's or the artifact's accounting.

The paper states throughput in samples per second. The authors' figure script
(hku-systems/naspipe ``gen_figure.py``) multiplies steps per second by ``batch x tokens per
sentence``, so Figure 5's ratios are tokens/s, and the sentences differ per system: the
throughput build of NASPipe feeds 64-token sentences (a 32-token pattern, repeated twice),
the baselines' runtime 4-token patterns repeated ``--rep`` times, which ``figure5.sh`` leaves
at its default of 2 for GPipe and PipeDream (8 tokens) and sets to 16 for VPipe (64 tokens).
The models differ in their dictionary too (:data:`ARTIFACT_VOCAB`): NASPipe's build embeds and
projects onto the full 33,712-token dictionary, the baselines' builds onto a 10,004-symbol
performance dictionary, so a baseline's embeddings and output layer are a third as large.
Batches are Table 2's in both. The artifact has no CV throughput scripts, so its preset
leaves the CV spaces as the paper's.

A preset answers, per (space, system): the batch, and the space options that change what a
sample is (the NLP sentence length, ``seq_len``). :func:`throughputs` puts the two units
side by side for one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from naspipe.errors import UsageError
from naspipe.sim.paper import row

PAPER_SEQ_LEN = 64  # the NLP presets' sentence length (naspipe.space.nlp): the artifact's NASPipe sentences
ARTIFACT_SEQ_LEN = {"csp": 64, "csp-artifact": 64, "vpipe": 64, "gpipe": 8, "pipedream": 8}
# The dictionaries the artifact's throughput runs build their embeddings and output layer from:
# NASPipe's build (throughput/translation/gpus=4) loads the full WMT14 dictionary, whose logits
# its runtime declares as 33,712 wide (``out16`` in throughput/translation/main_with_runtime.py);
# the baselines' builds (baselines/translation/{gpus,pgpus,vgpus}=4) load ``dict.*.perf.txt``,
# 10,000 words plus fairseq's 4 special symbols.
ARTIFACT_VOCAB = {"csp": 33712, "csp-artifact": 33712, "vpipe": 10004, "gpipe": 10004, "pipedream": 10004}


@dataclass(frozen=True)
class Accounting:
    """``paper``: Table 2's batches, every NLP sentence 64 tokens. ``artifact``: the same batches, each
    system's sentences and dictionary as the artifact's throughput runs feed and build them."""

    name: str

    def batch(self, space: str, system: str) -> int:
        return row(space, _paper_system(system)).batch

    def space_options(self, space: str, system: str) -> dict[str, Any]:
        if self.name == "artifact" and space.startswith("nlp."):
            return {"seq_len": ARTIFACT_SEQ_LEN[system], "vocab": ARTIFACT_VOCAB[system]}
        return {}

    def tokens_per_sample(self, space: str, system: str) -> int:
        """Tokens per NLP sentence; 1 for an image (CV throughput in tokens/s is images/s)."""
        if not space.startswith("nlp."):
            return 1
        return int(self.space_options(space, system).get("seq_len", PAPER_SEQ_LEN))


PRESETS = {name: Accounting(name) for name in ("paper", "artifact")}


def preset(name: str) -> Accounting:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"--accounting {name!r}: choose one of {', '.join(PRESETS)}") from None


def _paper_system(system: str) -> str:
    return "csp" if system.startswith("csp") else system


def throughputs(metrics: dict[str, Any], accounting: Accounting) -> dict[str, float]:
    """``{"samples_s": ..., "tokens_s": ...}`` of one simulated run (its space and system from ``metrics``)."""
    samples = float(metrics["throughput_samples_s"])
    return {"samples_s": samples,
            "tokens_s": samples * accounting.tokens_per_sample(metrics["space"], metrics["system"])}
