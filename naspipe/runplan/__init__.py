"""The run plan: everything decided before a task runs, once, in torch-free code, for both executors.

The runtime (:mod:`naspipe.runtime`, one process per stage) and the simulator
(:mod:`naspipe.sim`, discrete events) are two executors of the same plan; neither imports the
other. The plan is:

- :mod:`job`: the job (space, subnet stream, partition, pipeline plan, policy options) and
  where partition costs come from;
- :mod:`rules`: effective recompute, whether the device cache is used, its budget per stage
  and the predictor's horizon (from the system's capabilities, :mod:`naspipe.systems`);
- :mod:`rundir` and :mod:`runlock`: where a run works and how it is published;
- :mod:`subnet_file`: fixed subnets read from JSON (the config's ``subnet``, ``evaluate``).

It is not :mod:`naspipe.plan`, which plans the workflow's cluster jobs (their cost, their fit).
"""
