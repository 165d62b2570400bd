{{/* Names ------------------------------------------------------------------------------ */}}

{{- define "statecore.fullname" -}}
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

{{- define "statecore.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: statecore
{{- end -}}

{{/* Selector labels of one component: include with (list $ "scheduler") */}}
{{- define "statecore.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ default $.Chart.Name $.Values.nameOverride }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "statecore.image" -}}
{{- $img := .Values.images.airflow -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* Secret names: the user's Secret when named, otherwise the generated one. */}}
{{- define "statecore.fernetKeySecret" -}}
{{- default (printf "%s-fernet-key" (include "statecore.fullname" .)) .Values.fernetKeySecretName -}}
{{- end -}}
{{- define "statecore.apiSecretKeySecret" -}}
{{- default (printf "%s-api-secret-key" (include "statecore.fullname" .)) .Values.apiSecretKeySecretName -}}
{{- end -}}
{{- define "statecore.jwtSecret" -}}
{{- default (printf "%s-jwt-secret" (include "statecore.fullname" .)) .Values.jwtSecretName -}}
{{- end -}}
{{- define "statecore.adminPasswordSecret" -}}
{{- default (printf "%s-admin-password" (include "statecore.fullname" .)) .Values.auth.adminPasswordSecretName -}}
{{- end -}}
{{- define "statecore.metadataSecret" -}}
{{- default (printf "%s-metadata" (include "statecore.fullname" .)) .Values.data.metadataSecretName -}}
{{- end -}}
{{- define "statecore.catalogSecret" -}}
{{- default (printf "%s-catalog" (include "statecore.fullname" .)) .Values.data.catalogSecretName -}}
{{- end -}}
{{- define "statecore.postgresqlSecret" -}}
{{- printf "%s-postgresql" (include "statecore.fullname" .) -}}
{{- end -}}
{{- define "statecore.postgresqlHost" -}}
{{- printf "%s-postgresql.%s.svc" (include "statecore.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* Service accounts */}}
{{- define "statecore.airflowServiceAccount" -}}
{{- printf "%s-airflow" (include "statecore.fullname" .) -}}
{{- end -}}
{{- define "statecore.schedulerServiceAccount" -}}
{{- printf "%s-scheduler" (include "statecore.fullname" .) -}}
{{- end -}}
{{- define "statecore.workerServiceAccount" -}}
{{- printf "%s-worker" (include "statecore.fullname" .) -}}
{{- end -}}
{{- define "statecore.sparkServiceAccount" -}}
{{- default (printf "%s-spark" (include "statecore.fullname" .)) .Values.spark.serviceAccount.name -}}
{{- end -}}
{{/* The service account of the pods that run tasks, hence spark-submit. */}}
{{- define "statecore.taskServiceAccount" -}}
{{- if eq .Values.executor "KubernetesExecutor" -}}
{{- include "statecore.workerServiceAccount" . -}}
{{- else -}}
{{- include "statecore.schedulerServiceAccount" . -}}
{{- end -}}
{{- end -}}

{{- define "statecore.apiServerUrl" -}}
{{- printf "http://%s-api-server.%s.svc:%v" (include "statecore.fullname" .) .Release.Namespace .Values.ports.apiServer -}}
{{- end -}}

{{- define "statecore.warehouseUri" -}}
{{- if eq .Values.warehouse.type "s3" -}}
{{- $prefix := trimAll "/" .Values.warehouse.s3.prefix -}}
{{- if $prefix -}}
{{- printf "s3://%s/%s" .Values.warehouse.s3.bucket $prefix -}}
{{- else -}}
{{- printf "s3://%s" .Values.warehouse.s3.bucket -}}
{{- end -}}
{{- else -}}
{{- .Values.warehouse.pvc.mountPath -}}
{{- end -}}
{{- end -}}

{{/* STATECORE_INPUT: the input location without a trailing slash; empty when not set. */}}
{{- define "statecore.inputLocation" -}}
{{- $location := .Values.statecore.input.location -}}
{{- if ne $location "/" }}{{ $location | trimSuffix "/" }}{{ else }}{{ $location }}{{ end -}}
{{- end -}}

{{/* "true" when the input is a path on its own claim, mounted read-only at that path. */}}
{{- define "statecore.inputOnClaim" -}}
{{- if and .Values.statecore.input.existingClaim (hasPrefix "/" .Values.statecore.input.location) }}true{{ end -}}
{{- end -}}

{{- define "statecore.warehouseClaim" -}}
{{- default (printf "%s-warehouse" (include "statecore.fullname" .)) .Values.warehouse.pvc.existingClaim -}}
{{- end -}}

{{/*
Secret data that survives upgrades: the value already stored in the cluster under
(namespace, name, key) when there is one, else the given fresh value. Returns base64.
*/}}
{{- define "statecore.keptSecretValue" -}}
{{- $existing := lookup "v1" "Secret" .namespace .name -}}
{{- $data := dig "data" dict $existing -}}
{{- if hasKey $data .key -}}
{{- index $data .key -}}
{{- else -}}
{{- .fresh | b64enc -}}
{{- end -}}
{{- end -}}

{{- define "statecore.generatedSecretMetadata" -}}
annotations:
  # Generated once; keep it when the release is uninstalled so data it protects stays readable.
  helm.sh/resource-policy: keep
{{- end -}}

{{/* Security contexts ------------------------------------------------------------------ */}}

{{- define "statecore.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.uid }}
runAsGroup: {{ .Values.gid }}
fsGroup: {{ .Values.gid }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "statecore.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.uid }}
runAsGroup: {{ .Values.gid }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Airflow containers ----------------------------------------------------------------- */}}

{{/* Environment shared by every Airflow container: secrets only through secretKeyRef. */}}
{{- define "statecore.airflowEnv" -}}
- name: AIRFLOW__CORE__FERNET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "statecore.fernetKeySecret" . }}
      key: fernet-key
- name: AIRFLOW__DATABASE__SQL_ALCHEMY_CONN
  valueFrom:
    secretKeyRef:
      name: {{ include "statecore.metadataSecret" . }}
      key: connection
- name: AIRFLOW__API__SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "statecore.apiSecretKeySecret" . }}
      key: api-secret-key
- name: AIRFLOW__API_AUTH__JWT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "statecore.jwtSecret" . }}
      key: jwt-secret
- name: STATECORE_CATALOG_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "statecore.catalogSecret" . }}
      key: connection
{{- if and (eq .Values.warehouse.type "s3") .Values.warehouse.s3.credentialsSecretName }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.warehouse.s3.credentialsSecretName }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.warehouse.s3.credentialsSecretName }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- /* In Spark client mode the driver runs here; executors reach it by pod IP. */}}
- name: SPARK_LOCAL_HOSTNAME
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- range .Values.secret }}
- name: {{ .envName }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .secretKey }}
{{- end }}
{{- range .Values.env }}
- name: {{ .name }}
  value: {{ .value | quote }}
{{- end }}
{{- end -}}

{{- define "statecore.airflowEnvFrom" -}}
- configMapRef:
    name: {{ include "statecore.fullname" . }}-config
{{- end -}}

{{/* Volumes of every Airflow pod: config files, writable emptyDirs, the warehouse claim. */}}
{{- define "statecore.airflowVolumes" -}}
- name: airflow-config
  configMap:
    name: {{ include "statecore.fullname" . }}-airflow-config
- name: spark-conf
  configMap:
    name: {{ include "statecore.fullname" . }}-config
    items:
      - {key: spark-defaults.conf, path: spark-defaults.conf}
      - {key: spark-pod-template.yaml, path: spark-pod-template.yaml}
- name: tmp
  emptyDir: {}
- name: home
  emptyDir: {}
- name: logs
  emptyDir: {}
- name: statecore-home
  emptyDir: {}
{{- if eq .Values.warehouse.type "pvc" }}
- name: warehouse
  persistentVolumeClaim:
    claimName: {{ include "statecore.warehouseClaim" . }}
{{- end }}
{{- if include "statecore.inputOnClaim" . }}
- name: input
  persistentVolumeClaim:
    claimName: {{ .Values.statecore.input.existingClaim }}
    readOnly: true
{{- end }}
{{- end -}}

{{- define "statecore.airflowVolumeMounts" -}}
- name: airflow-config
  mountPath: /opt/airflow/airflow.cfg
  subPath: airflow.cfg
  readOnly: true
- name: spark-conf
  mountPath: /opt/statecore/spark-conf
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /home/airflow
- name: logs
  mountPath: /opt/airflow/logs
- name: statecore-home
  mountPath: {{ .Values.statecore.home }}
{{- if eq .Values.warehouse.type "pvc" }}
- name: warehouse
  mountPath: {{ .Values.warehouse.pvc.mountPath }}
{{- end }}
{{- if include "statecore.inputOnClaim" . }}
- name: input
  mountPath: {{ include "statecore.inputLocation" . }}
  readOnly: true
  {{- with .Values.statecore.input.subPath }}
  subPath: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Init container that blocks until `airflow db migrate` has run (the migration Job). */}}
{{- define "statecore.waitForMigrations" -}}
- name: wait-for-airflow-migrations
  image: {{ include "statecore.image" . }}
  imagePullPolicy: {{ .Values.images.airflow.pullPolicy }}
  args: ["airflow", "db", "check-migrations", "--migration-wait-timeout", "600"]
  securityContext:
    {{- include "statecore.containerSecurityContext" . | nindent 4 }}
  resources:
    {{- toYaml .Values.initContainers.resources | nindent 4 }}
  env:
    {{- include "statecore.airflowEnv" . | nindent 4 }}
  envFrom:
    {{- include "statecore.airflowEnvFrom" . | nindent 4 }}
  volumeMounts:
    {{- include "statecore.airflowVolumeMounts" . | nindent 4 }}
{{- end -}}

{{/* `airflow jobs check` exec probe for scheduler-like components: (list $ "TriggererJob" probeValues) */}}
{{- define "statecore.jobsCheckProbe" -}}
{{- $probe := index . 2 -}}
exec:
  command: ["airflow", "jobs", "check", "--job-type", {{ index . 1 | quote }}, "--local"]
initialDelaySeconds: {{ $probe.initialDelaySeconds }}
periodSeconds: {{ $probe.periodSeconds }}
timeoutSeconds: {{ $probe.timeoutSeconds }}
failureThreshold: {{ $probe.failureThreshold }}
{{- end -}}

{{- define "statecore.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "statecore.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Checksums that roll the Airflow pods when their configuration changes. */}}
{{- define "statecore.configChecksums" -}}
checksum/airflow-config: {{ include (print .Template.BasePath "/airflow-configmap.yaml") . | sha256sum }}
checksum/statecore-config: {{ include (print .Template.BasePath "/statecore-configmap.yaml") . | sha256sum }}
{{- end -}}
