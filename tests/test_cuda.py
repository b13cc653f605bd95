"""The CUDA paths: stage backends, and bitwise equality on a GPU (skipped without one).

The equality tests run the real command on ``device=cuda``. With fewer GPUs than stages the
stages share a GPU and talk over gloo through host memory (NCCL refuses two ranks on one
device); with a GPU each they use nccl. Either way the result must equal ``sequential`` on
the same GPU bit for bit. ``benchmarks/cuda_check.py`` runs the wider matrix.
"""

from __future__ import annotations

import pytest
import torch

from naspipe.runtime.launch import transport_backend
from tests.test_runtime_repro import assert_identical, train

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize(("device", "local_world", "gpus", "backend"), [
    ("cpu", 4, 0, "gloo"),
    ("cuda", 4, 4, "nccl"),
    ("cuda", 2, 8, "nccl"),
    ("cuda", 2, 1, "gloo"),  # two stages on one GPU: nccl would fail with "Duplicate GPU detected"
    ("cuda", 16, 8, "gloo"),
])
def test_stages_sharing_a_gpu_use_gloo_and_the_others_nccl(device, local_world, gpus, backend):
    assert transport_backend(device, local_world, gpus) == backend


@needs_cuda
@pytest.mark.parametrize("space", ["toy", "nlp.tiny"])
def test_csp_on_cuda_is_bitwise_sequential_on_cuda(tmp_path, space):
    cuda = ("--space", space, "--set", "device=cuda")
    seq = train(tmp_path / "seq", "sequential", 1, 0, *cuda)
    again = train(tmp_path / "seq2", "sequential", 1, 0, *cuda)
    csp2 = train(tmp_path / "csp2", "csp", 2, 0, *cuda)
    cached = train(tmp_path / "csp3", "csp", 3, 0, *cuda, "--set", "cache.enabled=true",
                   "--set", "partition_mode=per-subnet")
    assert_identical(seq, again, csp2, cached)
