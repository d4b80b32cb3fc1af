{{/*
Names. Every object is named from the release ("fullname"), so two releases
can share a namespace.
*/}}
{{- define "quorumbus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "quorumbus.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "quorumbus.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "quorumbus.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "quorumbus.storageName" -}}
{{- printf "%s-storage" (include "quorumbus.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- define "quorumbus.frontendName" -}}
{{- printf "%s-frontend" (include "quorumbus.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "quorumbus.gatewayName" -}}
{{- printf "%s-gateway" (include "quorumbus.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "quorumbus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "quorumbus.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object; selectorLabels is the stable subset selectors use. */}}
{{- define "quorumbus.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ include "quorumbus.tag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: quorumbus
{{- end -}}

{{/* selectorLabels takes (list $ "component"). */}}
{{- define "quorumbus.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "quorumbus.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "quorumbus.tag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{- define "quorumbus.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "quorumbus.tag" .) -}}
{{- end -}}
{{- end -}}

{{/*
The DNS name of storage pod N: the StatefulSet's pods are reachable at
<pod>.<headless service>.<namespace>.svc.<cluster domain> whether ready or
not (publishNotReadyAddresses), and the name survives a reschedule, which
is why Raft is given names, never pod IPs.
*/}}
{{- define "quorumbus.storageHost" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "quorumbus.storageName" $) (int (index . 1)) (include "quorumbus.storageName" $) $.Release.Namespace $.Values.clusterDomain -}}
{{- end -}}

{{/* -bootstrap: the first storage.bootstrapReplicas ordinals, id=host:port. */}}
{{- define "quorumbus.bootstrap" -}}
{{- $ := . -}}
{{- $out := list -}}
{{- range $i := until (int $.Values.storage.bootstrapReplicas) -}}
{{- $out = append $out (printf "%s-%d=%s:%d" (include "quorumbus.storageName" $) $i (include "quorumbus.storageHost" (list $ $i)) (int $.Values.storage.ports.grpc)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* -join: the gossip addresses of the bootstrap ordinals. */}}
{{- define "quorumbus.join" -}}
{{- $ := . -}}
{{- $out := list -}}
{{- range $i := until (int $.Values.storage.bootstrapReplicas) -}}
{{- $out = append $out (printf "%s:%d" (include "quorumbus.storageHost" (list $ $i)) (int $.Values.storage.ports.gossip)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* -placement for front-ends and gateways: every storage pod's gRPC address. */}}
{{- define "quorumbus.placement" -}}
{{- $ := . -}}
{{- $out := list -}}
{{- range $i := until (int $.Values.storage.replicas) -}}
{{- $out = append $out (printf "%s:%d" (include "quorumbus.storageHost" (list $ $i)) (int $.Values.storage.ports.grpc)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* The TLS Secret: the one given, or the one cert-manager writes. */}}
{{- define "quorumbus.tlsSecret" -}}
{{- if .Values.tls.certManager.enabled -}}
{{- default (printf "%s-tls" (include "quorumbus.fullname" .)) .Values.tls.secretName -}}
{{- else -}}
{{- .Values.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/*
The environment every process gets from the downward API: its pod's name
(the node's id, part of its DNS name) and IP (what it advertises for
gossip, and what listeners bind with listenHost: $(POD_IP)).
*/}}
{{- define "quorumbus.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}

{{- define "quorumbus.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "quorumbus.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Probes on the admin listener; docs/operations.md says what each means. */}}
{{- define "quorumbus.probes" -}}
{{- $https := and (eq (len .) 2) (index . 1) -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: http
    {{- if $https }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
livenessProbe:
  httpGet:
    path: /healthz
    port: http
    {{- if $https }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end -}}

{{/*
The cluster plane's mutual TLS (clusterTLS; docs/security.md): flags,
mount and volume for every process that speaks gRPC, each with its
role's certificate. Off (clusterTLS.enabled false) the processes get
-plain-cluster, without which they refuse to start.
*/}}
{{- define "quorumbus.clusterTLSArgs" -}}
{{- if .Values.clusterTLS.enabled -}}
- -cluster-tls-cert=/etc/quorumbus/cluster-tls/tls.crt
- -cluster-tls-key=/etc/quorumbus/cluster-tls/tls.key
- -cluster-ca=/etc/quorumbus/cluster-tls/ca.crt
{{- else -}}
- -plain-cluster
{{- end -}}
{{- end -}}

{{- define "quorumbus.clusterTLSMount" -}}
{{- if .Values.clusterTLS.enabled -}}
- name: cluster-tls
  mountPath: /etc/quorumbus/cluster-tls
  readOnly: true
{{- end -}}
{{- end -}}

{{/* The generated Secret of the cluster CA and every role's certificate. */}}
{{- define "quorumbus.clusterTLSSecret" -}}
{{- printf "%s-cluster-tls" (include "quorumbus.fullname" .) -}}
{{- end -}}

{{/* generated: true when no role's Secret is given (the chart makes them). */}}
{{- define "quorumbus.clusterTLSGenerated" -}}
{{- $s := .Values.clusterTLS.secrets -}}
{{- if not (or $s.node $s.frontend $s.gateway) }}true{{ end -}}
{{- end -}}

{{/* clusterTLSVolume takes (list $ role): role is node, frontend or gateway. */}}
{{- define "quorumbus.clusterTLSVolume" -}}
{{- $ := index . 0 -}}
{{- $role := index . 1 -}}
{{- if $.Values.clusterTLS.enabled -}}
- name: cluster-tls
  secret:
    {{- if include "quorumbus.clusterTLSGenerated" $ }}
    secretName: {{ include "quorumbus.clusterTLSSecret" $ }}
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: {{ $role }}.crt, path: tls.crt}
      - {key: {{ $role }}.key, path: tls.key}
    {{- else }}
    secretName: {{ index $.Values.clusterTLS.secrets $role }}
    {{- end }}
    defaultMode: 0400
{{- end -}}
{{- end -}}

{{/*
Checks that templates cannot express as schema: refused at install with a
message that says why.
*/}}
{{- define "quorumbus.validate" -}}
{{- $s := .Values.storage -}}
{{- if gt (int $s.bootstrapReplicas) (int $s.replicas) -}}
{{- fail (printf "storage.bootstrapReplicas (%d) cannot exceed storage.replicas (%d): the first pods bootstrap the meta group" (int $s.bootstrapReplicas) (int $s.replicas)) -}}
{{- end -}}
{{- if gt (int $s.groupReplicas) (int $s.replicas) -}}
{{- fail (printf "storage.groupReplicas (%d) cannot exceed storage.replicas (%d): each replica of a group needs its own node" (int $s.groupReplicas) (int $s.replicas)) -}}
{{- end -}}
{{- $quorumSlack := div (sub (min (int $s.groupReplicas) (int $s.bootstrapReplicas)) 1) 2 -}}
{{- if gt (int $s.pdb.maxUnavailable) (int $quorumSlack) -}}
{{- fail (printf "storage.pdb.maxUnavailable (%d) would let a drain take a majority of a group of %d replicas: at most %d" (int $s.pdb.maxUnavailable) (min (int $s.groupReplicas) (int $s.bootstrapReplicas)) (int $quorumSlack)) -}}
{{- end -}}
{{- $a := .Values.frontend.autoscaling -}}
{{- if and $a.enabled (gt (int $a.minReplicas) (int $a.maxReplicas)) -}}
{{- fail (printf "frontend.autoscaling.minReplicas (%d) exceeds maxReplicas (%d)" (int $a.minReplicas) (int $a.maxReplicas)) -}}
{{- end -}}
{{- if .Values.clusterTLS.secretName -}}
{{- fail "clusterTLS.secretName (one certificate for every pod) is gone: each role needs its own certificate (docs/security.md), so give clusterTLS.secrets.node, .frontend and .gateway, or none and the chart generates them" -}}
{{- end -}}
{{- $cs := .Values.clusterTLS.secrets -}}
{{- if and .Values.clusterTLS.enabled (or $cs.node $cs.frontend $cs.gateway) -}}
{{- if not (and $cs.node $cs.frontend (or $cs.gateway (not .Values.gateway.enabled))) -}}
{{- fail "clusterTLS.secrets: give a Secret for every role the release runs (node, frontend, and gateway with gateway.enabled), or none and the chart generates them" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.certManager.enabled) (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret) or tls.certManager.enabled" -}}
{{- end -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) -}}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name" -}}
{{- end -}}
{{- end -}}

{{/*
affinity takes (list $ "component" componentValues): anti-affinity on the
host (soft or hard) and a spread over zones, both on the component's
selector labels, so replicas of a group land on different machines and
zones when the cluster has them.
*/}}
{{- define "quorumbus.affinity" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := index . 2 -}}
{{- if or $v.affinity (ne $v.antiAffinity "none") }}
affinity:
  {{- if $v.affinity }}
  {{- toYaml $v.affinity | nindent 2 }}
  {{- else if eq $v.antiAffinity "hard" }}
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "quorumbus.selectorLabels" (list $ $component) | nindent 12 }}
  {{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "quorumbus.selectorLabels" (list $ $component) | nindent 14 }}
  {{- end }}
{{- end }}
{{- if $v.topologySpread.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ $v.topologySpread.maxSkew }}
    topologyKey: {{ $v.topologySpread.topologyKey }}
    whenUnsatisfiable: {{ $v.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "quorumbus.selectorLabels" (list $ $component) | nindent 8 }}
{{- end }}
{{- end -}}

{{/*
TLS and SAS flags (issue 22, docs/security.md): the AMQPS listener with
its certificate and key (re-read when cert-manager rotates them), and the
authorization rules file every front-end and gateway trusts. tlsArgs takes
(list $ port "-flag-naming-the-TLS-listener").
*/}}
{{- define "quorumbus.tlsArgs" -}}
{{- $ := index . 0 -}}
- {{ index . 2 }}={{ $.Values.listenHost }}:{{ index . 1 }}
- -tls-cert=/etc/quorumbus/tls/tls.crt
- -tls-key=/etc/quorumbus/tls/tls.key
{{- end -}}

{{- define "quorumbus.sasSecret" -}}
{{- default (printf "%s-sas" (include "quorumbus.fullname" .)) .Values.sas.existingSecret -}}
{{- end -}}

{{- define "quorumbus.sasArgs" -}}
- -sas-rules=/etc/quorumbus/sas/{{ .Values.sas.key }}
{{- end -}}

{{- define "quorumbus.secretMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/quorumbus/tls
  readOnly: true
{{- end }}
- name: sas
  mountPath: /etc/quorumbus/sas
  readOnly: true
{{- end -}}

{{- define "quorumbus.secretVolumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "quorumbus.tlsSecret" . }}
    defaultMode: 0440
{{- end }}
- name: sas
  secret:
    secretName: {{ include "quorumbus.sasSecret" . }}
    defaultMode: 0440
{{- end -}}

{{/*
Throttling (docs/security.md): front-ends and gateways spend one budget,
throttleCredits a second. Each joins the storage nodes' gossip under its
pod's name, counts the live front-ends and gateways there and enforces
its share (the gateways together a tenth, the front-ends the rest), so
the shares of all the release's pods add up to throttleCredits.
*/}}
{{- define "quorumbus.creditArgs" -}}
- -throttle-credits={{ .Values.throttleCredits }}
- -id=$(POD_NAME)
- -join={{ include "quorumbus.join" . }}
- -gossip-addr={{ .Values.listenHost }}:{{ .Values.storage.ports.gossip }}
- -gossip-advertise-addr=$(POD_IP):{{ .Values.storage.ports.gossip }}
{{- with .Values.gossip.keySecret }}
- -gossip-key-file=/etc/quorumbus/gossip/{{ $.Values.gossip.key }}
{{- end }}
{{- end -}}

{{- define "quorumbus.gossipPorts" -}}
- name: gossip-tcp
  containerPort: {{ .Values.storage.ports.gossip }}
  protocol: TCP
- name: gossip-udp
  containerPort: {{ .Values.storage.ports.gossip }}
  protocol: UDP
{{- end -}}

{{- define "quorumbus.gossipMount" -}}
{{- if .Values.gossip.keySecret -}}
- name: gossip
  mountPath: /etc/quorumbus/gossip
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "quorumbus.gossipVolume" -}}
{{- with .Values.gossip.keySecret -}}
- name: gossip
  secret:
    secretName: {{ . }}
    defaultMode: 0400
{{- end -}}
{{- end -}}
