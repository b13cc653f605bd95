"""Per-layer profiling: compute time, parameter copy time and bytes of every distinct layer.

One module per concept, so a reader of a profile never loads the torch measuring code:

- :mod:`~naspipe.profile.rows`: the row type and its CSV format (read, atomic write);
- :mod:`~naspipe.profile.costs`: rows -> one cost per supernet position, for the partitioner;
- :mod:`~naspipe.profile.table`: rows -> the markdown of the paper's Table 5;
- :mod:`~naspipe.profile.measure`: the measuring itself (torch);
- ``naspipe profile`` itself is :mod:`naspipe.commands.profile`.

The names below are resolved lazily on first use (``from naspipe.profile import
read_profile_csv`` imports only the CSV module), so the training job can read a profile
without importing the measuring code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from naspipe.lazy import lazy_attributes, lazy_dir

if TYPE_CHECKING:
    from naspipe.profile.costs import layer_costs_from_profile
    from naspipe.profile.measure import profile_space
    from naspipe.profile.rows import FIELDS, ROLES, ProfileRow, read_profile_csv, write_profile_csv
    from naspipe.profile.table import render_table5

_EXPORTS: dict[str, str] = {
    "FIELDS": "naspipe.profile.rows",
    "ROLES": "naspipe.profile.rows",
    "ProfileRow": "naspipe.profile.rows",
    "read_profile_csv": "naspipe.profile.rows",
    "write_profile_csv": "naspipe.profile.rows",
    "layer_costs_from_profile": "naspipe.profile.costs",
    "render_table5": "naspipe.profile.table",
    "profile_space": "naspipe.profile.measure",
}


__getattr__ = lazy_attributes(globals(), _EXPORTS)

__dir__ = lazy_dir(globals(), _EXPORTS)


__all__ = [
    "FIELDS",
    "ROLES",
    "ProfileRow",
    "layer_costs_from_profile",
    "profile_space",
    "read_profile_csv",
    "render_table5",
    "write_profile_csv",
]
