# The workflow lives in workflow/ (the snakemake catalog layout); this lets `snakemake` run from the root
# (the `include:` directive would keep the default target of this file, which has none).
workflow.include("workflow/Snakefile", overwrite_default_target=True)
