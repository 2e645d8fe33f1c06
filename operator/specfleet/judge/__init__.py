"""Guardrails + the evidence of both tracks -> a verdict. Pure, and total: every input gives one of four answers.

Each guardrail is two one-sided tests on confidence bounds (the equivalence-testing rule):
- Fail: the bound on the good side is past the limit: the canary is surely worse than allowed. Evidence
  of harm wins over missing evidence elsewhere.
- Pass: the bound on the bad side is within the limit: the evidence *shows* the canary within it. An
  estimate past the limit, or too little evidence to bound it, is never a Pass.
- Inconclusive: the bounds straddle the limit, or too few samples, buckets too coarse, per-pod loads too
  different to compare, or no data; the reason says what it still needs (Flagger #1095).
- Error: Prometheus could not be asked (decided by the caller, which has the exception).

The evidence is everything since the step started, and the bounds are a confidence sequence
(`specfleet.stats.sequence_z`): valid at every look at once, narrowing as the evidence grows.

By concern: `evidence` (what a track measured, the shared formulas), `verdicts` (one guardrail's verdict
from its bounds), `guardrail` (what a guardrail is: the interface and the `Look` it judges), `guardrails/`
(one module per built-in guardrail, and the `GUARDRAILS` registry), `comparisons` (the shapes of check several
share), `canary` (`judge`: every guardrail, one verdict), `custom` (user-defined guardrails, with the same
statistics), `speedup` (the holdback speed-up), `drift` (the serving fleet against promotion), `wording`
(how numbers read in reasons).
"""

from specfleet.judge.canary import Judgement, Recent, judge, judged_guardrails, watch
from specfleet.judge.drift import DriftCheck, describe_mix, drift
from specfleet.judge.evidence import CustomReading, TrackEvidence, measurements
from specfleet.judge.speedup import speedup
from specfleet.judge.verdicts import LOAD_TOLERANCE

__all__ = [
    "LOAD_TOLERANCE",
    "CustomReading",
    "DriftCheck",
    "Judgement",
    "Recent",
    "TrackEvidence",
    "describe_mix",
    "drift",
    "judge",
    "judged_guardrails",
    "measurements",
    "speedup",
    "watch",
]
