#!/usr/bin/env bash
# `make up` / `make down`: Airflow standalone in a process group of its own, stopped whole.
#
#   airflow_standalone.sh up     runs `airflow standalone` in a new session (its own process
#                                group: scheduler, dag-processor, triggerer, API server and the
#                                LocalExecutor's workers) and waits; Ctrl-C (SIGINT) or SIGTERM
#                                to this script, or `make down`, stops every process of it.
#   airflow_standalone.sh down   stops the `up` recorded in $AIRFLOW_HOME/standalone.pid.
#
# Stopping: SIGINT to standalone, which stops its components (SIGTERM to each) and waits for
# them: about 12 s, most of it the triggerer's own wait for its trigger runner. Standalone must
# be started with SIGINT at its default: bash starts a background command (`&`) with SIGINT
# ignored, and standalone then never saw the SIGINT (it used to be killed, 2 minutes later). What
# of the group is left STATECORE_STOP_GRACE seconds (13) later gets SIGTERM (a component's second
# signal: it exits at once), and 2 s after that SIGKILL: stopped within 15 s, nothing left.
set -u
: "${AIRFLOW_HOME:?AIRFLOW_HOME must be set (the Makefile sets it)}"
PIDFILE="$AIRFLOW_HOME/standalone.pid"  # "<this script's pid> <airflow's process group>"
GRACE=${STATECORE_STOP_GRACE:-13}

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
  local group=$1 start=$SECONDS
  alive "$group" || return 0
  echo "statecore: stopping Airflow (process group $group)" >&2
  kill -INT "$group" 2>/dev/null
  if wait_gone "$group" "$GRACE"; then
    echo "statecore: Airflow stopped in $((SECONDS - start)) s" >&2
    return 0
  fi
  echo "statecore: still stopping after $GRACE s: SIGTERM to the rest of process group $group:" >&2
  ps -o pid,etime,args -g "$group" >&2
  kill -TERM -- "-$group" 2>/dev/null
  wait_gone "$group" 2 && return 0
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
  # setsid: a session and process group of its own; `trap - INT`: SIGINT at its default, not
  # ignored as bash leaves it for a background command, so standalone stops on it
  (trap - INT && exec setsid airflow standalone) &
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
  start=$SECONDS
  if kill -0 "$owner" 2>/dev/null; then
    kill -TERM "$owner"  # its trap stops the group (what it says goes to the `up`'s output)
    for ((i = 0; i < (GRACE + 15) * 2; i++)); do
      kill -0 "$owner" 2>/dev/null || break
      sleep 0.5
    done
  fi
  stop_group "$group"  # an `up` that is gone left its group behind
  rm -f "$PIDFILE"
  echo "statecore: Airflow (process group $group) is stopped ($((SECONDS - start)) s)" >&2
  ;;
*)
  echo "usage: $0 up|down" >&2
  exit 2
  ;;
esac
