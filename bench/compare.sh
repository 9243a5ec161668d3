#!/usr/bin/env bash
# Side by side: Ballast against Mosquitto (Debian) with the same load generator, `ballast bench`.
#
#   bench/compare.sh                 # every scenario, 3 rounds, pinned
#   ROUNDS=5 SCENARIOS="fanin0 fanout" bench/compare.sh
#   PIN=0 bench/compare.sh           # unpinned
#   SCENARIOS="pfsync pos pnone" bench/compare.sh   # QoS 1 into persistent sessions
#
# Method (docs/BENCHMARKS.md): each broker runs pinned to core 0 and the generator to core 1
# (PIN=1, the default), so figures are per core; brokers are driven one at a time, A/B
# alternated within each round, and the report gives the median of the rounds and the ratio
# Ballast/Mosquitto. Results (JSON per run, SVG charts, summary.md) go to $OUT.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
ROUNDS=${ROUNDS:-3}
PIN=${PIN:-1}
SCENARIOS=${SCENARIOS:-"fanin0 lat fanin1 fanout p2p pfsync pos pnone conns"}
DURATION=${DURATION:-8}
OUT=${OUT:-$ROOT/target/bench/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

BROKER_CPU=""; GEN_CPU=""
if [ "$PIN" = "1" ]; then BROKER_CPU="taskset -c 0"; GEN_CPU="taskset -c 1"; fi

if ! command -v mosquitto >/dev/null && [ ! -x /usr/sbin/mosquitto ]; then
    echo "installing mosquitto (Debian)"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mosquitto
fi
MOSQUITTO=$(command -v mosquitto || echo /usr/sbin/mosquitto)

echo "building ballast (release)"
cargo build --release -q -p ballast
BALLAST=${CARGO_TARGET_DIR:-$ROOT/target}/release/ballast

ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
B_PORT=21883; M_PORT=21884
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Durability of the brokers: Ballast's --durability, Mosquitto's persistence (true/false).
# The p* scenarios set them; the others run with Ballast's default and Mosquitto's.
DURABILITY=fsync; M_PERSIST=false
start_ballast() {
    rm -rf "$OUT/ballast-data"
    $BROKER_CPU "$BALLAST" serve --mqtt 127.0.0.1:$B_PORT --ws 127.0.0.1:0 --http 127.0.0.1:0 \
        --data "$OUT/ballast-data" --durability "$DURABILITY" --log-level warn --workers 1 \
        >>"$OUT/ballast.log" 2>&1 &
    B_PID=$!; PIDS+=("$B_PID")
}
start_mosquitto() {
    rm -rf "$OUT/mosquitto-data"; mkdir -p "$OUT/mosquitto-data"
    # With persistence on, Mosquitto writes its whole state to one file every autosave
    # interval (default 1800 s) and at exit, not per message.
    cat >"$OUT/mosquitto.conf" <<CONF
listener $M_PORT 127.0.0.1
allow_anonymous true
persistence $M_PERSIST
persistence_location $OUT/mosquitto-data/
max_queued_messages 1000
set_tcp_nodelay true
CONF
    $BROKER_CPU "$MOSQUITTO" -c "$OUT/mosquitto.conf" >"$OUT/mosquitto.log" 2>&1 &
    M_PID=$!; PIDS+=("$M_PID")
}
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }

start_ballast; start_mosquitto
wait_port $B_PORT; wait_port $M_PORT
echo "ballast pid $B_PID on $B_PORT, mosquitto pid $M_PID on $M_PORT; pinned=$PIN; out=$OUT"
{ echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"; echo "mosquitto: $($MOSQUITTO -h 2>&1 | head -1)"; echo "ballast: $(git rev-parse --short HEAD)"; } >"$OUT/machine.txt"

run() { # run NAME BROKER PORT PID ARGS...
    local name=$1 broker=$2 port=$3 pid=$4; shift 4
    local args=("$@")
    args=("${args[@]//@ADDR@/127.0.0.1:$port}")
    args=("${args[@]//@PID@/$pid}")
    echo "--- $name $broker: ballast bench ${args[*]}"
    $GEN_CPU "$BALLAST" bench "${args[@]}" --out "$OUT/$name-$broker-r$round.json" 2>>"$OUT/progress.log" | tee -a "$OUT/tables.txt"
}

# The rate for `lat`: half of Mosquitto's max sustainable QoS 0 fan-in measured so far in this
# run (LAT_RATE overrides).
lat_rate() {
    if [ -n "${LAT_RATE:-}" ]; then echo "$LAT_RATE"; return; fi
    python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
rates = [json.load(open(p))["max_sustainable_rate"] for p in glob.glob(sys.argv[1] + "/fanin0-mosquitto-r*.json")]
print(int(statistics.median(rates) / 2) if rates else 50000)
PY
}

scenario_args() {
    case $1 in
        lat)    echo "pubsub --addr @ADDR@ -p 10 -s 1 --layout fan-in --qos 0 --payload 100 --rate $(lat_rate) --duration $DURATION --warmup 2 --progress false" ;;
        fanin0) echo "ladder --addr @ADDR@ -p 10 -s 1 --layout fan-in --qos 0 --payload 100 --duration $DURATION --warmup 2 --start-rate 20000 --factor 1.5 --progress false" ;;
        fanin1) echo "ladder --addr @ADDR@ -p 10 -s 1 --layout fan-in --qos 1 --payload 100 --duration $DURATION --warmup 2 --start-rate 5000 --factor 1.5 --progress false" ;;
        pfsync|pos|pnone)
                echo "ladder --addr @ADDR@ -p 10 -s 1 --layout fan-in --qos 1 --persistent --payload 100 --duration $DURATION --warmup 2 --start-rate 5000 --factor 1.5 --progress false" ;;
        fanout) echo "ladder --addr @ADDR@ -p 1 -s 1000 --layout fan-out --qos 0 --payload 100 --duration $DURATION --warmup 2 --start-rate 20 --factor 1.5 --progress false" ;;
        p2p)    echo "p2p --addr @ADDR@ -n 10000 -m 10 --interval-ms 1000 --drain 5" ;;
        conns)  echo "conns --addr @ADDR@ -n 19000 --steps 4 --pid @PID@" ;;
    esac
}

restart_brokers() {
    kill "$B_PID" "$M_PID" 2>/dev/null || true
    wait "$B_PID" "$M_PID" 2>/dev/null || true
    start_ballast; start_mosquitto
    wait_port $B_PORT; wait_port $M_PORT
}

for round in $(seq "$ROUNDS"); do
    for s in $SCENARIOS; do
        # Memory per connection is measured on fresh brokers: memory freed by earlier
        # scenarios and kept by the allocator would otherwise be counted against it.
        case $s in
            pfsync) want="fsync true" ;; pos) want="os true" ;; pnone) want="none true" ;;
            *) want="fsync false" ;;
        esac
        if [ "$s" = conns ] || [ "$want" != "$DURABILITY $M_PERSIST" ]; then
            read -r DURABILITY M_PERSIST <<<"$want"
            restart_brokers
        fi
        read -r -a A <<<"$(scenario_args "$s")"
        # Alternate which broker goes first each round.
        if [ $((round % 2)) -eq 1 ]; then order="ballast mosquitto"; else order="mosquitto ballast"; fi
        for b in $order; do
            if [ "$b" = ballast ]; then run "$s" ballast $B_PORT "$B_PID" "${A[@]}"; else run "$s" mosquitto $M_PORT "$M_PID" "${A[@]}"; fi
            if [ "$s" = conns ]; then
                # Idle connections must be gone before the next broker is measured.
                sleep 2
            fi
        done
    done
done

python3 "$ROOT/bench/summarize.py" "$OUT" | tee "$OUT/summary.md"
