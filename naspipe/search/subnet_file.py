"""Moved to :mod:`naspipe.runplan.subnet_file` (the run plan reads the config's ``subnet``); kept for one release."""

from __future__ import annotations

from naspipe.runplan.subnet_file import check_subnet, read_subnets, subnet_json

__all__ = ["check_subnet", "read_subnets", "subnet_json"]
