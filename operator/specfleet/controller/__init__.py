"""The operator's shell: watch caches, a work queue, and the only code that writes to the API server.

Data flows one way: kopf watch events -> `store` -> `reconciler` (observe -> `rollout.decide` -> apply
through `kube`). All judgement lives in the pure modules; nothing here decides anything.
"""
