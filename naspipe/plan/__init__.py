"""The workflow's job plan and its cost, before anything runs (torch-free at import).

:mod:`naspipe.plan.jobs` lists the training jobs a workflow configuration plans and the
``naspipe train`` settings of each; :mod:`naspipe.plan.cost` asks the simulator's memory
model and event engine what each needs (device and host bytes, seconds) on the configuration's
``hardware``; :mod:`naspipe.plan.resources` turns that into every rule's cluster resources;
:mod:`naspipe.plan.launch` says which stage counts can run where. The Snakemake workflow
and ``naspipe plan`` both ask these modules, so the checks and the printed cost agree.
"""
