"""NASPipe's experiment suite: raw data -> profiles -> partitions -> training -> comparisons -> report.

Every step is one rule file under workflow/rules/ calling one `naspipe` command; a new step is a new
rule file included below plus a section of the report. See config/README.md for every config key.
"""

# The default config unless the command line names one (snakemake would deep-merge the two otherwise,
# so `--configfile config/paper.yaml` would also train the default's spaces).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/download.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/ablation.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/report.smk"


localrules:
    all,
    partition,
    compare,
    report,
    simulate,
    calibrate,
    attribute,
    bubble_models,


rule all:
    default_target: True
    input:
        REPORT_OUTPUTS,
        CALIBRATION_OUTPUTS,
