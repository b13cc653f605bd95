"""``naspipe simulate``: what a system would do on given hardware, from the same config as ``train``.

The run is built exactly as ``naspipe train`` builds it (:func:`naspipe.runplan.job.build_job`:
space, partition, subnet stream, policy options), so the simulated stages run the very
policies and the very partition the runtime would. The space's layers are sized from its
torch-free shape (:mod:`naspipe.space.shape`: no layer is built, no torch imported), so the
paper-size spaces simulate on a laptop in a command that starts in well under a second. Outputs
follow the run-directory contract of ``train``: written in ``DIR.partial`` and published as
``DIR`` by one rename; a non-empty ``DIR`` is refused unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from naspipe.config import Config, add_run_arguments, config_from_args, describe_keys
from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write, atomic_write_json
from naspipe.sim.batch import BatchChoice, choose_batch
from naspipe.sim.hardware import Hardware, hardware_names, load_hardware
from naspipe.sim.layouts import choose_layout
from naspipe.sim.run import SimSetup, simulate_run
from naspipe.sim.setup import TRACE_EVENTS, build_setup, default_trace_subnets, make_costs

__all__ = ["add_parser", "build_setup", "default_trace_subnets", "make_costs", "run", "simulate_to", "trace_about"]

DEFAULT_HARDWARE = "rtx2080ti-pcie3-40gbe"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:

    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Simulate a run (same config as 'naspipe train') on a hardware spec: the runtime's policies "
        "and partition in simulated time; writes metrics.json (plus makespan_s, lower_bound_s, efficiency, "
        "max_batch, device_bytes, host_bytes) and trace.json.",
        epilog="config keys (YAML file via --config, or --set key=value):\n" + describe_keys(),
    )
    add_run_arguments(p, "subnets to simulate")
    p.add_argument("--hardware", default=DEFAULT_HARDWARE,
                   help=f"hardware spec: a name ({', '.join(hardware_names())}) or a YAML file "
                   f"(default {DEFAULT_HARDWARE})")
    p.add_argument("--costs", default="analytic",
                   help="task costs: 'analytic' (hardware FLOP/s), 'uniform' (forward 1, backward 2, free "
                   "messages), or a profile CSV from 'naspipe profile' (default analytic)")
    p.add_argument("--batch", default="config",
                   help="samples per subnet step: 'config' (the space's batch_size), 'max' (the largest batch "
                   "this system fits on the hardware, paper Table 2), 'best' (the batch, recompute and cache "
                   "setting with the highest simulated throughput that fits; metrics.json's batch_search says "
                   "which), or a number (default config)")
    p.add_argument("--gpus", type=int, default=None, metavar="G",
                   help="use G GPUs in the best layout: every stages x replicas = G the run allows is simulated "
                   "with these settings and the fastest that fits is kept (metrics.json's layout_search says "
                   "which and what each gave); --stages and --replicas are then chosen, not given")
    p.add_argument("--partition-by", choices=["config", "costs"], default="config",
                   help="'config': partition as 'naspipe train' would (partition_costs, partition_file); 'costs': "
                   "by the simulated layers' compute, as a profile on that hardware would (default config)")
    p.add_argument("--trace-subnets", type=int, default=None, metavar="N",
                   help="trace.json holds the spans of the first and last N subnets (0: every subnet; default "
                   f"{TRACE_EVENTS:,} // (10 x stages x micro_batches), about {TRACE_EVENTS:,} events in all); "
                   "the trace's otherData says which subnets it holds")
    p.add_argument("--out", type=Path, required=True, help="output directory DIR (published complete, by rename)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty DIR when this run completes")
    return p


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    hardware = load_hardware(args.hardware)
    batch = _batch(args.batch)
    if args.trace_subnets is not None and args.trace_subnets < 0:
        raise UsageError(f"--trace-subnets {args.trace_subnets}: must be >= 0")
    if args.gpus is not None and (args.stages is not None or args.replicas is not None):
        raise UsageError("--gpus chooses the stages and replicas: give --gpus or --stages/--replicas, not both")
    metrics = simulate_to(config, hardware, args.costs, args.out, args.overwrite, batch, args.partition_by,
                          args.trace_subnets, args.gpus)
    keys: tuple[str, ...] = ("system", "stages", *(("replicas",) if "replicas" in metrics else ()), "subnets",
                             "throughput_samples_s", "bubble_ratio", "efficiency", "max_batch")
    if batch == "best":  # what the search chose
        keys += ("batch_size", "recompute_effective", "cache_enabled")
    print(json.dumps({k: metrics[k] for k in keys}))
    return 0


BATCH_MODES = ("config", "max", "best")


def _batch(text: str) -> int | str:
    if text in BATCH_MODES:
        return text
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"--batch {text!r}: expected 'config', 'max', 'best' or a positive integer")
    return int(text)


def simulate_to(config: Config, hardware: Hardware, costs_spec: str, out: Path, overwrite: bool,
                batch: int | str = "config", partition_by: str = "config",
                trace_subnets: int | None = None, gpus: int | None = None) -> dict[str, Any]:
    """Check everything, simulate, then write and publish ``out``; returns the metrics.
    ``batch``: 'config', 'max', a number, or 'best' (the search of :mod:`naspipe.sim.batch` picks the batch,
    recompute and cache; metrics.json's ``batch_search`` records it); ``batch_mode`` says which was asked.
    ``trace_subnets``: the trace's window (None: :func:`default_trace_subnets`)."""
    from dataclasses import replace

    from naspipe.runplan import rundir

    run_dir = rundir.plan(out, None, overwrite)  # refuses a bad --out before any work

    def prepared(candidate: Config) -> tuple[SimSetup, BatchChoice | None]:
        setup, search = _setup(candidate, hardware, costs_spec, partition_by, batch)
        return (setup if trace_subnets is None else replace(setup, trace_subnets=trace_subnets)), search

    layout = None
    if gpus is not None:  # every layout simulated whole: the chosen one's run is the output (the engine is exact)
        positions = build_setup(config, hardware, costs_spec, partition_by).plan.structure.num_positions
        runs: dict[tuple[int, int], Any] = {}

        def sample(candidate: Config) -> dict[str, Any]:
            setup, search = prepared(candidate)
            runs[candidate.stages, candidate.replicas] = setup, search, simulate_run(setup)
            return runs[candidate.stages, candidate.replicas][2][0]

        layout = choose_layout(config, gpus, positions, sample)
        config = layout.config
        setup, search, (metrics, trace) = runs[config.stages, config.replicas]
    else:
        setup, search = prepared(config)
        with admission_bar(config.progress, setup.subnets) as on_admit:
            metrics, trace = simulate_run(setup, on_admit)
    metrics["batch_mode"] = batch if isinstance(batch, str) else "fixed"
    if search is not None:
        metrics["batch_search"] = search.record
    if layout is not None:
        metrics["layout_search"] = layout.record
    metrics["config"] = {**config.to_dict(), "hardware": hardware.name, "costs": costs_spec, "batch": batch,
                         "partition_by": partition_by}
    if run_dir.work.exists():
        shutil.rmtree(run_dir.work)
    run_dir.work.mkdir(parents=True)
    atomic_write_json(run_dir.work / "metrics.json", metrics)
    about = trace_about(setup.subnets, setup.trace_subnets, setup.trace_max_events, metrics)
    atomic_write(run_dir.work / "trace.json", lambda f: _write_trace(trace, f, about))
    rundir.publish(run_dir)
    return metrics


def _setup(config: Config, hardware: Hardware, costs_spec: str, partition_by: str,
           batch: int | str) -> tuple[SimSetup, BatchChoice | None]:
    """The run's setup at the batch asked for ('best': the batch search's choice, which it returns too)."""
    from dataclasses import replace

    if batch == "best":
        search = choose_batch(config, hardware, costs_spec, partition_by)
        return search.setup, search
    return replace(build_setup(config, hardware, costs_spec, partition_by), batch=batch), None


@contextmanager
def admission_bar(mode: str, subnets: int) -> Iterator[Callable[[int], None] | None]:
    """The engine's progress callback: a tqdm bar of subnets admitted on stderr (``progress``: on, or auto when
    stderr is a terminal; a bar in a log is noise), None when off. A long run (64 x 100,000 with the context
    cache: minutes) shows it is moving and how far; the bar goes when the run ends or fails."""
    from naspipe.data.progress import bar_wanted

    if not bar_wanted(mode):
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=subnets, unit="subnet", desc="admitted", dynamic_ncols=True, file=sys.stderr,
              leave=False) as bar:
        yield lambda count: bar.update(count - bar.n)


def trace_about(subnets: int, trace_subnets: int, max_events: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """The trace's ``otherData``: which subnets it holds and what it left out, so a reader of a
    bounded trace knows it is one."""
    from naspipe.sim.engine import trace_window

    head, tail = trace_window(subnets, trace_subnets)
    ranges = [[0, head]] + ([[tail, subnets]] if tail < subnets else [])
    return {"simulated": True, "subnets": subnets,
            "traced_subnets": [r for r in ranges if r[0] < r[1]],  # half-open [first, end) ranges
            "trace_max_events_per_stage": max_events,
            "events_dropped": sum(int(s["trace_dropped"]) for s in metrics["stage_extra"]),
            "note": "spans of the subnets in traced_subnets only (naspipe simulate --trace-subnets), at most "
                    "trace_max_events_per_stage per stage; events_dropped counts the others"}


def _write_trace(events: list[dict[str, object]], f: Any, about: dict[str, Any]) -> None:
    f.write('{"traceEvents": [')
    f.write(",\n".join(json.dumps(e) for e in events))
    f.write('],\n"displayTimeUnit": "ms",\n"otherData": ' + json.dumps(about) + "}\n")
