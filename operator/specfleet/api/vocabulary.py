"""The names specfleet writes on objects and reads back: the kind's group, version and plural, labels, field
manager, tracks, commands, conditions.

They are part of the API as users and other tools see it (a label selector, a `kubectl annotate`, a
`kubectl wait --for=condition=...`), so they live at the bottom, importable by every layer. This module
imports only the standard library (and `specfleet.api` loads its models lazily), so the CLI, the simulator,
the benchmarks and the tests can name them without building the pydantic models.
"""

import re
from enum import StrEnum

GROUP = "specfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeDeployment"
PLURAL = "speculativedeployments"

LABEL_NAME = "specfleet.io/name"
LABEL_TRACK = "specfleet.io/track"
LABEL_REVISION = "specfleet.io/revision"
LABEL_CANDIDATE = "specfleet.io/candidate"
"""An experiment's candidate index on the pods of its side-by-side slice (track `candidate`)."""
LABEL_TRAFFIC = "specfleet.io/traffic"
"""`always` on the pods that take traffic whatever the canary does (stable and holdback, with a holdback):
the fleet Service selects them while the canary has none (a Service selector cannot say stable OR holdback)."""
ALWAYS_SERVED = "always"
LABEL_PREFLIGHT = "specfleet.io/preflight"
"""On a preflight Job and its pods: the fleet it checks for (not `specfleet.io/name`, which the fleet's Service
selects on)."""
LABEL_ENDPOINT_PICKER = "specfleet.io/endpoint-picker"
"""On an endpoint picker's pods (`trafficRouting.inferencePool.endpointPickerTemplate`): its name, which its Service
selects on. Not `specfleet.io/name` or a track: no Service or pool of the fleet may select a picker."""
FIELD_MANAGER = "specfleet"
INFERENCE_GROUP = "inference.networking.k8s.io"
INFERENCEPOOL_API_VERSION = f"{INFERENCE_GROUP}/v1"
"""Gateway API Inference Extension's InferencePool (v1): a fleet's track pools with `trafficRouting.inferencePool`."""
ANNOTATION_HTTP_ROUTE = "specfleet.io/http-route"
"""On a track's Service (`<name>-stable`, `-canary`, `-holdback`): the HTTPRoute (namespace/name) it was made for,
so that once `trafficRouting` is removed the operator can still ask that route whether it sends to the Service
before deleting it."""
COMMAND_PREFIX = "specfleet.io/"
PROMOTE_FULL = "full"
"""`specfleet.io/promote: full` skips the remaining steps."""

SERVING_FIELDS = ("model", "speculative", "engine", "accelerator", "template")
"""The spec's fields that decide what the pods run: a revision's serving snapshot (status, history) holds them,
and `undo` puts them back."""

COMMAND_TARGET = re.compile(r"\brevision=([A-Za-z0-9.-]+)")


class Track(StrEnum):
    STABLE = "stable"
    CANARY = "canary"
    HOLDBACK = "holdback"
    CANDIDATE = "candidate"
    """An experiment's candidates measured side by side: one Deployment per candidate (`<name>-candidate-<i>`)."""


SINGLE_TRACKS = (Track.STABLE, Track.CANARY, Track.HOLDBACK)
"""The tracks with one Deployment each (`<name>-<track>`)."""


class Command(StrEnum):
    """What a user can ask of a rollout, as annotations `specfleet.io/<command>` (the CLI writes them)."""

    PROMOTE = "promote"
    ABORT = "abort"
    RETRY = "retry"

    @property
    def annotation(self) -> str:
        return COMMAND_PREFIX + self.value


def command_target(value: str) -> str | None:
    """The revision a command was given for (`revision=<rev>` in its value), or None when it names none."""
    match = COMMAND_TARGET.search(value)
    return match.group(1) if match else None


class ConditionType(StrEnum):
    AVAILABLE = "Available"
    PROGRESSING = "Progressing"
    SPEC_VALID = "SpecValid"
    GUARDED = "Guarded"
    SYNCED = "Synced"
    """Whether the operator's last pass over the object completed: False (reason `ReconcileError`, or
    `ReconcileStalled` after 10 failures in a row) names what failed and the time of the next try while the pass
    is retried with backoff; the status beside it is the last one a pass completed."""
    SPECULATION_PAYING = "SpeculationPaying"
    ROLLED_OUT = "RolledOut"
    """Whether the rollout of the spec has ended (`api.rollout_result`): True when it succeeded, False when it
    failed (rolled back, aborted, invalid spec), Unknown while it goes on, so that `kubectl wait
    --for=condition=RolledOut` and `--for=condition=RolledOut=False` each return only at an end."""
    READY = "Ready"
    """True only when the current generation is fully rolled out with no live canary (`RolledOut` True);
    False otherwise, so `kubectl wait --for=condition=Ready` returns when the spec is promoted and not before."""
    RECONCILING = "Reconciling"
    """kstatus' in-progress condition: True while a canary, a promotion or replicas starting move the fleet;
    False otherwise (`rollout.health`)."""
    STALLED = "Stalled"
    """kstatus' failed condition: True when the rollout will not go on by itself (rolled back, aborted,
    invalid spec, no room for the canary's pods, a promotion past its deadline); False otherwise."""
