"""The paper's claims as data, the rules that judge them, and their evaluation against the workflow's outputs.

``claims.yaml`` (package data) lists every claim with its source, the paper's value and where
the suite measures it; :mod:`~naspipe.claims.ledger` loads and validates it,
:mod:`~naspipe.claims.verdicts` holds the verdict rules, :mod:`~naspipe.claims.measure`
reads a value out of the result tables and :mod:`~naspipe.claims.evaluate` puts them together.
No torch: checking claims is reading CSV files.
"""
