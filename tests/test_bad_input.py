"""Every bad input gets the same contract: exit 2, one line naming the problem, no traceback, nothing written.

The table runs through the public command line only (``naspipe.cli.main``), in-process for
speed; a few cases also run as a real ``python -m naspipe`` process to prove the contract
holds at the process level (stderr, exit status). ``{tmp}`` in a case's arguments is the
case's own empty directory, ``{run}`` a finished run with checkpoints, and ``{out}`` the
``--out`` path that must not exist afterwards.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from naspipe.cli import main
from tests.conftest import run_cli

SMALL = ("--set", "space.blocks=4", "--set", "space.candidates=3", "--set", "space.dim=16", "--set", "space.seq_len=8")


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    expect: str  # a substring of the one error line (the file, field or value it names)
    setup: Callable[[Path, Path], object] | None = None  # (tmp, run): prepare bad files under tmp


def write(name: str, data: bytes) -> Callable[[Path, Path], object]:
    return lambda tmp, run: (tmp / name).write_bytes(data)


def damaged_run(file: str, edit: Callable[[bytes], bytes] | None) -> Callable[[Path, Path], None]:
    """A copy of the good run at ``{tmp}/bad`` with ``file`` rewritten by ``edit`` (None: removed)."""

    def setup(tmp: Path, run: Path) -> None:
        shutil.copytree(run, tmp / "bad", ignore=shutil.ignore_patterns("checkpoints"))
        path = tmp / "bad" / file
        if edit is None:
            path.unlink()
        else:
            path.write_bytes(edit(path.read_bytes()))

    return setup


def replace_line(index: int, old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        lines = data.split(b"\n")
        assert old in lines[index], (old, lines[index])  # the damage must really be applied
        lines[index] = lines[index].replace(old, new, 1)
        return b"\n".join(lines)

    return edit


def train(*args: str) -> tuple[str, ...]:
    """A small run's command; a key the case sets (or its section) replaces SMALL's: the command line refuses a key
    given twice."""
    given = {args[i + 1].partition("=")[0] for i in range(len(args) - 1) if args[i] == "--set"}
    small = [a for flag, item in zip(SMALL[::2], SMALL[1::2], strict=True)
             if not {item.partition("=")[0], item.partition(".")[0]} & given for a in (flag, item)]
    return ("train", "--steps", "4", *small, *args, "--out", "{out}")


CASES = [
    # -- train: config values out of range -------------------------------------------------------
    Case("momentum<0", train("--set", "optimizer.momentum=-1"), "'optimizer.momentum': -1.0"),
    Case("weight_decay<0", train("--set", "optimizer.weight_decay=-2"), "'optimizer.weight_decay': -2.0"),
    Case("betas>1", train("--set", "optimizer.betas=[2,3]"), "'optimizer.betas': (2.0, 3.0)"),
    Case("betas-length", train("--set", "optimizer.betas=[0.9]"), "'optimizer.betas'"),
    Case("eps<0", train("--set", "optimizer.eps=-1"), "'optimizer.eps': -1.0"),
    Case("lr-inf", train("--set", "optimizer.lr=.inf"), "'optimizer.lr': inf"),
    Case("lr-nan", train("--set", "optimizer.lr=.nan"), "'optimizer.lr': nan"),
    Case("lr-zero", train("--set", "optimizer.lr=0"), "'optimizer.lr': 0.0"),
    Case("timeout-nan", train("--set", "timeout_s=.nan"), "'timeout_s': nan"),
    Case("optimizer-name", train("--set", "optimizer.name=rmsprop"), "'rmsprop'"),
    Case("optimizer-not-mapping", train("--set", "optimizer=3"), "'optimizer'"),
    Case("stages-0", ("train", "--stages", "0", "--out", "{out}"), "'stages': 0"),
    Case("steps-0", ("train", "--steps", "0", "--out", "{out}"), "'steps': 0"),
    Case("keep-0", train("--set", "keep_checkpoints=0"), "'keep_checkpoints': 0"),
    Case("threads-0", train("--set", "threads=0"), "'threads': 0"),
    Case("inflight<0", train("--set", "max_inflight=-1"), "'max_inflight': -1"),
    Case("timeout-not-a-number", train("--set", "timeout_s=abc"), "'timeout_s'"),
    Case("unknown-key", train("--set", "optimiser.lr=1"), "'optimiser'"),
    Case("set-without-equals", train("--set", "noequals"), "noequals"),
    Case("device", train("--set", "device=tpu"), "'tpu'"),
    Case("system", train("--system", "nosuch"), "'nosuch'"),
    Case("bulk-boundary", train("--system", "gpipe", "--stages", "2", "--checkpoint-every", "3"),
         "checkpoint_every (3)"),
    Case("too-many-stages", train("--stages", "100"), "--stages 100"),
    Case("partition-costs", train("--set", "partition_costs=/nonexistent/costs.csv"), "/nonexistent/costs.csv"),
    Case("cache-budget", train("--set", "cache.budget=lots"), "'cache.budget': 'lots'"),
    Case("cache-budget-0", train("--set", "cache.budget=0x"), "'cache.budget': '0x'"),
    Case("cache-horizon<0", train("--set", "cache.horizon=-1"), "'cache.horizon': -1"),
    Case("cache-system", train("--system", "gpipe", "--set", "cache.enabled=true"), "needs system sequential or csp"),
    Case("per-subnet-system", train("--system", "gpipe", "--set", "partition_mode=per-subnet"), "per-subnet needs"),
    Case("per-subnet-mode", train("--set", "partition_mode=dynamic"), "'dynamic'"),
    Case("cache-recompute", train("--set", "cache.enabled=true", "--set", "recompute=false"), "needs recompute=true"),
    # -- train: space options ----------------------------------------------------------------------
    Case("space", train("--space", "nosuch"), "'nosuch'"),
    Case("space-option", train("--set", "space.nosuch=1"), "'nosuch'"),
    Case("space-dim-0", train("--set", "space.dim=0"), "'dim'"),
    Case("space-dropout", train("--set", "space.dropout=1.5"), "'dropout'"),
    Case("space-heads", train("--set", "space.dim=18", "--set", "space.heads=4"), "'heads'"),
    Case("space-dim-huge", train("--set", "space.dim=1000000000"), "layer 0 (embedding) needs about 268.2 GiB"),
    Case("space-vocab-huge", train("--set", "space.vocab=1000000000"), "available"),
    # -- train: config files -----------------------------------------------------------------------
    Case("config-missing", train("--config", "{tmp}/missing.yaml"), "missing.yaml"),
    Case("config-not-utf8", train("--config", "{tmp}/c.yaml"), "c.yaml: not UTF-8",
         write("c.yaml", b"seed: 1\n\xff\xfe\n")),
    Case("config-bad-yaml", train("--config", "{tmp}/c.yaml"), "c.yaml line", write("c.yaml", b"seed: [1,\n")),
    Case("config-a-list", train("--config", "{tmp}/c.yaml"), "c.yaml: expected a mapping",
         write("c.yaml", b"- 1\n")),
    Case("config-a-directory", train("--config", "{tmp}"), "config file"),
    Case("config-bad-value", train("--config", "{tmp}/c.yaml"), "'optimizer.eps'",
         write("c.yaml", b"optimizer: {eps: -1}\n")),
    # -- train --resume ----------------------------------------------------------------------------
    Case("resume-missing", train("--resume", "{tmp}/nowhere"), "nowhere"),
    Case("resume-no-checkpoint", train("--resume", "{tmp}"), "no complete checkpoint"),
    Case("resume-other-seed", ("train", "--steps", "8", "--seed", "5", *SMALL, "--resume", "{run}", "--out", "{out}"),
         "config key 'seed'"),
    Case("resume-other-space", ("train", "--steps", "8", "--resume", "{run}", "--out", "{out}"), "config key 'space'"),
    Case("resume-steps-not-past", ("train", "--steps", "2", *SMALL, "--resume", "{run}", "--out", "{out}"),
         "is not past the checkpoint's step"),
    # -- compare -----------------------------------------------------------------------------------
    Case("compare-one-run", ("compare", "{run}"), "at least two"),
    Case("compare-missing-dir", ("compare", "{run}", "{tmp}/nowhere"), "nowhere: not a run directory"),
    Case("compare-a-file", ("compare", "{run}", "{tmp}/f"), "f: not a run directory", write("f", b"x")),
    Case("compare-missing-losses", ("compare", "{run}", "{tmp}/bad"), "losses.csv: No such file",
         damaged_run("losses.csv", None)),
    Case("compare-binary", ("compare", "{run}", "{tmp}/bad"), "losses.csv line 3: not UTF-8",
         damaged_run("losses.csv", replace_line(2, b"0x", b"\xff\xfe\x00"))),
    Case("compare-subnet-not-int", ("compare", "{run}", "{tmp}/bad"), "losses.csv line 2: subnet 'x0'",
         damaged_run("losses.csv", replace_line(1, b"0,", b"x0,"))),
    Case("compare-bad-hex", ("compare", "{run}", "{tmp}/bad"), "losses.csv line 3: loss_hex '0xzz",
         damaged_run("losses.csv", replace_line(2, b"0x1", b"0xzz"))),
    Case("compare-truncated-row", ("compare", "{run}", "{tmp}/bad"), "losses.csv line 8: 2 fields",
         damaged_run("losses.csv", lambda d: d + b"9,1-2")),
    Case("compare-missing-column", ("compare", "{run}", "{tmp}/bad"), "missing column 'loss_hex'",
         damaged_run("losses.csv", replace_line(0, b"loss_hex", b"hex"))),
    Case("compare-duplicate-subnet", ("compare", "{run}", "{tmp}/bad"), "subnet 0 appears twice",
         damaged_run("losses.csv", lambda d: d + d.split(b"\n")[1] + b"\n")),
    Case("compare-layer-not-int", ("compare", "{run}", "{tmp}/bad"), "layer_hashes.csv line 2: layer 'L'",
         damaged_run("layer_hashes.csv", replace_line(1, b"0,", b"L,"))),
    Case("compare-bad-weights", ("compare", "{run}", "{tmp}/bad"), "weights.sha256: 'nothex'",
         damaged_run("weights.sha256", lambda d: b"nothex\n")),
    # -- prepare -----------------------------------------------------------------------------------
    Case("prepare-missing-src", ("prepare", "wmt", "--src", "{tmp}/a.en", "--tgt", "{tmp}/a.de", "--vocab-size", "64",
                                 "--out", "{out}"), "a.en"),
    Case("prepare-line-counts", ("prepare", "wmt", "--src", "{tmp}/a.en", "--tgt", "{tmp}/a.de", "--vocab-size", "64",
                                 "--out", "{out}"), "line counts differ",
         lambda tmp, run: ((tmp / "a.en").write_text("a b\nc d\n"), (tmp / "a.de").write_text("x\n"))),
    Case("prepare-not-utf8", ("prepare", "wmt", "--src", "{tmp}/a.en", "--tgt", "{tmp}/a.de", "--vocab-size", "64",
                              "--out", "{out}"), "a.en:1: invalid UTF-8",
         lambda tmp, run: ((tmp / "a.en").write_bytes(b"\xff\xfe\n"), (tmp / "a.de").write_text("x\n"))),
    Case("prepare-fairseq-missing", ("prepare", "fairseq", "--data", "{tmp}/nowhere", "--out", "{out}"), "nowhere"),
    Case("prepare-fairseq-empty", ("prepare", "fairseq", "--data", "{tmp}", "--out", "{out}"), "no fairseq shards"),
    Case("prepare-imagenet-missing", ("prepare", "imagenet", "--root", "{tmp}/nowhere", "--out", "{out}"), "nowhere"),
    # -- evaluate, search, train --subnet (issue 11) -----------------------------------------------
    Case("evaluate-no-weights", ("evaluate", "--run", "{tmp}", "--sample", "2", "--out", "{out}"),
         "no trained weights"),
    Case("evaluate-run-missing", ("evaluate", "--run", "{tmp}/nowhere", "--sample", "2", "--out", "{out}"),
         "nowhere: not a directory"),
    Case("evaluate-choice-out-of-range", ("evaluate", "--run", "{run}", "--subnets", "{tmp}/s.json", "--out", "{out}"),
         "block 1 choice 5 is out of range (0..2)", write("s.json", b'{"choices": [0, 5, 0, 0]}')),
    Case("evaluate-wrong-block-count", ("evaluate", "--run", "{run}", "--subnets", "{tmp}/s.json", "--out", "{out}"),
         "has 2 choices, the space has 4 blocks", write("s.json", b"[[0, 1]]")),
    Case("evaluate-subnets-not-json", ("evaluate", "--run", "{run}", "--subnets", "{tmp}/s.json", "--out", "{out}"),
         "s.json: unreadable", write("s.json", b"[[0,")),
    Case("evaluate-split", ("evaluate", "--run", "{run}", "--sample", "2", "--split", "train", "--out", "{out}"),
         "--split 'train'"),
    Case("evaluate-beam-0", ("evaluate", "--run", "{run}", "--sample", "2", "--beam", "0", "--out", "{out}"),
         "--beam 0"),
    Case("search-method", ("search", "--run", "{run}", "--method", "annealing", "--out", "{out}"),
         "--method 'annealing': unknown method"),
    Case("search-no-weights", ("search", "--run", "{tmp}", "--method", "random", "--out", "{out}"),
         "no trained weights"),
    Case("search-metric", ("search", "--run", "{run}", "--method", "random", "--metric", "bleu", "--out", "{out}"),
         "--metric 'bleu'"),
    Case("search-crossover", ("search", "--run", "{run}", "--method", "evolution", "--population", "4",
                              "--crossover", "9", "--out", "{out}"), "--crossover 9"),
    Case("train-subnet-out-of-range", train("--subnet", "{tmp}/s.json"), "config key 'subnet': block 0 choice 3",
         write("s.json", b'{"choices": [3, 0, 0, 0]}')),
    Case("train-subnet-several", train("--subnet", "{tmp}/s.json"), "expected one subnet",
         write("s.json", b"[[0, 0, 0, 0], [1, 1, 1, 1]]")),
    # -- profile -----------------------------------------------------------------------------------
    Case("profile-space", ("profile", "--space", "nosuch", "--out", "{out}"), "'nosuch'"),
    Case("profile-repeats", ("profile", "--space", "toy", "--repeats", "0", "--out", "{out}"), "repeats=0"),
    Case("profile-warmup", ("profile", "--space", "toy", "--warmup", "-1", "--out", "{out}"), "warmup=-1"),
    Case("profile-threads", ("profile", "--space", "toy", "--threads", "0", "--out", "{out}"), "--threads"),
    Case("profile-set", ("profile", "--space", "toy", "--set", "noequals", "--out", "{out}"), "noequals"),
    Case("profile-option", ("profile", "--space", "toy", "--set", "space.nosuch=1", "--out", "{out}"), "'nosuch'"),
    Case("profile-dim", ("profile", "--space", "toy", "--set", "space.dim=0", "--out", "{out}"), "'dim'"),
    # -- simulate ----------------------------------------------------------------------------------
    Case("sim-hardware-name", ("simulate", "--stages", "2", "--hardware", "nosuch", "--out", "{out}"), "'nosuch'"),
    Case("sim-hardware-missing-key", ("simulate", "--hardware", "{tmp}/hw.yaml", "--out", "{out}"),
         "hw.yaml: missing key 'gpus_per_host'", write("hw.yaml", b"name: x\n")),
    Case("sim-hardware-bad-value", ("simulate", "--hardware", "{tmp}/hw.yaml", "--out", "{out}"),
         "hw.yaml: unknown key 'flopz'", write("hw.yaml", b"name: x\nflopz: 1\n")),
    Case("sim-costs", ("simulate", "--stages", "2", "--costs", "{tmp}/none.csv", "--out", "{out}"), "none.csv"),
    Case("sim-system", ("simulate", "--system", "nosuch", "--out", "{out}"), "'nosuch'"),
    Case("sim-batch", ("simulate", "--batch", "lots", "--out", "{out}"), "--batch 'lots'"),
    Case("sim-trace-subnets", ("simulate", "--trace-subnets", "-1", "--out", "{out}"), "--trace-subnets -1"),
    Case("sim-stages", ("simulate", "--stages", "0", "--out", "{out}"), "'stages': 0"),
    # -- calibrate, attribute, bubble-models ------------------------------------------------------
    Case("calibrate-systems", ("calibrate", "--systems", "tpu", "--spec-out", "{out}"), "--systems 'tpu'"),
    Case("calibrate-base", ("calibrate", "--base", "{tmp}/hw.yaml", "--spec-out", "{out}"),
         "hw.yaml: missing key 'gpus_per_host'", write("hw.yaml", b"name: x\n")),
    Case("attribute-spaces", ("attribute", "--spaces", "nlp.c9", "--out", "{out}"), "--spaces 'nlp.c9'"),
    Case("bubble-models-subnets", ("bubble-models", "--subnets", "0", "--out", "{out}"), "--subnets 0"),
    Case("claims-results", ("claims", "--results", "{tmp}/nowhere", "--out", "{out}"), "is not a directory"),
    Case("claims-contract", ("claims", "--results", "{tmp}", "--out", "{out}"), "attribution.csv: missing column",
         lambda tmp, run: ((tmp / "tables").mkdir(), (tmp / "tables" / "attribution.csv").write_text("space,order\n"))),
    Case("claims-ledger", ("claims", "--results", "{tmp}", "--claims", "{tmp}/l.yaml", "--out", "{out}"),
         "claims file", write("l.yaml", b"claims:\n  - id: x\n")),
]

# -- damaged run outputs (issue 18, item 3): damage is one line naming the file, never a verdict ---
CASES += [
    Case("compare-damaged-digit", ("compare", "{run}", "{tmp}/bad"), "bad/losses.csv: damaged",
         damaged_run("losses.csv", replace_line(1, b"p+", b"p-"))),
    Case("compare-header-only-losses", ("compare", "{run}", "{tmp}/bad"), "bad/losses.csv: damaged",
         damaged_run("losses.csv", lambda d: d.split(b"\n")[0] + b"\n")),
    Case("compare-damaged-weights", ("compare", "{run}", "{tmp}/bad"), "bad/weights.sha256: damaged",
         damaged_run("weights.sha256", lambda d: (b"0" if d[:1] != b"0" else b"1") + d[1:])),
    Case("reproducibility-damaged", ("reproducibility", "{run}", "{tmp}/bad", "--out", "{out}"),
         "bad/losses.csv: damaged", damaged_run("losses.csv", replace_line(2, b"p+", b"p-"))),
    Case("report-damaged-losses", ("report", "--runs", "{tmp}/bad", "--out", "{out}"), "bad/losses.csv: damaged",
         damaged_run("losses.csv", lambda d: d.split(b"\n")[0] + b"\n")),
    Case("report-damaged-layer-hashes", ("report", "--runs", "{tmp}/bad", "--out", "{out}"),
         "bad/layer_hashes.csv: damaged", damaged_run("layer_hashes.csv", replace_line(1, b",", b",x"))),
    Case("report-damaged-digests", ("report", "--runs", "{tmp}/bad", "--out", "{out}"), "outputs.sha256 line 1",
         damaged_run("outputs.sha256", lambda d: b"x" + d)),
]

# -- bad profiles and hardware specs (issue 18, item 4): every number finite and in range ---------
PROFILE_HEADER = ("space,op,role,positions,layers,in_shape,device,device_name,threads,recompute,repeats,warmup,"
                  "fwd_ms,bwd_ms,copy_ms,param_bytes,act_bytes\n")
SHIPPED_HW = (Path(__file__).resolve().parents[1] / "config" / "hardware" / "cpu-local.yaml").read_bytes()


def profile_row(fwd: str = "1.5", layers: str = "16") -> bytes:
    return (PROFILE_HEADER + f"toy,mlp,block,1-8,{layers},8x16x32:float32,cpu,cpu,1,True,1,0,{fwd},3.0,0.01,17024,"
            "16384\n").encode()


def simulate_costs(name: str) -> tuple[str, ...]:
    return ("simulate", "--stages", "2", "--costs", f"{{tmp}}/{name}", "--out", "{out}")


CASES += [
    Case("sim-costs-negative", simulate_costs("p.csv"), "p.csv:2: bad value '-1.0' in column 'fwd_ms'",
         write("p.csv", profile_row(fwd="-1.0"))),
    Case("sim-costs-nan", simulate_costs("p.csv"), "p.csv:2: bad value 'nan' in column 'fwd_ms'",
         write("p.csv", profile_row(fwd="nan"))),
    Case("sim-costs-layers-0", simulate_costs("p.csv"), "p.csv:2: bad value '0' in column 'layers'",
         write("p.csv", profile_row(layers="0"))),
    Case("sim-hardware-reserved", ("simulate", "--hardware", "{tmp}/hw.yaml", "--out", "{out}"),
         "hw.yaml: key 'device_reserved' (9000000000.0) must be below 'device_memory'",
         write("hw.yaml", SHIPPED_HW.replace(b"device_reserved: 0.0", b"device_reserved: 9.0e+9"))),
    Case("sim-hardware-binary", ("simulate", "--hardware", "{tmp}/hw.yaml", "--out", "{out}"),
         "hw.yaml: not UTF-8 text", write("hw.yaml", b"\x89PNG\r\n\x1a\n\x00\xff")),
    # -- item 9: layer and sample ranges, conflicting overrides, duplicate YAML keys ------------------
    Case("access-order-layer-negative", ("access-order", "{run}", "--layer", "-1"), "--layer -1"),
    Case("access-order-layer-too-large", ("access-order", "{run}", "--layer", "999"), "--layer 999: out of range"),
    Case("access-order-limit-0", ("access-order", "{run}", "--limit", "0"), "--limit 0"),
    Case("evaluate-sample-more-than-space", ("evaluate", "--run", "{run}", "--sample", "1000", "--out", "{out}"),
         "--sample 1000: the space of --run"),
    Case("set-steps-beside-flag", train("--set", "steps=true"), "--set 'steps=true' conflicts"),
    Case("set-stages-beside-flag", ("train", "--stages", "2", "--set", "stages=-7", "--out", "{out}"),
         "--set 'stages=-7' conflicts"),
    Case("set-duplicate-key", train("--set", "optimizer={{lr: 1, lr: 2}}"), "duplicate key 'lr'"),
    Case("config-duplicate-key", train("--config", "{tmp}/c.yaml"), "c.yaml line 3: not valid YAML (duplicate key",
         write("c.yaml", b"seed: 1\nsteps: 4\nseed: 2\n")),
    Case("sim-hardware-duplicate-key", ("simulate", "--hardware", "{tmp}/hw.yaml", "--out", "{out}"),
         "duplicate key 'hosts'", write("hw.yaml", SHIPPED_HW + b"hosts: 2\n")),
    # -- issue 18: checked before DIR.partial is created (the snapshot proves none is left) ----------
    Case("train-data-missing", ("train", "--space", "nlp.tiny", "--steps", "2", "--set", "space.data={tmp}/nowhere",
                                "--out", "{out}"), "nowhere: no such directory"),
    Case("train-data-a-file", ("train", "--space", "nlp.tiny", "--steps", "2", "--set", "space.data={tmp}/f",
                               "--out", "{out}"), "f: no such directory", write("f", b"x")),
    Case("train-threads-overflow", train("--set", "threads=100000000000"), "'threads': 100000000000"),
]

# -- issue 34: a run without its digest file, foreign profiles, paths out of the run, bad paths and sizes ------------
def toy_profile(space: str = "toy", past_end: int = 0, **options: object) -> bytes:
    """A profile CSV of the toy space with ``options`` (one row per op and position, sizes from its shape)."""
    from naspipe.profile.costs import position_layer_ids, position_role
    from naspipe.space import make_shape

    shape = make_shape("toy", options)
    s = shape.structure
    lines = [PROFILE_HEADER]
    for position in range(s.num_positions):
        for op in dict.fromkeys(s.op_name(lid) for lid in position_layer_ids(s, position)):
            lid = next(i for i in position_layer_ids(s, position) if s.op_name(i) == op)
            where = f"{position}-{position + past_end}" if past_end else str(position)
            lines.append(f"{space},{op},{position_role(s, position)},{where},1,8x8x16:float32,cpu,cpu,1,True,1,0,"
                         f"1.5,3.0,0.01,{shape.layer_tensors(lid)[1]},4096\n")
    return "".join(lines).encode()


SMALL_OPTIONS = {"blocks": 4, "candidates": 3, "dim": 16, "seq_len": 8}


def undigested_run(edit: Callable[[bytes], bytes]) -> Callable[[Path, Path], None]:
    """A copy of the good run at ``{tmp}/bad``, ``losses.csv`` edited and ``outputs.sha256`` deleted."""

    def setup(tmp: Path, run: Path) -> None:
        damaged_run("losses.csv", edit)(tmp, run)
        (tmp / "bad" / "outputs.sha256").unlink()

    return setup


def digest_line(name: str) -> Callable[[Path, Path], None]:
    """A copy of the good run whose ``outputs.sha256`` also names ``name`` (outside the run)."""

    def setup(tmp: Path, run: Path) -> None:
        shutil.copytree(run, tmp / "bad", ignore=shutil.ignore_patterns("checkpoints"))
        with (tmp / "bad" / "outputs.sha256").open("a") as f:
            f.write(f"{'0' * 64}  {name}\n")

    return setup


def nested_json(name: str, depth: int = 100_000) -> Callable[[Path, Path], object]:
    return write(name, b"[" * depth + b"]" * depth)


def run_file(file: str, data: bytes, checkpoints: bool = False) -> Callable[[Path, Path], None]:
    """A copy of the good run at ``{tmp}/bad`` with each ``file`` (a glob inside it) replaced by ``data``."""

    def setup(tmp: Path, run: Path) -> None:
        shutil.copytree(run, tmp / "bad", ignore=None if checkpoints else shutil.ignore_patterns("checkpoints"))
        for target in (tmp / "bad").glob(file):
            target.write_bytes(data)

    return setup


LONG = "n" * 300  # one path component longer than any Linux file system allows (255 bytes)
HEX_DIGIT = replace_line(1, b"0x1.", b"0x1.f")  # the first loss_hex: one more hex digit, still a valid hex float
SIM_SMALL = ("simulate", "--space", "toy", "--stages", "2", "--steps", "8", *SMALL)

CASES += [
    # item 1: outputs.sha256 deleted, one loss changed: damage, never DIFFERENT
    Case("compare-no-digests-changed-loss", ("compare", "{run}", "{tmp}/bad"), "bad/outputs.sha256: missing",
         undigested_run(HEX_DIGIT)),
    Case("reproducibility-no-digests", ("reproducibility", "{run}", "{tmp}/bad", "--out", "{out}"),
         "bad/outputs.sha256: missing", undigested_run(HEX_DIGIT)),
    Case("report-no-digests", ("report", "--runs", "{tmp}/bad", "--out", "{out}"), "bad/outputs.sha256: missing",
         undigested_run(HEX_DIGIT)),
    # item 2: a profile of another space, other options, or past the space's end
    Case("sim-costs-other-options", (*SIM_SMALL, "--costs", "{tmp}/p.csv", "--out", "{out}"),
         "parameter bytes in the profile", write("p.csv", toy_profile(**{**SMALL_OPTIONS, "dim": 64}))),
    Case("sim-costs-other-space", (*SIM_SMALL, "--costs", "{tmp}/p.csv", "--out", "{out}"),
         "a profile of space 'nlp.tiny', not of 'toy'", write("p.csv", toy_profile("nlp.tiny", **SMALL_OPTIONS))),
    Case("sim-costs-past-the-end", (*SIM_SMALL, "--costs", "{tmp}/p.csv", "--out", "{out}"),
         "is past the end of space 'toy' (6 positions", write("p.csv", toy_profile(past_end=4,
                                                                                              **SMALL_OPTIONS))),
    Case("train-partition-costs-other-options", train("--set", "partition_costs={tmp}/p.csv"),
         "parameter bytes in the profile", write("p.csv", toy_profile(**{**SMALL_OPTIONS, "dim": 64}))),
    Case("train-partition-costs-other-space", train("--set", "partition_costs={tmp}/p.csv"),
         "a profile of space 'cv.tiny', not of 'toy'", write("p.csv", toy_profile("cv.tiny", **SMALL_OPTIONS))),
    Case("train-partition-costs-past-the-end", train("--set", "partition_costs={tmp}/p.csv"),
         "is past the end of space 'toy'", write("p.csv", toy_profile(past_end=9, **SMALL_OPTIONS))),
    # item 3: compare reads metrics.json like the others; outputs.sha256 names only files of the run
    Case("compare-truncated-metrics", ("compare", "{run}", "{tmp}/bad"), "metrics.json: not valid JSON",
         damaged_run("metrics.json", lambda d: d[:40])),
    Case("reproducibility-digest-path-outside", ("reproducibility", "{run}", "{tmp}/bad", "--out", "{out}"),
         "which is not a file inside the run directory", digest_line("../../../../etc/hostname")),
    Case("report-digest-path-outside", ("report", "--runs", "{tmp}/bad", "--out", "{out}"),
         "which is not a file inside the run directory", digest_line("../../../../etc/hostname")),
    # item 8: bad paths and sizes that gave tracebacks
    Case("train-out-empty", train()[:-1] + ("",), "--out '.': name a run directory"),
    Case("train-resume-empty", train("--resume", ""), "--resume .: no complete checkpoint"),
    Case("train-out-name-too-long", train()[:-1] + (f"{{tmp}}/{LONG}",), "a component of 300 bytes"),
    Case("train-space-blocks-absurd", ("train", "--steps", "2", "--set", "space.blocks=1000000000", "--out", "{out}"),
         "at most 1000000 are supported"),
    Case("train-subnet-nested", train("--subnet", "{tmp}/s.json"), "nested too deeply", nested_json("s.json")),
    Case("sim-costs-binary", simulate_costs("p.csv"), "p.csv:1: not a profile CSV (not UTF-8 text: byte 0x89)",
         write("p.csv", b"\x89PNG\r\n\x1a\n\x00\xff" * 8)),
    Case("train-lock-a-directory", train(), ".out.partial.lock (Is a directory)",
         lambda tmp, run: (tmp.parent / ".out.partial.lock").mkdir()),
]

# -- issue 34: more of the same families, found by trying them (paths, sizes, encodings, nesting, foreign files) ---
CASES += [
    # paths
    Case("reproducibility-out-empty", ("reproducibility", "{run}", "{run}", "--out", ""), "--out '.': is a directory"),
    Case("reproducibility-out-a-directory", ("reproducibility", "{run}", "{run}", "--out", "{tmp}"), "is a directory"),
    Case("partition-out-empty", ("partition", "--space", "toy", "--stages", "2", "--out", ""), "is a directory"),
    Case("partition-out-a-directory", ("partition", "--space", "toy", "--stages", "2", "--out", "{tmp}"),
         "is a directory"),
    Case("compare-path-too-long", ("compare", "{run}", f"{{tmp}}/{LONG}"), "a component of 300 bytes"),
    Case("train-resume-path-too-long", train("--resume", f"{{tmp}}/{LONG}"), "a component of 300 bytes"),
    Case("sim-costs-path-too-long", simulate_costs(LONG), "a component of 300 bytes"),
    Case("report-digest-absolute-path", ("report", "--runs", "{tmp}/bad", "--out", "{out}"),
         "names '/etc/hostname'", digest_line("/etc/hostname")),
    Case("compare-digest-path-outside", ("compare", "{run}", "{tmp}/bad"), "names '../metrics.json'",
         digest_line("../metrics.json")),
    # sizes
    Case("train-space-candidates-absurd", train("--set", "space.candidates=2000000"), "at most 1000000"),
    Case("sim-space-blocks-absurd", ("simulate", "--set", "space.blocks=1000000000", "--out", "{out}"),
         "at most 1000000"),
    Case("profile-space-blocks-absurd", ("profile", "--space", "toy", "--set", "space.blocks=1000000000", "--out",
                                         "{out}"), "at most 1000000"),
    Case("sim-costs-positions-huge", simulate_costs("p.csv"), "bad value '1-99999999999' in column 'positions'",
         write("p.csv", profile_row().replace(b",1-8,", b",1-99999999999,"))),
    # encodings
    Case("sim-costs-utf16", simulate_costs("p.csv"), "p.csv:1: not a profile CSV (not UTF-8 text: byte 0xff)",
         write("p.csv", PROFILE_HEADER.encode("utf-16"))),
    Case("train-partition-costs-binary", train("--set", "partition_costs={tmp}/p.csv"), "not UTF-8 text",
         write("p.csv", b"space,op\n\xff\xfe\n")),
    Case("compare-metrics-not-utf8", ("compare", "{run}", "{tmp}/bad"), "metrics.json: not valid JSON (not UTF-8)",
         damaged_run("metrics.json", lambda d: b"\xff" + d)),
    # nesting
    Case("train-config-nested", train("--config", "{tmp}/c.yaml"), "c.yaml: not valid YAML (nested too deeply)",
         nested_json("c.yaml")),
    Case("train-set-nested", train("--set", "space=" + "[" * 50_000 + "]" * 50_000), "nested too deeply"),
    Case("train-partition-file-nested", train("--set", "partition_file={tmp}/p.json"), "nested too deeply",
         nested_json("p.json")),
    Case("compare-metrics-nested", ("compare", "{run}", "{tmp}/bad"), "metrics.json: not valid JSON (nested too",
         damaged_run("metrics.json", lambda d: b"[" * 100_000 + b"]" * 100_000)),
    Case("report-verdict-nested", ("report", "--runs", "{run}", "--reproducibility", "{tmp}/v.json", "--out", "{out}"),
         "v.json: not valid JSON (nested too deeply)", nested_json("v.json")),
    Case("evaluate-subnets-nested", ("evaluate", "--run", "{run}", "--subnets", "{tmp}/s.json", "--out", "{out}"),
         "nested too deeply", nested_json("s.json")),
    Case("resume-manifest-nested", ("train", "--steps", "8", *SMALL, "--resume", "{tmp}/bad", "--out", "{out}"),
         "manifest.json: unreadable (nested too deeply)",
         run_file("checkpoints/step-*/manifest.json", b"[" * 100_000 + b"]" * 100_000, checkpoints=True)),
    # foreign files
    Case("sim-costs-a-hardware-spec", simulate_costs("hw.yaml"), "hw.yaml: not a profile CSV (missing column",
         write("hw.yaml", SHIPPED_HW)),
    Case("train-partition-file-a-profile", train("--set", "partition_file={tmp}/p.csv"), "p.csv: not valid JSON",
         write("p.csv", profile_row())),
]


# Also run as a real process: a config range, a damaged run to compare, a layer too large for memory.
IN_SUBPROCESS = ("momentum<0", "compare-binary", "space-dim-huge")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-stage run with checkpoints at steps 2 and 4 (4 losses)."""
    run = tmp_path_factory.mktemp("good") / "run"
    assert main(["train", "--steps", "6", "--checkpoint-every", "2", "--set", "progress=off", *SMALL,
                 "--out", str(run)]) == 0
    return run


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def prepared(case: Case, tmp_path: Path, run: Path) -> tuple[list[str], Path, Path]:
    tmp, out = tmp_path / "case", tmp_path / "out"
    tmp.mkdir()
    if case.setup is not None:
        case.setup(tmp, run)
    args = [a.format(tmp=tmp, run=run, out=out) for a in case.args]
    return args, tmp, out


def check_error(status: int, stderr: str, case: Case) -> None:
    lines = stderr.strip().splitlines()
    assert status == 2, stderr
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("naspipe: error: "), lines[0]
    assert case.expect in lines[0], lines[0]


def test_the_table_is_large_and_names_are_unique():
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)
    assert set(IN_SUBPROCESS) <= {c.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path, finished_run, capsys):
    args, tmp, out = prepared(case, tmp_path, finished_run)
    before, run_before = snapshot(tmp_path), snapshot(finished_run)
    capsys.readouterr()
    status = main(args)
    check_error(status, capsys.readouterr().err, case)
    assert not out.exists()
    assert snapshot(tmp_path) == before
    assert snapshot(finished_run) == run_before


@pytest.mark.parametrize("name", IN_SUBPROCESS)
def test_bad_input_contract_holds_for_a_real_process(name, tmp_path, tmp_path_factory, finished_run):
    case = next(c for c in CASES if c.name == name)
    args, tmp, out = prepared(case, tmp_path, finished_run)
    temp = tmp_path_factory.mktemp("TMPDIR")
    before = snapshot(tmp_path)
    result = run_cli(*args, env={"TMPDIR": str(temp)}, timeout=120)
    check_error(result.returncode, result.stderr, case)
    assert result.stdout == ""
    assert not out.exists()
    assert snapshot(tmp_path) == before
    assert [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")] == []  # torch's shared cache
