"""The cross-replica gradient sum in part order (issue 42), on real gloo process groups.

The reference is what sequential training computes on one process: every part's gradients
accumulated into ``.grad`` by autograd, in part order. :func:`chain_sum` and :func:`gather_sum`
must give those bytes on every replica (compared as bytes: ``torch.equal`` would call ``-0.0``
and ``+0.0`` equal), for R = 2 and 3 and several m; :func:`all_reduce_sum` must not, on an input
where the association provably matters. Each group is spawned once per R and runs every case;
rendezvous and collectives have timeouts, and the parent kills a group that overstays.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from naspipe.runtime.reduce import Bucket, Grads, all_reduce_sum, chain_sum, gather_sum, part_order_sum
from naspipe.scheduling.replicas import ReplicaLayout

SHAPES = ((7, 5), (13,), (3, 4, 2), (6,), (2, 2))
SEEDS = (0, 1)
CHUNKS = (1, 4, 1000)  # whole; pipelined in slices that cut tensors; more slices than values (empty ones dropped)
GROUP_DEADLINE_S = 60.0  # the whole spawned group, start-up included; a case takes milliseconds
PEER_TIMEOUT_S = 15.0  # a collective waiting this long for a peer raises


def part_grads(seed: int, part: int, shapes: tuple[tuple[int, ...], ...] = SHAPES) -> list[torch.Tensor | None]:
    """Part ``part``'s gradients, a pure function of (seed, part): every replica can build all m.

    Tensor 0 and 2: magnitudes from 1e-6 to 1e6, so the association changes the rounding. Tensor 1:
    absent from part 0 (the sum starts at part 1). Tensor 3: ``-0.0`` everywhere (a sum started at
    zero would end ``+0.0``). Tensor 4: absent from every part (stays None).
    """
    gen = torch.Generator().manual_seed(1000 * seed + part)
    out: list[torch.Tensor | None] = []
    for i, shape in enumerate(shapes):
        scale = 10.0 ** torch.randint(-6, 7, shape, generator=gen).float()
        value = torch.randn(shape, generator=gen) * scale
        out.append({1: None if part == 0 else value, 3: torch.full(shape, -0.0), 4: None}.get(i, value))
    return out


def autograd_sum(parts: list[list[torch.Tensor | None]], shapes: tuple[tuple[int, ...], ...]) -> list[Any]:
    """Sequential's bits: each part's gradients accumulated into ``.grad`` by backward, in part order."""
    params = [torch.zeros(s, requires_grad=True) for s in shapes]
    for grads in parts:
        terms = [(p * g).sum() for p, g in zip(params, grads, strict=True) if g is not None]
        if terms:
            torch.stack(terms).sum().backward()  # d/dp of sum(p * g) is 1.0 * g: g's own bits
    return [p.grad for p in params]


def magnitudes_part(part: int) -> list[torch.Tensor | None]:
    """Parts 0..3 are 1e8, 1, -1e8, 1 (the rest 0): in part order the 1s survive one at a time, ending 1.0;
    replica sums of two parts each are 1e8 and -1e8 (float32 rounds the 1 away), so any all-reduce ends 0.0."""
    return [torch.tensor([(1e8, 1.0, -1e8, 1.0)[part] if part < 4 else 0.0])]


Case = tuple[int, list[list[torch.Tensor | None]], tuple[tuple[int, ...], ...]]


def _cases(world: int) -> dict[str, Case]:
    """name -> (m, every part's gradients, shapes), the same on every replica."""
    cases: dict[str, Case] = {f"m{world * k}-seed{s}": (world * k, [part_grads(s, j) for j in range(world * k)], SHAPES)
             for k in (1, 2, 4) for s in SEEDS}
    cases["magnitudes"] = (2 * world, [magnitudes_part(j) for j in range(2 * world)], ((1,),))
    return cases


def _replica(rank: int, world: int, scenario: str, out: str) -> None:
    """One spawned replica: join the group, run ``scenario``, save what it computed to ``out/rank.pt``."""
    torch.set_num_threads(1)
    timeout = PEER_TIMEOUT_S if scenario == "cases" else 2.0
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout))
    results = _run_cases(rank, world) if scenario == "cases" else _run_stuck_peer(rank)
    torch.save(results, f"{out}/{rank}.pt")
    dist.destroy_process_group()


def _run_cases(rank: int, world: int) -> dict[str, dict[str, list[Any]]]:
    results = {}
    for name, (m, parts, shapes) in _cases(world).items():
        layout = ReplicaLayout(m, world)
        bucket = Bucket.like([torch.zeros(s) for s in shapes])
        mine = [parts[j] for j in layout.parts(rank)]
        results[name] = {"sequential": autograd_sum(parts, shapes), "gather": gather_sum(bucket, mine, layout),
                         "all_reduce": all_reduce_sum(bucket, mine, layout),
                         **{f"chain{c}": chain_sum(bucket, mine, layout, chunks=c) for c in CHUNKS}}
    return results


def _run_stuck_peer(rank: int) -> dict[str, str]:
    """Replica 0 never sends (alive, asleep); replica 1 must give up after the group's timeout, not hang."""
    layout, bucket = ReplicaLayout(2, 2), Bucket.like([torch.zeros(3)])
    if rank == 0:
        time.sleep(4.0)
        os._exit(0)
    start = time.monotonic()
    try:
        chain_sum(bucket, [[torch.ones(3)]], layout)
    except RuntimeError as exc:
        return {"error": str(exc).splitlines()[0], "waited_s": f"{time.monotonic() - start:.1f}"}
    return {"error": ""}


def run_group(world: int, scenario: str, out: Path) -> list[Any]:
    """Spawn ``world`` replicas running ``scenario``; each one's saved results, in rank order."""
    context = mp.get_context("spawn")
    procs = [context.Process(target=_replica, args=(r, world, scenario, str(out)), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + GROUP_DEADLINE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    stuck = [p for p in procs if p.is_alive()]
    for p in stuck:
        p.kill()
        p.join()
    assert not stuck, f"{len(stuck)} of {world} replicas still running after {GROUP_DEADLINE_S} s: killed"
    return [torch.load(out / f"{r}.pt") for r in range(world) if (out / f"{r}.pt").exists()]


def bits(tensors: list[torch.Tensor | None]) -> list[bytes | None]:
    """Each tensor's bytes (None stays None): -0.0 and +0.0 differ, as do two NaNs of other payloads."""
    return [None if t is None else t.contiguous().view(torch.uint8).numpy().tobytes() for t in tensors]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda r: f"R{r}")
def replicated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    world = request.param
    results = run_group(world, "cases", tmp_path_factory.mktemp(f"reduce-R{world}"))
    assert len(results) == world, "a replica saved no results (its traceback is above)"
    return results


@pytest.mark.parametrize("method", [*(f"chain{c}" for c in CHUNKS), "gather"])
def test_ordered_sums_equal_sequential_bit_for_bit(replicated: list[Any], method: str) -> None:
    for replica, cases in enumerate(replicated):
        for name, result in cases.items():
            got, want = bits(result[method]), bits(result["sequential"])
            differ = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
            assert not differ, f"replica {replica}, {name}: tensors {differ} differ from sequential's bits"


def test_the_cases_reach_what_they_are_for(replicated: list[Any]) -> None:
    """The reference itself keeps -0.0, leaves the never-present tensor None, and the seeded parts'
    magnitudes are far enough apart that the association matters for plain all_reduce somewhere."""
    sequential = replicated[0]["m4-seed0" if len(replicated) == 2 else "m6-seed0"]["sequential"]
    assert sequential[4] is None and bool(torch.signbit(sequential[3]).all())
    differing = [name for name, r in replicated[0].items() if bits(r["all_reduce"]) != bits(r["sequential"])]
    assert len(differing) >= 2, differing


def test_plain_all_reduce_loses_the_bits(replicated: list[Any]) -> None:
    """Why this module exists: 1e8, 1, -1e8, 1 in part order is 1.0; as two replica sums it is 0.0."""
    for cases in replicated:
        result = cases["magnitudes"]
        assert result["sequential"][0].item() == 1.0 and result["chain4"][0].item() == 1.0
        assert result["all_reduce"][0].item() == 0.0


def test_a_stuck_peer_raises_instead_of_hanging(tmp_path: Path) -> None:
    results = run_group(2, "stuck", tmp_path)
    assert len(results) == 1 and results[0]["error"], results
    assert float(results[0]["waited_s"]) < 10.0, results


def test_part_order_sum_is_grad_accumulation() -> None:
    """The one-process sum equals autograd's own accumulation, missing terms and -0.0 included."""
    parts = [part_grads(3, j) for j in range(5)]
    bucket = Bucket.like([torch.zeros(s) for s in SHAPES])
    assert bits(part_order_sum(bucket, parts)) == bits(autograd_sum(parts, SHAPES))


def test_bucket_round_trip_and_refusals() -> None:
    bucket = Bucket.like([torch.zeros(2, 3), torch.zeros(4)])
    grads: Grads = [torch.arange(6.0).view(2, 3), None]
    unpacked = bucket.unpack(bucket.pack(grads))
    assert unpacked[1] is None and unpacked[0] is not None and torch.equal(unpacked[0], torch.arange(6.0).view(2, 3))
    with pytest.raises(ValueError, match="a part has 1 gradients, the bucket 2"):
        bucket.pack([None])
    with pytest.raises(ValueError, match=r"gradient 1 has shape \(5,\), the bucket \(4,\)"):
        bucket.pack([None, torch.zeros(5)])
    assert bucket.spans(4) == [(0, 2), (2, 4), (4, 7), (7, 9), (9, 12)]  # flags, then 10 values in 4 slices
    assert bucket.spans(100)[:3] == [(0, 2), (2, 3), (3, 4)] and len(bucket.spans(100)) == 11
    with pytest.raises(ValueError, match="one dtype"):
        Bucket.like([torch.zeros(1), torch.zeros(1, dtype=torch.float64)])
