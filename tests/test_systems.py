"""The system registry: every system once, its capabilities read from its policy class."""

from __future__ import annotations

import pytest

from naspipe import config, systems
from naspipe.context.cache import CacheCapacityError
from naspipe.runplan import rules
from naspipe.scheduling.policies import POLICIES, POLICY_NAMES
from tests.conftest import make_plan


def test_every_policy_is_registered_once_in_report_order():
    names = systems.names()
    assert sorted(names) == sorted(POLICY_NAMES) and len(set(names)) == len(names)
    assert names[:2] == ("sequential", "csp")  # the reference, then NASPipe
    orders = [systems.get(n).report_order for n in names]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


def test_a_record_is_its_policy_class():
    for name in systems.names():
        record, cls = systems.get(name), POLICIES[name]
        for attr in (*systems.CAPABILITIES, "label", "report_order"):
            assert getattr(record, attr) == getattr(cls, attr), (name, attr)


def test_capabilities():
    assert systems.with_capability("mirroring") == ("csp", "csp-no-scheduler", "csp-no-predictor")
    assert systems.with_capability("uses_cache") == ("sequential", *systems.with_capability("mirroring"),
                                                     "csp-artifact")
    assert systems.with_capability("bulk_synchronous") == ("gpipe", "vpipe")
    assert systems.with_capability("swap_parameters") == ("vpipe",)
    assert systems.with_capability("causal") == ("sequential", "csp", "csp-no-scheduler")
    assert {n: systems.get(n).ablation for n in systems.with_capability("ablation")} == {
        "csp-no-scheduler": "no-scheduler", "csp-no-predictor": "no-predictor"}


def test_the_config_names_are_the_registrys():
    """Kept importable from naspipe.config for one release, computed from the registry."""
    assert config.MIRROR_SYSTEMS == systems.with_capability("mirroring")
    assert config.CACHE_SYSTEMS == systems.with_capability("uses_cache")


def test_unknown_names_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown system 'nope'; choose one of sequential, csp"):
        systems.get("nope")
    with pytest.raises(ValueError, match="unknown capability 'fast'"):
        systems.with_capability("fast")
    assert systems.rank("nope") == len(systems.names()) > systems.rank("csp-artifact")


@pytest.mark.parametrize("system", ["sequential", "csp", "gpipe", "vpipe", "pipedream"])
def test_effective_recompute(system):
    forced = systems.get(system).recompute
    for configured in (True, False):
        assert rules.effective_recompute(system, configured) == (configured if forced is None else forced)
    assert rules.effective_recompute("pipedream", True) is False


def test_cache_rules():
    cache_on = config.CacheConfig(enabled=True, horizon=5)
    assert rules.uses_cache("csp", cache_on) and rules.uses_cache("sequential", cache_on)
    assert not rules.uses_cache("gpipe", cache_on) and not rules.uses_cache("csp", None)
    assert not rules.uses_cache("csp", config.CacheConfig(enabled=False))
    assert rules.prefetch_horizon("csp", 5) == 5 and rules.prefetch_horizon("csp-no-predictor", 5) == 0


def test_cache_budget_is_k_times_the_largest_share_and_refuses_less():
    plan = make_plan(4, 2, 2)
    sizes = {lid: 10 + lid for lid in range(plan.structure.num_layers)}
    share = plan.largest_share(0, 8, sizes)
    assert rules.cache_budget(plan, 0, 8, sizes, config.CacheConfig(budget="3x")) == 3 * share
    assert rules.cache_budgets(plan, 8, sizes, config.CacheConfig(budget="999")) == [999, 999]
    with pytest.raises(CacheCapacityError, match=f"below one subnet's share of stage 0 \\({share} bytes; largest"):
        rules.cache_budget(plan, 0, 8, sizes, config.CacheConfig(budget=str(share - 1)))
