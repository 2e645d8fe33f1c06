"""Preflight of a new drafter: before a canary gets any traffic, a Job in the serving image checks that the
drafter shares the target's vocabulary and fits beside it in GPU memory (docs/preflight.md).

`check` (pure), `loading` (transformers) and `__main__` (`python -m specfleet.preflight`) run inside the
serving image and import nothing from specfleet outside this package; `job` renders the Job on the
operator's side and is left out of the image.
"""
