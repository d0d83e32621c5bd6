"""The result version of every pipeline stage: the code's share of what decides a stage's result.

Bump a stage's number in the same commit as a change to ``src/acerl`` that changes what the stage writes (a
grader fix, a sampler change, a new column); both tools then rerun exactly that stage's jobs and what depends
on them: the number is a Snakemake ``params`` value of the stage's rule and a DVC param of its stages (DVC reads
this file as a params file, so it must stay plain literals). A refactor, a docstring or a speed-up leaves the
numbers alone and reruns nothing (docs/sharing.md, "Code changes").
"""

STAGE_VERSIONS = {
    "prepare_data": 1,
    "prepare_base": 1,
    "prepare_verl_data": 1,
    "train_policy": 3,
    "sample": 3,
    "grade": 1,
    "passk": 1,
    "diagnose": 2,
    "report": 3,
}
