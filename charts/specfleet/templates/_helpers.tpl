{{/* Names, labels and the RBAC rules shared by the templates. */}}

{{- define "specfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "specfleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "specfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "specfleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "specfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specfleet
{{- end -}}

{{- define "specfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "specfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "specfleet.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Leases the operator's replicas hold: one, or one per shard (`specfleet.sharding.Shard.lease_name`),
and, on an install or upgrade (`lookup` sees the cluster; `helm template` does not), the release's shard Leases
that already exist: during a change of `shards` the old shards still run and must renew, then release, theirs. */}}
{{- define "specfleet.leaseNames" -}}
{{- $fullname := include "specfleet.fullname" . -}}
{{- $shards := int .Values.shards -}}
{{- $names := list -}}
{{- if gt $shards 1 -}}
{{- range $i := until $shards -}}
{{- $names = append $names (printf "%s-shard-%d-of-%d" $fullname $i $shards) -}}
{{- end -}}
{{- else -}}
{{- $names = append $names $fullname -}}
{{- end -}}
{{- $existing := lookup "coordination.k8s.io/v1" "Lease" .Release.Namespace "" -}}
{{- range ($existing.items | default list) -}}
{{- if or (hasPrefix (printf "%s-shard-" $fullname) .metadata.name) (eq .metadata.name $fullname) -}}
{{- $names = append $names .metadata.name -}}
{{- end -}}
{{- end -}}
{{- range ($names | uniq) }}
- {{ . }}
{{- end -}}
{{- end -}}

{{/* Whether to create the monitoring.coreos.com/v1 kind given as .kind. */}}
{{- define "specfleet.monitoringApi" -}}
{{- if or .root.Values.monitoring.force (.root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind)) -}}true{{- end -}}
{{- end -}}

{{/*
The namespaced permissions the operator uses, derived from operator/specfleet/controller/kube.py and
handlers.py: watch SpeculativeDeployments (kopf), patch them (consumed promote/abort/retry annotations)
and their status; own Deployments and Services (watch, get on a name conflict, create, server-side
apply = patch, delete); watch Pods (readiness); create core/v1 Events and patch them (a repeat counts on the first). Secrets, ConfigMaps (prompts of
output equivalence), HTTPRoutes and InferencePools only when a value turns them on.
*/}}
{{- define "specfleet.namespacedRules" -}}
- apiGroups: [specfleet.io]
  resources: [speculativedeployments]
  verbs: [list, watch, patch]
- apiGroups: [specfleet.io]
  resources: [speculativedeployments/status]
  verbs: [patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- if .Values.prometheusAuth.enabled }}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
  {{- with .Values.prometheusAuth.secretNames }}
  resourceNames: {{ toJson . }}
  {{- end }}
{{- end }}
{{- if and .Values.notifications.enabled .Values.notifications.namespaceSecrets }}
# A namespace's own notification targets: that one Secret name, never list or watch.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
  resourceNames: [specfleet-notifications]
{{- end }}
{{- if .Values.outputEquivalencePrompts.enabled }}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
  {{- with .Values.outputEquivalencePrompts.configMapNames }}
  resourceNames: {{ toJson . }}
  {{- end }}
{{- end }}
{{- if .Values.gatewayAPI.enabled }}
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [get, patch]
# A route in another namespace is written only when a ReferenceGrant there consents (docs/install.md): listed
# when such a fleet is reconciled, never written.
- apiGroups: [gateway.networking.k8s.io]
  resources: [referencegrants]
  verbs: [list]
{{- end }}
{{- if .Values.inferencePools.enabled }}
# The fleet's own InferencePools (trafficRouting.inferencePool), owned like its Services.
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, list, watch, create, patch, delete]
{{- end }}
{{- end -}}
