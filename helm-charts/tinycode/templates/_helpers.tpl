{{/*
Helpers for the tinycode chart.

Object names derive from .Values.instance.name (the TinycodeInstance name), not
from the release name: the operator and its Route refer to them by these names.
The operator derives them (shortened with a digest where `<name><suffix>` would
pass its limit) and passes them under .Values.names; the chart never builds a
name from instance.name itself.
*/}}

{{/* The instance name, checked once so every name built from it is valid. */}}
{{- define "tinycode.instanceName" -}}
{{- $name := required "instance.name is required" .Values.instance.name | toString -}}
{{- if gt (len $name) 63 -}}
{{- fail (printf "instance.name %q is %d characters long; at most 63 are allowed (it is a label value)" $name (len $name)) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/*
Namespace of every namespaced object: the instance namespace. The release
itself (its records) lives in the operator's namespace, so this is never
.Release.Namespace and every object states it explicitly.
*/}}
{{- define "tinycode.namespace" -}}
{{- required "instance.namespace is required" .Values.instance.namespace -}}
{{- end -}}

{{/*
Labels that find an instance's objects outside its namespace (cluster-scoped
bindings, discovery RoleBindings), for cleanup when the namespace is gone.
*/}}
{{- define "tinycode.instanceLabels" -}}
tinycode.dev/instance-namespace: {{ include "tinycode.namespace" . | quote }}
tinycode.dev/instance-name: {{ include "tinycode.instanceName" . | quote }}
{{- end -}}

{{/* <name>-tinycode: ServiceAccount, Deployment, Service, NetworkPolicy. */}}
{{- define "tinycode.fullname" -}}
{{- required "names.fullname is required" .Values.names.fullname -}}
{{- end -}}

{{/* <name>-ollama: the bundled Ollama Deployment, Service, NetworkPolicy. */}}
{{- define "tinycode.ollamaName" -}}
{{- required "names.ollama is required" .Values.names.ollama -}}
{{- end -}}

{{/* <name>-tinycode-config: the generated-config ConfigMap. */}}
{{- define "tinycode.configMapName" -}}
{{- required "names.configMap is required" .Values.names.configMap -}}
{{- end -}}

{{/* <name>-data, <name>-projects, <name>-ollama-models: the PersistentVolumeClaims. */}}
{{- define "tinycode.dataPvcName" -}}
{{- required "names.dataPvc is required" .Values.names.dataPvc -}}
{{- end -}}

{{- define "tinycode.projectsPvcName" -}}
{{- required "names.projectsPvc is required" .Values.names.projectsPvc -}}
{{- end -}}

{{- define "tinycode.ollamaModelsPvcName" -}}
{{- required "names.ollamaModelsPvc is required" .Values.names.ollamaModelsPvc -}}
{{- end -}}

{{/* <name>-tinycode-discovery: the Role and RoleBinding in the instance namespace. */}}
{{- define "tinycode.discoveryRoleName" -}}
{{- required "names.discoveryRole is required" .Values.names.discoveryRole -}}
{{- end -}}

{{/* tinycode:<namespace>:<name>-cluster-role: the ClusterRoleBinding (cluster-scoped). */}}
{{- define "tinycode.clusterRoleBindingName" -}}
{{- required "names.clusterRoleBinding is required" .Values.names.clusterRoleBinding -}}
{{- end -}}

{{/* tinycode:<namespace>:<name>-discovery: the RoleBinding in each discovery namespace. */}}
{{- define "tinycode.discoveryBindingName" -}}
{{- required "names.discoveryBinding is required" .Values.names.discoveryBinding -}}
{{- end -}}

{{/* helm.sh/chart label value. */}}
{{- define "tinycode.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels. Call with (dict "ctx" $ "component" "server").
*/}}
{{- define "tinycode.selectorLabels" -}}
app.kubernetes.io/name: tinycode
app.kubernetes.io/instance: {{ include "tinycode.instanceName" .ctx | quote }}
app.kubernetes.io/component: {{ .component | quote }}
{{- end -}}

{{/*
Common labels for every object. Call with (dict "ctx" $ "component" "server").
*/}}
{{- define "tinycode.labels" -}}
{{ include "tinycode.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service | quote }}
app.kubernetes.io/part-of: tinycode-operator
helm.sh/chart: {{ include "tinycode.chart" .ctx | quote }}
{{- end -}}

{{/*
ownerReferences to the TinycodeInstance; renders nothing when instance.uid is
empty. Used on every namespaced object except PersistentVolumeClaims (they must
outlive the instance when retainOnDelete is set) and never on cluster-scoped
objects (a namespaced owner cannot own them).
*/}}
{{- define "tinycode.ownerReferences" -}}
{{- if .Values.instance.uid }}
ownerReferences:
  - apiVersion: tinycode.dev/v1alpha1
    kind: TinycodeInstance
    name: {{ include "tinycode.instanceName" . | quote }}
    uid: {{ .Values.instance.uid | quote }}
    controller: true
{{- end }}
{{- end -}}

{{/*
Metadata block shared by namespaced objects: name, namespace, labels and, when
"owned" is true, ownerReferences.
Call with (dict "ctx" $ "name" "<name>" "component" "server" "owned" true).
*/}}
{{- define "tinycode.metadata" -}}
name: {{ .name | quote }}
namespace: {{ include "tinycode.namespace" .ctx | quote }}
labels:
  {{- include "tinycode.labels" (dict "ctx" .ctx "component" .component) | nindent 2 }}
{{- if .owned }}
{{- include "tinycode.ownerReferences" .ctx }}
{{- end }}
{{- end -}}

{{/*
Restricted pod security context shared by every pod (see the SCC tiers): UID
1001, GID 0, non-root, seccomp RuntimeDefault. (hostPID is a pod spec field,
set by the tinycode Deployment for the shell tier only.)
*/}}
{{- define "tinycode.podSecurityContext" -}}
runAsUser: 1001
runAsGroup: 0
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
Container security context: no privilege escalation, not privileged, non-root,
a read-only root filesystem (what a container writes goes to its volumes: the
data and projects volumes, and the pod's scratch emptyDir at /tmp and the
XDG cache and state directories), ALL capabilities dropped; SYS_PTRACE added
back only when "shell" is true. Call with (dict "shell" true|false).
*/}}
{{- define "tinycode.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
runAsNonRoot: true
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
  {{- if .shell }}
  add:
    - SYS_PTRACE
  {{- end }}
{{- end -}}

{{/* True ("true") when the shell SCC tier is selected. */}}
{{- define "tinycode.isShell" -}}
{{- if eq (toString .Values.scc.tier) "shell" }}true{{ end -}}
{{- end -}}

{{/*
Sanity checks on the derived values the operator emits; a mismatch is an
operator bug, so fail loudly rather than render something half-right.
*/}}
{{- define "tinycode.validate" -}}
{{- $s := .Values.storage -}}
{{- if not (has (toString $s.dataVolume) (list "pvc" "emptyDir")) -}}
{{- fail (printf "storage.dataVolume must be \"pvc\" or \"emptyDir\", got %q" (toString $s.dataVolume)) -}}
{{- end -}}
{{- if not (has (toString $s.projectsVolume) (list "pvc" "hostPath")) -}}
{{- fail (printf "storage.projectsVolume must be \"pvc\" or \"hostPath\", got %q" (toString $s.projectsVolume)) -}}
{{- end -}}
{{- if and (eq (toString $s.projectsVolume) "hostPath") (not $s.hostPath.path) -}}
{{- fail "storage.projectsVolume is \"hostPath\" but storage.hostPath.path is empty" -}}
{{- end -}}
{{- if not (has (toString $s.projectsAccessMode) (list "ReadWriteOnce" "ReadWriteMany")) -}}
{{- fail (printf "storage.projectsAccessMode must be ReadWriteOnce or ReadWriteMany, got %q" (toString $s.projectsAccessMode)) -}}
{{- end -}}
{{- if not (has (toString .Values.scc.tier) (list "restricted" "hostpath" "shell")) -}}
{{- fail (printf "scc.tier must be restricted, hostpath or shell, got %q" (toString .Values.scc.tier)) -}}
{{- end -}}
{{- if not .Values.scc.name -}}
{{- fail "scc.name is required" -}}
{{- end -}}
{{- if and .Values.clusterAdmin.enabled (not .Values.clusterAdmin.mountSecretName) -}}
{{- fail "clusterAdmin.enabled is true but clusterAdmin.mountSecretName is empty" -}}
{{- end -}}
{{- end -}}

{{/*
A fixed shell script shipped with the chart under files/ (never templated).
Call with (dict "ctx" $ "file" "files/<name>.sh").
*/}}
{{- define "tinycode.script" -}}
{{- $text := .ctx.Files.Get .file -}}
{{- if not $text -}}
{{- fail (printf "%s is missing from the chart (the chart must be installed with its files/ directory)" .file) -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/*
Requests and limits by resource name (cpu, memory, extended resources), each
quantity quoted. Takes {limits: {...}, requests: {...}}.
*/}}
{{- define "tinycode.resources" -}}
{{- with .limits }}
limits:
  {{- range $k, $v := . }}
  {{ $k }}: {{ $v | toString | quote }}
  {{- end }}
{{- end }}
{{- with .requests }}
requests:
  {{- range $k, $v := . }}
  {{ $k }}: {{ $v | toString | quote }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
imagePullSecrets of the pods (spec.imagePullSecrets and the class's).
*/}}
{{- define "tinycode.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . | quote }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
A NetworkPolicy's ingress rules for the pods that serve the UI on .port:
the router's or ingress controller's namespaces and the instance's own; the
activity port (4097) for the operator alone. Call with (dict "ctx" . "port" N).
*/}}
{{- define "tinycode.publicIngress" -}}
{{- /* The UI is for the router and the instance's own namespace only, not every pod in the cluster. */}}
- from:
    - namespaceSelector:
        matchLabels:
          {{- required "networkPolicy.ingressNamespaceLabels is required" .ctx.Values.networkPolicy.ingressNamespaceLabels | toYaml | nindent 10 }}
    - podSelector: {}
  ports:
    - protocol: TCP
      port: {{ .port }}
{{- /* The activity report (idle stop) is for the operator alone. */}}
- from:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: {{ required "networkPolicy.operatorNamespace is required" .ctx.Values.networkPolicy.operatorNamespace | quote }}
  ports:
    - protocol: TCP
      port: 4097
{{- end }}
{{/*
A NetworkPolicy's egress rules: anywhere but the denied (link-local and
metadata) addresses.
*/}}
{{- define "tinycode.egress" -}}
- to:
    - namespaceSelector: {}
    - ipBlock:
        cidr: 0.0.0.0/0
        except:
          {{- .Values.networkPolicy.egressDeniedV4 | toYaml | nindent 10 }}
    - ipBlock:
        cidr: ::/0
        except:
          {{- .Values.networkPolicy.egressDeniedV6 | toYaml | nindent 10 }}
{{- end }}

{{- /* The egress proxy's address for the pod's programs, where the class
limits egress (empty otherwise). Both spellings: tools read one or the other.
Loopback stays direct: the model-key proxy beside the agent. */}}
{{- define "tinycode.egressEnv" -}}
{{- if .Values.egress.enabled }}
{{- $proxy := printf "http://%s:3128" .Values.names.egress }}
{{- range list "HTTPS_PROXY" "HTTP_PROXY" "https_proxy" "http_proxy" }}
- name: {{ . }}
  value: {{ $proxy | quote }}
{{- end }}
{{- $direct := "localhost,127.0.0.1,::1" }}
{{- if .Values.ollama.enabled }}
{{- /* The bundled Ollama, which its NetworkPolicy lets the agent reach. */}}
{{- $direct = printf "%s,%s" $direct .Values.names.ollama }}
{{- end }}
{{- range list "NO_PROXY" "no_proxy" }}
- name: {{ . }}
  value: {{ $direct | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- /* DNS, and DNS servers alone: the cluster's DNS pods (kube-system's,
answering on 53; OpenShift's in openshift-dns, on 5353 behind the Service's
53) and the addresses the cluster-admin names for DNS served outside pods
(--cluster-dns-cidrs: a node's own address, a node-local cache). Never a
server on the internet, nor any other pod or host on those ports. */}}
{{- define "tinycode.dnsEgress" -}}
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: kube-system
      podSelector:
        matchLabels:
          k8s-app: kube-dns
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: openshift-dns
    {{- range .Values.egress.dnsCidrs }}
    - ipBlock:
        cidr: {{ . | quote }}
    {{- end }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
    - protocol: UDP
      port: 5353
    - protocol: TCP
      port: 5353
{{- end }}

{{- /* The instance's egress proxy. */}}
{{- define "tinycode.toEgressProxy" -}}
- to:
    - podSelector:
        matchLabels:
          {{- include "tinycode.selectorLabels" (dict "ctx" . "component" "egress") | nindent 10 }}
  ports:
    - protocol: TCP
      port: 3128
{{- end }}
