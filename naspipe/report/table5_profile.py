"""Table 5: compute versus parameter copy time of every profiled operation (paper Table 5).

The rows come from the ``naspipe profile`` CSVs given as ``--profile SPACE=F.csv``; the
markdown is the profiler's own Table 5 renderer per space, so the report and
``naspipe profile --table`` print the same table. ``copy_over_compute`` is copy time over
forward + backward time: below 1, swapping a layer in can hide behind computing another.
"""

from __future__ import annotations

import pandas as pd

from naspipe.profile import read_profile_csv, render_table5
from naspipe.report.inputs import ReportInputs
from naspipe.report.section import Table

COLUMNS = ["space", "op", "role", "input", "layers", "fwd_ms", "bwd_ms", "copy_ms", "copy_over_compute", "param_MiB",
           "device"]


def build(inputs: ReportInputs) -> Table:
    rows, bodies = [], []
    for space, path in sorted(inputs.profiles.items()):
        profile = read_profile_csv(path)
        bodies.append(f"**{space}** ({path.name})\n\n{render_table5(profile)}")
        rows += [{"space": space, "op": r.op, "role": r.role, "input": r.in_shape.split(";")[0].split(":")[0],
                  "layers": r.layers, "fwd_ms": r.fwd_ms, "bwd_ms": r.bwd_ms, "copy_ms": r.copy_ms,
                  "copy_over_compute": r.copy_ms / (r.fwd_ms + r.bwd_ms) if r.fwd_ms + r.bwd_ms > 0 else float("nan"),
                  "param_MiB": r.param_bytes / 2**20, "device": r.device} for r in profile]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return Table("table5_profile", "Table 5: per-operation compute and copy time", frame, _reading(frame),
                 "\n".join(bodies))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No profile was given (pass --profile SPACE=F.csv)."
    text = []
    for space, group in frame.groupby("space", sort=True):
        ratio = group["copy_over_compute"].dropna()
        device = ", ".join(sorted(group["device"].unique()))
        if ratio.empty:
            text.append(f"`{space}` ({device}): no operation has compute time to compare copies with.")
            continue
        hidden = int((ratio < 1).sum())
        text.append(f"`{space}` ({device}): copying an operation's parameters takes {ratio.min():.2g}x to "
                    f"{ratio.max():.2g}x its compute time; {hidden} of {len(ratio)} operations copy faster than they "
                    f"compute, so their swap can overlap computation.")
    return " ".join(text)
