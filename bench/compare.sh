#!/usr/bin/env bash
# Side by side: Ballast against peer brokers with the same load generator, `ballast bench`.
#
#   bench/compare.sh                 # every scenario against Mosquitto, 3 rounds, pinned
#   ROUNDS=5 SCENARIOS="fanin0 fanout" bench/compare.sh
#   PEERS="mosquitto rumqttd mochi hivemq" bench/compare.sh   # every peer
#   PIN=0 bench/compare.sh           # unpinned
#   SCENARIOS="pfsync pos pnone pfanout" bench/compare.sh   # QoS 1 into persistent sessions
#
# Peers (bench/peers.sh installs them from the package registries): mosquitto (Debian),
# rumqttd 0.20.0 (crates.io), mochi 2.7.9 (Go module proxy), hivemq (HiveMQ CE 2025.5 embedded,
# Maven Central). Every peer runs with its defaults except where noted in start_broker.
#
# Method (docs/BENCHMARKS.md): each broker runs pinned to core 0 and the generator to core 1
# (PIN=1, the default), so figures are per core; brokers are driven one at a time, taking turns
# within each round in an order that rotates from round to round (the others stopped with
# SIGSTOP meanwhile), and the report gives the
# median of the rounds and the ratio Ballast/peer. Results (JSON per run, SVG charts,
# summary.md) go to $OUT.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
ROUNDS=${ROUNDS:-3}
PIN=${PIN:-1}
PEERS=${PEERS:-mosquitto}
SCENARIOS=${SCENARIOS:-"fanin0 lat fanin1 fanout p2p pfsync pos pnone pfanout conns"}
DURATION=${DURATION:-8}
OUT=${OUT:-$ROOT/target/bench/$(date +%Y%m%d-%H%M%S)}
PEERS_DIR=${PEERS_DIR:-$ROOT/target/peers}
mkdir -p "$OUT"

BROKER_CPU=""; GEN_CPU=""
if [ "$PIN" = "1" ]; then BROKER_CPU="taskset -c 0"; GEN_CPU="taskset -c 1"; fi

# shellcheck disable=SC2086
PEERS_DIR=$PEERS_DIR "$ROOT/bench/peers.sh" $PEERS
MOSQUITTO=$(command -v mosquitto || echo /usr/sbin/mosquitto)

echo "building ballast (release)"
cargo build --release -q -p ballast
BALLAST=${CARGO_TARGET_DIR:-$ROOT/target}/release/ballast

ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
BROKERS=(ballast $PEERS)
declare -A PORT=([ballast]=21883 [mosquitto]=21884 [rumqttd]=21885 [mochi]=21886 [hivemq]=21887)
declare -A PID=()
cleanup() { for p in "${PID[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Durability wanted by the current scenario: Ballast's --durability, and whether peers that can
# keep sessions on disk do (Mosquitto's persistence, HiveMQ's file persistence). The p*
# scenarios set it; the others run with Ballast's default and the peers' in-memory modes.
DURABILITY=fsync; PERSIST=false

# Peers that cannot keep a session across a restart sit out the p* scenarios.
durable_peer() { case $1 in ballast | mosquitto | hivemq) return 0 ;; *) return 1 ;; esac; }

start_broker() { # start_broker NAME
    local b=$1 port=${PORT[$1]}
    rm -rf "${OUT:?}/$b-data"; mkdir -p "$OUT/$b-data"
    case $b in
        ballast)
            $BROKER_CPU "$BALLAST" serve --mqtt 127.0.0.1:"$port" --ws 127.0.0.1:0 --http 127.0.0.1:0 \
                --data "$OUT/$b-data" --durability "$DURABILITY" --log-level warn --workers 1 \
                >>"$OUT/$b.log" 2>&1 & ;;
        mosquitto)
            # With persistence on, Mosquitto writes its whole state to one file every autosave
            # interval (default 1800 s) and at exit, not per message.
            cat >"$OUT/mosquitto.conf" <<CONF
listener $port 127.0.0.1
allow_anonymous true
persistence $PERSIST
persistence_location $OUT/$b-data/
max_queued_messages 1000
set_tcp_nodelay true
CONF
            $BROKER_CPU "$MOSQUITTO" -c "$OUT/mosquitto.conf" >>"$OUT/$b.log" 2>&1 & ;;
        rumqttd)
            # rumqttd needs a config file; this is its shipped rumqttd.toml with the listener
            # moved, the connection limit raised for 19,000 idle connections, and no delay
            # between accepts (the shipped 1 ms would cap the connect rate, not the broker).
            cat >"$OUT/rumqttd.toml" <<CONF
id = 0
[router]
id = 0
max_connections = 20000
max_outgoing_packet_count = 200
max_segment_size = 104857600
max_segment_count = 10
[v4.1]
name = "v4-1"
listen = "127.0.0.1:$port"
next_connection_delay_ms = 0
    [v4.1.connections]
    connection_timeout_ms = 60000
    max_payload_size = 20480
    max_inflight_count = 100
    dynamic_filters = true
CONF
            $BROKER_CPU "$PEERS_DIR/bin/rumqttd" -q -c "$OUT/rumqttd.toml" >>"$OUT/$b.log" 2>&1 & ;;
        mochi)
            $BROKER_CPU "$PEERS_DIR/bin/mochi" -tcp 127.0.0.1:"$port" -ws 127.0.0.1:0 -info 127.0.0.1:0 \
                >>"$OUT/$b.log" 2>&1 & ;;
        hivemq)
            local mode=in-memory
            if [ "$PERSIST" = true ]; then mode=file; fi
            $BROKER_CPU java -cp "$ROOT/bench/hivemq/target/hivemq-peer-1.jar:$ROOT/bench/hivemq/target/lib/*" \
                ballast.bench.HiveMQPeer "$port" "$OUT/$b-data" "$mode" >>"$OUT/$b.log" 2>&1 & ;;
    esac
    PID[$b]=$!
}
wait_port() { # wait_port PORT: up to 60 s (HiveMQ's JVM takes a few seconds)
    for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done
    echo "port $1 not up" >&2; exit 1
}
start_all() {
    for b in "${BROKERS[@]}"; do start_broker "$b"; done
    for b in "${BROKERS[@]}"; do wait_port "${PORT[$b]}"; done
}
restart_all() {
    for b in "${BROKERS[@]}"; do kill -CONT "${PID[$b]}" 2>/dev/null; kill "${PID[$b]}" 2>/dev/null || true; done
    for b in "${BROKERS[@]}"; do wait "${PID[$b]}" 2>/dev/null || true; done
    start_all
}

start_all
for b in "${BROKERS[@]}"; do echo "$b: pid ${PID[$b]}, port ${PORT[$b]}"; done
echo "pinned=$PIN; out=$OUT"
{
    echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"
    echo "ballast: $(git rev-parse --short HEAD)"
    for b in $PEERS; do
        case $b in
            mosquitto) echo "mosquitto: $($MOSQUITTO -h 2>&1 | head -1)" ;;
            rumqttd) echo "rumqttd: $("$PEERS_DIR/bin/rumqttd" --version)" ;;
            mochi) echo "mochi: 2.7.9 (go install), $(go version)" ;;
            hivemq) echo "hivemq: HiveMQ CE embedded 2025.5, $(java -version 2>&1 | head -1)" ;;
        esac
    done
} >"$OUT/machine.txt"

run() { # run SCENARIO BROKER ARGS...
    local name=$1 b=$2; shift 2
    local args=("$@")
    args=("${args[@]//@ADDR@/127.0.0.1:${PORT[$b]}}")
    args=("${args[@]//@PID@/${PID[$b]}}")
    echo "--- $name $b: ballast bench ${args[*]}"
    # Only the broker under test may run: the others are stopped (SIGSTOP), so that one still
    # busy after its own turn (a JVM compiling or collecting garbage, say) cannot take CPU
    # from the next.
    for o in "${BROKERS[@]}"; do [ "$o" = "$b" ] || kill -STOP "${PID[$o]}" 2>/dev/null || true; done
    kill -CONT "${PID[$b]}" 2>/dev/null || true
    $GEN_CPU "$BALLAST" bench "${args[@]}" --out "$OUT/$name-$b-r$round.json" 2>>"$OUT/progress.log" | tee -a "$OUT/tables.txt"
}

# The rate for `lat`: half of Mosquitto's max sustainable QoS 0 fan-in measured so far in this
# run (LAT_RATE overrides; 50,000 without a Mosquitto figure).
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
                echo "ladder --addr @ADDR@ -p 10 -s 1 --layout fan-in --qos 1 --persistent --payload 100 --duration $DURATION --warmup 2 --start-rate 1000 --factor 1.5 --progress false" ;;
        fanout) echo "ladder --addr @ADDR@ -p 1 -s 1000 --layout fan-out --qos 0 --payload 100 --duration $DURATION --warmup 2 --start-rate 20 --factor 1.5 --progress false" ;;
        pfanout)
                echo "ladder --addr @ADDR@ -p 1 -s 1000 --layout fan-out --qos 1 --persistent --payload 100 --duration $DURATION --warmup 2 --start-rate 2 --factor 1.5 --progress false" ;;
        p2p)    echo "p2p --addr @ADDR@ -n 10000 -m 10 --interval-ms 1000 --drain 5" ;;
        conns)  echo "conns --addr @ADDR@ -n 19000 --steps 4 --pid @PID@" ;;
        *)      echo "unknown scenario: $1" >&2; exit 2 ;;
    esac
}

for round in $(seq "$ROUNDS"); do
    for s in $SCENARIOS; do
        case $s in
            pfsync | pfanout) want="fsync true" ;; pos) want="os true" ;; pnone) want="none true" ;;
            *) want="fsync false" ;;
        esac
        # Memory per connection is measured on fresh brokers: memory freed by earlier
        # scenarios and kept by the allocator would otherwise be counted against it.
        if [ "$s" = conns ] || [ "$want" != "$DURABILITY $PERSIST" ]; then
            read -r DURABILITY PERSIST <<<"$want"
            restart_all
        fi
        read -r -a A <<<"$(scenario_args "$s")"
        # Rotate which broker goes first from round to round.
        n=${#BROKERS[@]}
        for i in $(seq 0 $((n - 1))); do
            b=${BROKERS[$(((i + round - 1) % n))]}
            if [ "$PERSIST" = true ] && ! durable_peer "$b"; then continue; fi
            run "$s" "$b" "${A[@]}" || echo "($s $b failed; see $OUT/progress.log)"
            if [ "$s" = conns ]; then
                # Idle connections must be gone before the next broker is measured.
                sleep 2
            fi
        done
    done
done

python3 "$ROOT/bench/summarize.py" "$OUT" | tee "$OUT/summary.md"
