#!/bin/bash
# Entrypoint of the statecore image (under tini).
#   driver ... | executor ...  Spark on Kubernetes pods: start the driver or an executor with the
#                              arguments and environment Spark gives those pods
#   anything else              run it as is (airflow ..., python ..., bash)
set -eo pipefail

case "${1:-}" in
  driver)
    shift
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    java_opts=()
    for v in "${!SPARK_JAVA_OPT_@}"; do java_opts+=("${!v}"); done
    classpath="${SPARK_CONF_DIR:-${SPARK_HOME}/conf}:${SPARK_HOME}/jars/*"
    if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"; fi
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${classpath}:${PWD}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
