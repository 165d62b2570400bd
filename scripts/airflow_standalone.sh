#!/usr/bin/env bash
# `make up` / `make down`: make up's Airflow (scripts/airflow_up: PostgreSQL and Airflow's
# components, supervised) in a process group of its own, stopped whole.
#
#   airflow_standalone.sh up     runs scripts/airflow_up in a new session (its own process
#                                group: PostgreSQL, API server, scheduler, dag-processor,
#                                triggerer and the LocalExecutor's workers) and waits; Ctrl-C
#                                (SIGINT) or SIGTERM to this script, or `make down`, stops every
#                                process of it.
#   airflow_standalone.sh down   stops the `up` recorded in $AIRFLOW_HOME/standalone.pid.
#
# Stopping: SIGINT to the supervisor, which stops its components (SIGTERM to each, a second one
# to the triggerer once its trigger runner is gone: it would spin 10 s on it, its escalation
# delay), SIGKILL to what of them is left 8 s later, then PostgreSQL (fast shutdown). The API
# server is the last component to go; it took 7 s, 4 of them in the garbage collections of its
# interpreter's shutdown, before scripts/airflow_exit/sitecustomize.py froze the heap first.
# The supervisor is started with SIGINT at its default (python3 resets it before exec): bash
# starts a background command (`&`), and a shell started in the background starts everything,
# with SIGINT ignored. The triggerer nudge below stays as a second line of defence. What of the
# group is left STATECORE_STOP_GRACE seconds (12) after gets SIGTERM, 1 s later SIGKILL:
# stopped within 15 s, nothing left.
set -u
: "${AIRFLOW_HOME:?AIRFLOW_HOME must be set (the Makefile sets it)}"
PIDFILE="$AIRFLOW_HOME/standalone.pid"  # "<this script's pid> <airflow's process group>"
GRACE=${STATECORE_STOP_GRACE:-12}

alive() { kill -0 -- "-$1" 2>/dev/null; }

wait_gone() {  # wait_gone PGID SECONDS: whether the group is gone in time
  local i
  for ((i = 0; i < $2 * 2; i++)); do
    alive "$1" || return 0
    sleep 0.5
  done
  ! alive "$1"
}

triggerer_waiting() {  # triggerer_waiting PGID: the triggerer's pid once its runner is gone
  ps -o pid=,ppid=,stat=,args= -g "$1" | awk -v group="$1" '
    $0 ~ /airflow triggerer$/ { if ($2 == group) main = $1; else if ($3 !~ /^Z/) runner[$2] = 1 }
    END { if (main != "" && !(main in runner)) print main }'
}

stop_group() {
  local group=$1 start=$SECONDS triggerer nudged=""
  alive "$group" || return 0
  echo "statecore: stopping Airflow (process group $group)" >&2
  kill -INT "$group" 2>/dev/null
  while ((SECONDS - start < GRACE)); do
    if ! alive "$group"; then
      echo "statecore: Airflow stopped in $((SECONDS - start)) s" >&2
      return 0
    fi
    if [ -z "$nudged" ] && triggerer=$(triggerer_waiting "$group") \
      && [ -n "$triggerer" ]; then
      kill -TERM "$triggerer" 2>/dev/null  # its runner is gone: no need to wait 10 s for it
      echo "statecore: the triggerer ($triggerer) waits for a trigger runner that is gone:" \
        "its second signal ends that wait" >&2
      nudged=1
    fi
    sleep 0.25
  done
  echo "statecore: still stopping after $GRACE s: SIGTERM to the rest of process group $group:" >&2
  ps -o pid,etime,args -g "$group" >&2
  kill -TERM -- "-$group" 2>/dev/null
  wait_gone "$group" 1 && return 0
  echo "statecore: killing what is left of process group $group" >&2
  kill -KILL -- "-$group" 2>/dev/null
  wait_gone "$group" 10
}

case "${1:-}" in
up)
  mkdir -p "$AIRFLOW_HOME"
  # every Python process of Airflow skips the garbage collections of its interpreter's shutdown
  # (scripts/airflow_exit/sitecustomize.py): its API server took 4 s of make down's 7 s in them
  PYTHONPATH="$(cd "$(dirname "$0")" && pwd)/airflow_exit${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH
  if [ -f "$PIDFILE" ] && read -r owner group <"$PIDFILE" && alive "$group"; then
    echo "statecore: Airflow is already running (process group $group); 'make down' stops it" >&2
    exit 1
  fi
  # setsid: a session and process group of its own; python3: SIGINT at its default, not ignored
  # as bash leaves it for a background command, so the supervisor stops on it
  setsid python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' python3 "$(dirname "$0")/airflow_up" &
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
  stop_group "$group"  # the supervisor exited by itself: nothing of it stays behind
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
