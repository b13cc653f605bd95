"""The paper's Table 2 as package data: consistent with the claims ledger, and beside ours in Table 2 and Figure 5."""

from __future__ import annotations

import pandas as pd

from naspipe.claims.ledger import load_claims
from naspipe.claims.paper import PAPER_STAGES, paper_table2, paper_vs_gpipe
from naspipe.report import sim_fig5
from naspipe.report.sim_table2 import COLUMNS, with_paper


def test_section_5_1_ranges_are_the_gpu_alu_ratios():
    ratios = paper_vs_gpipe().set_index(["space", "system"])["paper_vs_gpipe"]
    csp = ratios.xs("csp", level="system")
    assert round(csp.max(), 2) == 7.8 and round(csp.min(), 2) == 1.05  # "1.1x-7.8x" over GPipe
    table = paper_table2().set_index(["space", "system"])["gpu_alu_x"]
    over_pd = table.xs("csp", level="system") / table.xs("pipedream", level="system")
    over_vpipe = table.xs("csp", level="system") / table.xs("vpipe", level="system")
    assert round(over_pd.min(), 2) == 0.87 and round(over_pd.max(), 2) == 6.5
    assert round(over_vpipe.min(), 2) == 0.77 and round(over_vpipe.max(), 2) == 1.5


def test_the_ledgers_table_2_values_agree_with_the_paper_table():
    """A Table 2 claim read from sim_table2 at 8 GPUs states the same number as paper_table2.csv."""
    table = paper_table2().set_index(["space", "system"])
    column = {"batch": "batch", "exec_s": "exec_s", "bubble_ratio": "bubble_ratio",
              "cache_hit_rate": "cache_hit_rate", "host_gb": "cpu_gb"}
    checked = 0
    for claim in load_claims():
        m = claim.measure
        if (m.table != "sim_table2_systems" or m.column not in column or claim.divide_by is not None
                or m.where.get("stages") != (PAPER_STAGES,)):
            continue
        key = (m.where["space"][0], m.where["system"][0])
        assert float(claim.paper) == table.at[key, column[m.column]], claim.id  # type: ignore[arg-type]
        checked += 1
    assert checked >= 15


def ours(stages: int) -> pd.DataFrame:
    rows = [{"hardware": "hw", "space": "nlp.c1", "system": s, "stages": stages, "batch": 100, "max_batch": 100,
             "fits": True, "device_gb": 1.0, "host_gb": 2.0, "exec_s": 1.0, "bubble_ratio": 0.5,
             "cache_hit_rate": 0.9, "throughput_samples_s": t, "throughput_vs_gpipe": t / 10.0, "efficiency": 0.5}
            for s, t in (("csp", 20.0), ("gpipe", 10.0))]
    return pd.DataFrame(rows, columns=COLUMNS)


def test_paper_columns_sit_beside_ours_at_eight_gpus_only():
    frame = with_paper(pd.concat([ours(4), ours(PAPER_STAGES)], ignore_index=True))
    at8 = frame[frame["stages"] == PAPER_STAGES].set_index("system")
    assert at8.at["csp", "paper_batch"] == 192 and at8.at["csp", "paper_bubble_ratio"] == 0.39
    assert at8.at["gpipe", "paper_exec_s"] == 0.54 and round(at8.at["csp", "paper_vs_gpipe"], 2) == 7.8
    assert frame.loc[frame["stages"] == 4, "paper_batch"].isna().all()
    assert list(frame.columns).index("paper_batch") == list(frame.columns).index("batch") + 1


def test_figure_5_reading_compares_ours_with_the_papers_at_eight_gpus():
    frame = sim_fig5.paired(ours(PAPER_STAGES))
    reading = sim_fig5._reading(frame)
    assert "`nlp.c1` at D=8: ours 2.00x against the paper's 7.80x (0.26 of it)." in reading
    assert "paper: 1.05x-7.80x" in reading


def test_the_default_config_simulates_every_row_the_ledger_reads_from_the_simulated_table_2():
    """No simulated claim is 'not checkable here' in the default run for want of a simulated space."""
    from itertools import product
    from pathlib import Path

    import yaml

    sim = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())["simulate"]
    simulated = set(product(sim["spaces"], sim["systems"], sim["stages"]))
    needed = set()
    for claim in load_claims():
        for measure in (claim.measure, claim.divide_by, claim.reference, claim.artifact):
            if measure is None or measure.table != "sim_table2_systems":
                continue
            where = measure.where
            needed |= set(product(where.get("space", sim["spaces"]), where.get("system", sim["systems"]),
                                  where.get("stages", sim["stages"])))
    assert any(space == "nlp.c0" for space, _, _ in needed)  # the ledger does name the spaces beyond nlp.c1
    assert needed <= simulated, sorted(needed - simulated)
