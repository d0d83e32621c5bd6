"""Evaluation: Pass@k (:mod:`acerl.passk`) and the report's statistics (:mod:`acerl.evaluate.stats`).

Import from the submodules (``from acerl.passk import pass_at_k``); this package file stays empty so
that importing one evaluation step does not pull in the others' dependencies.
"""
