"""Preflight of a new drafter: before a canary gets any traffic, a Job in the serving image checks that the
drafter shares the target's vocabulary and fits beside it in GPU memory (docs/preflight.md).

`check` (pure), `loading` (transformers) and `__main__` (`python -m specfleet.preflight`) run inside the
serving image and import nothing from specfleet outside this package; `job` renders the Job on the
operator's side and is left out of the image.
"""

LABEL_PREFLIGHT = "specfleet.io/preflight"
"""On a preflight Job and its pods: the fleet it checks for. Here, not in the Job's module, so that the dev
cluster (kwok's stages) and the simulator can name it without loading specfleet's API models."""
