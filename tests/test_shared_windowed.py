"""shared_policy windowed: shared layers trained once per window of W subnets, read at a version
fixed by subnet index. CSP (with the cache and per-subnet partitions) stays bitwise equal to
the sequential reference with the same W at any D, across resume (landing mid-window), and the
version a subnet reads never depends on D, timing or placement."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from naspipe import cli
from naspipe.partition import balanced_partition
from naspipe.scheduling import PipelinePlan, PolicyOptions, Task
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import make_policy
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.task import Kind
from naspipe.scheduling.windows import SharedWindow
from naspipe.subnet import SubnetStream
from tests.conftest import make_structure
from tests.test_runtime_context import SMALL, assert_identical, train

ADAM = ["--set", "optimizer.name=adam", "--set", "optimizer.lr=0.01"]
CACHED = ["--set", "partition_mode=per-subnet", "--set", "cache.enabled=true", "--set", "cache.budget=1x"]


def windowed(w: int) -> list[str]:
    return ["--set", "shared_policy=windowed", "--set", f"shared_window={w}"]


# -- the rule ----------------------------------------------------------------
def test_the_window_rule_reads_the_window_before_last_and_applies_after_the_last_subnet() -> None:
    rule = SharedWindow(3)
    assert [rule.read_version(y) for y in range(12)] == [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [y for y in range(12) if rule.closes_window(y)] == [2, 5, 8, 11]
    assert [y for y in range(12) if rule.opens_window(y)] == [0, 3, 6, 9]
    assert [rule.applied_before(n) for n in (0, 2, 3, 7, 9)] == [0, 0, 1, 2, 3]
    assert rule.last_writer(2) == 5
    with pytest.raises(ValueError, match="shared_window must be >= 1"):
        SharedWindow(0)


# -- the scheduling core -------------------------------------------------------
def windowed_plan(stages: int, per_subnet: bool, blocks: int = 8, seed: int = 0) -> PipelinePlan:
    structure = make_structure(blocks, 3, "windowed")
    home = balanced_partition([1.0] * structure.num_positions, stages)
    stream = SubnetStream(structure.choices_per_block, seed)
    if not per_subnet:
        return PipelinePlan(structure, home, stream)
    rng = random.Random(seed)
    costs = [rng.uniform(0.2, 5.0) for _ in range(structure.num_layers)]
    return PipelinePlan.per_subnet(structure, home, stream, costs)


def observe(plan: PipelinePlan, system: str, n: int, w: int, inflight: int, seed: int,
            policies: list[StagePolicy] | None = None) -> tuple[dict[tuple[int, int, str], int], dict[int, list[int]]]:
    """Run the core with random task times; returns the shared-layer version every F/B task reads
    (from the stage's count of applied windows, as the executor picks it) and each shared layer's
    accumulation order (the subnets whose gradients joined the sum, in turn). Fails at once if a
    task reads a version that is not there."""
    rule, rng = SharedWindow(w), random.Random(seed)
    durations: dict[Task, float] = {}
    reads: dict[tuple[int, int, str], int] = {}
    order: dict[int, list[int]] = {lid: [] for lid in plan.windowed}
    applied: dict[int, int] = dict.fromkeys(plan.windowed, 0)
    done: dict[int, set[int]] = {lid: set() for lid in plan.windowed}

    def duration(task: Task) -> float:
        return durations.setdefault(task, rng.uniform(0.1, 3.0))

    def on_start(task: Task, policy: StagePolicy) -> None:
        for layer in plan.stage_layers(task.subnet, task.stage):
            if layer not in plan.windowed:
                ordered = task.kind is not Kind.UPDATE and layer in plan.subnet_versioned(task.subnet)
                if isinstance(policy, CSP) and ordered:
                    assert policy.versions.version(layer) == plan.users_before(layer, task.subnet)  # CSP still
                continue
            if task.kind is Kind.UPDATE:  # the executor's rule: gradients join the sum in subnet order
                done[layer].add(task.subnet)
                while len(order[layer]) in done[layer]:
                    order[layer].append(len(order[layer]))
                    applied[layer] += rule.closes_window(order[layer][-1])
                continue
            want = rule.read_version(task.subnet)
            assert applied[layer] in (want, want + 1), (task, layer, applied[layer], want)
            reads[(layer, task.subnet, task.kind.value)] = want

    options = PolicyOptions(max_inflight=inflight, shared_window=w)
    drive(plan, system, n, options, duration=duration, policies=policies, on_start=on_start)
    return reads, order


@pytest.mark.parametrize("per_subnet", [False, True])
def test_the_version_a_subnet_reads_and_the_accumulation_order_never_depend_on_d(per_subnet: bool) -> None:
    n, w = 30, 3
    reference = observe(windowed_plan(1, per_subnet), "sequential", n, w, 1, seed=0)
    assert all(order == list(range(n)) for order in reference[1].values())
    for stages in (1, 2, 3, 4, 8):
        for inflight, seed in ((2 * stages, stages), (3, 7 * stages)):
            got = observe(windowed_plan(stages, per_subnet), "csp", n, w, inflight, seed)
            assert got == reference, (stages, inflight)


class _NoWindowGate(CSP):
    """CSP that forgets the window's read edge: the check above must catch it."""

    def _register_window(self, subnet: int) -> None:
        return None


def test_the_check_catches_a_scheduler_that_reads_a_version_too_early() -> None:
    plan = windowed_plan(4, per_subnet=False)
    options = PolicyOptions(max_inflight=8, shared_window=1)
    broken: list[StagePolicy] = [_NoWindowGate(k, plan, options) for k in range(4)]
    with pytest.raises(AssertionError):
        observe(plan, "csp", 20, 1, 8, seed=1, policies=broken)


def test_no_stall_when_the_window_covers_the_in_flight_subnets_while_causal_serialises() -> None:
    """In virtual time with unit task costs: windowed with W >= max_inflight decides as frozen
    (the same makespan), causal pays for serialising every subnet on the shared layers."""
    stages, n = 4, 40

    def makespan(shared: str, w: int) -> float:
        structure = make_structure(8, 3, shared)
        plan = PipelinePlan(structure, balanced_partition([1.0] * structure.num_positions, stages),
                            SubnetStream(structure.choices_per_block, 3))
        timeline = drive(plan, "csp", n, PolicyOptions(max_inflight=8, shared_window=w))
        return max(slot.end for slots in timeline.stages for slot in slots)

    frozen = makespan("frozen", 8)
    assert makespan("windowed", 8) == frozen
    assert makespan("windowed", 16) == frozen
    assert makespan("causal", 8) > 1.2 * frozen


@pytest.mark.parametrize("shared", ["frozen", "causal"])
def test_frozen_and_causal_plans_keep_their_version_rule_inputs(shared: str) -> None:
    plan = PipelinePlan(make_structure(6, 3, shared), balanced_partition([1.0] * 8, 3),
                        SubnetStream((3,) * 6, 0))
    assert plan.versioned_slices is plan.trainable_slices and plan.subnet_versioned is plan.subnet_trainable
    assert not plan.windowed and not plan.windowed_stages


def test_windowed_layers_are_trained_but_left_out_of_the_version_rule() -> None:
    plan = windowed_plan(3, per_subnet=True)
    structure = plan.structure
    shared = {0, structure.num_layers - 1}
    assert plan.windowed == shared and plan.windowed_stages == {0, 2}
    for y in range(10):
        assert shared <= set(plan.subnet_trainable(y)) and not shared & set(plan.subnet_versioned(y))
    assert make_policy("csp", 0, plan, PolicyOptions()).windowed_shared
    static = windowed_plan(3, per_subnet=False)
    assert all(make_policy(s, 0, static, PolicyOptions()).windowed_shared for s in ("gpipe", "pipedream", "vpipe"))


# -- the runtime: bitwise equal to sequential with the same W -----------------------
# train() and assert_identical() are test_runtime_context's: the same small runs, compared the same way


def assert_differ(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> str:
    capsys.readouterr()
    assert cli.main(["compare", str(a), str(b)]) == 1
    return capsys.readouterr().out


# Each space and optimizer against two stage counts, so every space meets D = 1, 2, 3, 4 (the
# default suite stays quick); the whole grid per space is in the slow set.
GRID = [("toy", "sgd", (1, 3)), ("toy", "adam", (2, 4)), ("nlp.tiny", "sgd", (2, 4)), ("nlp.tiny", "adam", (1, 3)),
        ("cv.tiny", "sgd", (1, 3)), ("cv.tiny", "adam", (2, 4))]


@pytest.mark.parametrize(("space", "optimizer", "stages"), GRID)
def test_cached_mirrored_csp_equals_sequential_with_the_same_window(tmp_path, capsys, space, optimizer, stages):
    opt = [*ADAM] if optimizer == "adam" else []
    steps = 8 if space == "toy" else 6
    reference = train(tmp_path / "seq", "sequential", 1, *windowed(2), *opt, space=space, steps=steps)
    runs = [train(tmp_path / f"c{d}", "csp", d, *windowed(2), *opt, *CACHED, space=space, steps=steps)
            for d in stages]
    assert_identical(capsys, reference, *runs)
    frozen = train(tmp_path / "frozen", "sequential", 1, *opt, space=space, steps=steps)
    assert "first diverging step: subnet 4" in assert_differ(capsys, reference, frozen)  # S_1 is first read by subnet 4


def test_plain_csp_without_recompute_equals_sequential(tmp_path, capsys):
    """Without recomputation a forward keeps the shared tensors it read for its backward; applying a
    window meanwhile must not change them."""
    plain = [*windowed(1), "--set", "recompute=false"]
    assert_identical(capsys, train(tmp_path / "seq", "sequential", 1, *plain, steps=8),
                     train(tmp_path / "csp2", "csp", 2, *plain, steps=8),
                     train(tmp_path / "nosched3", "csp-no-scheduler", 3, *plain, steps=8))


def test_resume_across_d_landing_mid_window_equals_the_uninterrupted_reference(tmp_path, capsys):
    w = [*windowed(3), *ADAM]
    reference = train(tmp_path / "seq", "sequential", 1, *w, steps=11)  # ends inside window 3: not applied
    part = train(tmp_path / "part", "csp", 3, *w, *CACHED, "--checkpoint-every", "4", steps=8)  # 4, 8: mid-window
    shard = json.loads((part / "checkpoints" / "step-00000008" / "manifest.json").read_text())
    assert shard["step"] == 8
    resumed = ["train", "--system", "csp", "--stages", "2", "--steps", "11", "--seed", "0", "--resume", str(part),
               "--out", str(tmp_path / "resumed"), *SMALL, *w]
    assert cli.main(resumed) == 0
    assert_identical(capsys, reference, tmp_path / "resumed")


def test_resume_with_another_window_is_refused(tmp_path, capsys):
    part = train(tmp_path / "part", "csp", 1, *windowed(3), "--checkpoint-every", "4", steps=4)
    capsys.readouterr()
    args = ["train", "--system", "csp", "--stages", "1", "--steps", "8", "--seed", "0", "--resume", str(part),
            "--out", str(tmp_path / "resumed"), *SMALL, *windowed(4)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'shared_window' is 4, checkpoint has 3" in err[0]
    assert not (tmp_path / "resumed").exists()


def test_a_window_below_one_is_one_line_and_exit_2(tmp_path, capsys):
    args = ["train", "--system", "csp", "--steps", "2", "--out", str(tmp_path / "r"), *SMALL, *windowed(0)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'shared_window'" in err[0] and ">= 1" in err[0]
    assert not (tmp_path / "r").exists()


def test_the_baselines_keep_the_window_so_at_one_stage_they_equal_sequential(tmp_path, capsys):
    """GPipe, VPipe and PipeDream train windowed shared layers once per window, in subnet order, as the
    reference does: at D=1 (bulk of one, one subnet in flight) they are bitwise sequential, so a
    cross-system comparison compares one shared-layer semantics."""
    w = [*windowed(2), *ADAM]
    reference = train(tmp_path / "seq", "sequential", 1, *w, steps=6)
    assert_identical(capsys, reference, *(train(tmp_path / s, s, 1, *w, steps=6) for s in ("gpipe", "vpipe",
                                                                                            "pipedream")))
    frozen = train(tmp_path / "frozen", "gpipe", 1, *ADAM, steps=6)
    assert "first diverging step: subnet 4" in assert_differ(capsys, reference, frozen)  # S_1 is first read by 4


def test_the_baselines_still_spread_with_d_under_the_window(tmp_path, capsys):
    """Bulk and asynchronous updates of the choice layers still move the result with D (Table 3)."""
    w = [*windowed(4), *ADAM]
    reference = train(tmp_path / "seq", "sequential", 1, *w, steps=8)
    for system, stages in (("gpipe", 2), ("pipedream", 4)):
        assert "first diverging step" in assert_differ(capsys, reference,
                                                       train(tmp_path / system, system, stages, *w, steps=8))


@pytest.mark.parametrize(("system", "stages", "window"), [("gpipe", 4, 2), ("pipedream", 3, 2)])
def test_a_window_shorter_than_a_baselines_in_flight_subnets_is_one_line(tmp_path, capsys, system, stages, window):
    args = ["train", "--system", system, "--stages", str(stages), "--steps", "2", "--out", str(tmp_path / "r"),
            *SMALL, *windowed(window)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'shared_window'" in err[0] and f"({stages})" in err[0]
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@pytest.mark.parametrize("space", ["toy", "nlp.tiny", "cv.tiny"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_windowed_wide_grid_and_eight_stages(tmp_path, capsys, space, optimizer):
    opt = [*ADAM] if optimizer == "adam" else []
    extra = ["--set", "space.blocks=8"] if space == "toy" else []
    reference = train(tmp_path / "seq", "sequential", 1, *windowed(3), *opt, *extra, space=space, steps=10)
    runs = [train(tmp_path / f"c{d}", "csp", d, *windowed(3), *opt, *extra, *CACHED, space=space, steps=10)
            for d in (1, 2, 3, 4, 8)]
    assert_identical(capsys, reference, *runs)


# -- the simulator -------------------------------------------------------------
def simulate(tmp_path: Path, shared: str, system: str = "csp") -> dict:
    out = tmp_path / f"{shared}-{system}"
    args = ["simulate", "--space", "toy", "--system", system, "--stages", "4", "--steps", "48", "--out", str(out),
            "--set", f"shared_policy={shared}", "--set", "shared_window=8", "--set", "space.blocks=8"]
    assert cli.main(args) == 0
    return json.loads((out / "metrics.json").read_text())


def test_the_simulator_models_the_window_edges_memory_and_bound(tmp_path, capsys):
    frozen, win, causal = (simulate(tmp_path, s) for s in ("frozen", "windowed", "causal"))
    for m in (frozen, win, causal):
        assert m["lower_bound_s"] <= m["makespan_s"] * (1 + 1e-9)
    # the bound knows the window: far below causal's serial chain, at most a window's edge above frozen's
    assert win["lower_bound_s"] < causal["lower_bound_s"]
    assert win["makespan_s"] < causal["makespan_s"]
    # memory: trained shared layers add optimizer state, plus the older version and the window's sum
    gpipe = simulate(tmp_path, "windowed", "gpipe")
    gpipe_causal = simulate(tmp_path, "causal", "gpipe")
    assert win["device_bytes"] > causal["device_bytes"] > frozen["device_bytes"]
    assert gpipe["device_bytes"] > gpipe_causal["device_bytes"]  # the baselines keep the window too


def test_table4_shows_a_layer_the_csp_rule_orders_not_a_windowed_shared_one():
    """Every subnet touches a windowed embedding, out of sequential order by design: Table 4 must skip it."""
    from naspipe.report.access_order import RunAccess, busiest_layer

    accesses = {0: ["0F", "1F", "0B", "1B", "2F", "2B"], 3: ["0F", "0B", "2F", "2B"]}
    run = RunAccess(Path("r"), "csp D=2", {0: "embedding", 3: "conv"}, accesses, frozenset({0, 3}), 4,
                    ordered=frozenset({3}))
    assert busiest_layer(run) == 3
    assert busiest_layer(RunAccess(Path("r"), "csp D=2", {0: "embedding", 3: "conv"}, accesses,
                                   frozenset({0, 3}), 4)) == 0  # without the window rule it is the busiest
