#!/usr/bin/env bash
# `make up` / `make down`: Airflow standalone in a process group of its own, stopped whole.
#
#   airflow_standalone.sh up     runs `airflow standalone` in a new session (its own process
#                                group: scheduler, dag-processor, triggerer, API server and the
#                                LocalExecutor's workers) and waits; Ctrl-C (SIGINT) or SIGTERM
#                                to this script, or `make down`, stops every process of it.
#   airflow_standalone.sh down   stops the `up` recorded in $AIRFLOW_HOME/standalone.pid.
#
# Stopping: SIGINT to standalone (the only signal it stops cleanly on), then, 60 s later, SIGINT
# to the whole group (a component still stopping), then SIGKILL to what is left of the group.
set -u
: "${AIRFLOW_HOME:?AIRFLOW_HOME must be set (the Makefile sets it)}"
PIDFILE="$AIRFLOW_HOME/standalone.pid"  # "<this script's pid> <airflow's process group>"
GRACE=${STATECORE_STOP_GRACE:-60}

alive() { kill -0 -- "-$1" 2>/dev/null; }

wait_gone() {  # wait_gone PGID SECONDS: whether the group is gone in time
  local i
  for ((i = 0; i < $2 * 2; i++)); do
    alive "$1" || return 0
    sleep 0.5
  done
  ! alive "$1"
}

stop_group() {
  local group=$1
  alive "$group" || return 0
  echo "statecore: stopping Airflow (process group $group)" >&2
  kill -INT "$group" 2>/dev/null
  wait_gone "$group" "$GRACE" && return 0
  kill -INT -- "-$group" 2>/dev/null
  wait_gone "$group" "$GRACE" && return 0
  echo "statecore: killing what is left of process group $group" >&2
  kill -KILL -- "-$group" 2>/dev/null
  wait_gone "$group" 10
}

case "${1:-}" in
up)
  mkdir -p "$AIRFLOW_HOME"
  if [ -f "$PIDFILE" ] && read -r owner group <"$PIDFILE" && alive "$group"; then
    echo "statecore: Airflow is already running (process group $group); 'make down' stops it" >&2
    exit 1
  fi
  setsid airflow standalone &  # setsid: a session and process group of its own
  group=$!
  echo "$$ $group" >"$PIDFILE"
  on_signal() {
    stop_group "$group"
    rm -f "$PIDFILE"
    exit 130
  }
  trap on_signal INT TERM HUP
  wait "$group"
  status=$?
  stop_group "$group"  # standalone exited by itself: nothing of it stays behind
  rm -f "$PIDFILE"
  exit "$status"
  ;;
down)
  if ! [ -f "$PIDFILE" ] || ! read -r owner group <"$PIDFILE"; then
    echo "statecore: no Airflow started by 'make up' is running ($PIDFILE is missing)" >&2
    exit 0
  fi
  if kill -0 "$owner" 2>/dev/null; then
    kill -TERM "$owner"  # its trap stops the group
    for ((i = 0; i < (GRACE * 2 + 20) * 2; i++)); do
      kill -0 "$owner" 2>/dev/null || break
      sleep 0.5
    done
  fi
  stop_group "$group"  # an `up` that is gone left its group behind
  rm -f "$PIDFILE"
  ;;
*)
  echo "usage: $0 up|down" >&2
  exit 2
  ;;
esac
