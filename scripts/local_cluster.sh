#!/usr/bin/env bash
# A Spark standalone cluster on this machine, for tests and trying strata on a cluster:
# one master and two workers (1 core, 2g each), all bound to 127.0.0.1, run with the
# venv's own PySpark (bin/spark-class), its Python as the workers' Python.
#
#   scripts/local_cluster.sh start    # start what is not running; wait for 2 ALIVE workers
#   scripts/local_cluster.sh status   # the processes and the master's view of the workers
#   scripts/local_cluster.sh stop     # kill everything it started (safe to repeat)
#
# `start` prints the master URL (spark://127.0.0.1:PORT) as its last line; then e.g.
#   PYSPARK_PYTHON=.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \
#     .venv/bin/strata run PIPELINE --home DIR --master spark://127.0.0.1:7078
# The home must be on a filesystem every worker sees: here, the local disk.
#
# Environment (defaults in brackets):
#   STRATA_CLUSTER_DIR          run dir: pids, logs, worker work dirs [.cluster in the repo]
#   STRATA_CLUSTER_PORT         master RPC port [7078]
#   STRATA_CLUSTER_WEBUI_PORT   master web UI port, serves /json [8090]
#   STRATA_CLUSTER_WORKER_WEBUI_PORTS  the workers' web UI ports [8091 8092]
#   STRATA_CLUSTER_WORKERS      number of workers [2]
#   STRATA_CLUSTER_CORES / STRATA_CLUSTER_MEMORY  per worker [1 / 2g]
#   STRATA_CLUSTER_TIMEOUT      seconds `start` waits for the workers [90]
#   STRATA_CLUSTER_PYTHONPATH   extra PYTHONPATH for the workers' Python (code that is not
#                               shipped with addPyFile) [none]
#   PYTHON                      the Python with PySpark [the repo's .venv/bin/python]
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
RUN_DIR="${STRATA_CLUSTER_DIR:-$ROOT/.cluster}"
PORT="${STRATA_CLUSTER_PORT:-7078}"
WEBUI_PORT="${STRATA_CLUSTER_WEBUI_PORT:-8090}"
NWORKERS="${STRATA_CLUSTER_WORKERS:-2}"
read -r -a WORKER_UI_PORTS <<< "${STRATA_CLUSTER_WORKER_WEBUI_PORTS:-8091 8092}"
CORES="${STRATA_CLUSTER_CORES:-1}"
MEMORY="${STRATA_CLUSTER_MEMORY:-2g}"
TIMEOUT="${STRATA_CLUSTER_TIMEOUT:-90}"
MASTER_URL="spark://127.0.0.1:$PORT"
JSON_URL="http://127.0.0.1:$WEBUI_PORT/json"

die() { echo "local_cluster: $*" >&2; exit 1; }

alive() {  # pid file -> 0 if its process runs
    [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

alive_workers() {  # the master's count of ALIVE workers, or nothing
    "$PYTHON" - "$JSON_URL" <<'EOF' 2>/dev/null || true
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    info = json.load(r)
print(sum(w.get("state") == "ALIVE" for w in info.get("workers", [])))
EOF
}

launch() {  # name, then the spark-class arguments: start in the background, own process group
    local name=$1; shift
    # setsid: the daemon (and the executors and Python workers it forks) form one process
    # group, so stop kills them together; spark-class execs the JVM, so the pid is the JVM's.
    setsid "$SPARK_HOME/bin/spark-class" "$@" >"$RUN_DIR/logs/$name.log" 2>&1 < /dev/null &
    echo $! > "$RUN_DIR/$name.pid"
}

setup_env() {
    command -v java >/dev/null 2>&1 || [[ -n "${JAVA_HOME:-}" ]] \
        || die "Java not found (install a JDK 17+ or set JAVA_HOME)"
    [[ -x "$PYTHON" ]] || die "no Python at $PYTHON (run make setup, or set PYTHON)"
    SPARK_HOME="$("$PYTHON" -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" \
        || die "$PYTHON cannot import pyspark"
    export SPARK_HOME
    export SPARK_LOCAL_IP=127.0.0.1 SPARK_MASTER_HOST=127.0.0.1
    export PYSPARK_PYTHON="$PYTHON" PYSPARK_DRIVER_PYTHON="$PYTHON"
    export SPARK_CONF_DIR="$RUN_DIR/conf"  # empty: no site spark-defaults.conf leaks in
    export SPARK_NO_DAEMONIZE=1
    if [[ -n "${STRATA_CLUSTER_PYTHONPATH:-}" ]]; then
        export PYTHONPATH="$STRATA_CLUSTER_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"
    fi
    mkdir -p "$RUN_DIR/logs" "$RUN_DIR/conf"
}

start() {
    setup_env
    if ! alive "$RUN_DIR/master.pid"; then
        launch master org.apache.spark.deploy.master.Master \
            --host 127.0.0.1 --port "$PORT" --webui-port "$WEBUI_PORT"
    fi
    for ((i = 1; i <= NWORKERS; i++)); do
        alive "$RUN_DIR/worker-$i.pid" && continue
        local ui="${WORKER_UI_PORTS[$((i - 1))]:-0}"
        mkdir -p "$RUN_DIR/work-$i"
        launch "worker-$i" org.apache.spark.deploy.worker.Worker "$MASTER_URL" \
            --host 127.0.0.1 --cores "$CORES" --memory "$MEMORY" \
            --webui-port "$ui" --work-dir "$RUN_DIR/work-$i"
    done
    local deadline=$((SECONDS + TIMEOUT)) n=""
    while :; do
        n="$(alive_workers)"
        [[ "${n:-0}" -ge "$NWORKERS" ]] && break
        for f in "$RUN_DIR"/*.pid; do
            alive "$f" || die "$(basename "$f" .pid) exited; see $RUN_DIR/logs/$(basename "$f" .pid).log:
$(tail -n 5 "$RUN_DIR/logs/$(basename "$f" .pid).log" 2>/dev/null)"
        done
        if ((SECONDS >= deadline)); then
            die "timed out after ${TIMEOUT}s waiting for $NWORKERS ALIVE workers at $JSON_URL" \
                "(saw ${n:-no answer}); logs in $RUN_DIR/logs"
        fi
        sleep 0.5
    done
    echo "$MASTER_URL"
}

stop() {
    shopt -s nullglob
    local pids=()
    for f in "$RUN_DIR"/*.pid; do
        local pid
        pid="$(cat "$f")"
        # the whole process group: the daemon JVM, its executors and their Python workers
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        pids+=("$pid")
    done
    for _ in $(seq 1 20); do
        local any=0
        for pid in "${pids[@]}"; do
            kill -0 -- "-$pid" 2>/dev/null && any=1
        done
        ((any)) || break
        sleep 0.5
    done
    for pid in "${pids[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    rm -f "$RUN_DIR"/*.pid
    echo "stopped"
}

status() {
    shopt -s nullglob
    local f
    for f in "$RUN_DIR"/*.pid; do
        if alive "$f"; then
            echo "$(basename "$f" .pid): running (pid $(cat "$f"))"
        else
            echo "$(basename "$f" .pid): not running"
        fi
    done
    echo "master $MASTER_URL: $(alive_workers || true) ALIVE workers (web UI $JSON_URL)"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) PYTHON="${PYTHON}"; status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
