#!/usr/bin/env bash
# Installs the peer brokers bench/compare.sh measures Ballast against, from package registries
# only, into target/peers/ (Mosquitto system-wide from Debian). Idempotent: what is there stays.
#
#   bench/peers.sh mosquitto rumqttd mochi hivemq
#
#   mosquitto  2.0.11, Debian 12's package
#   rumqttd    0.20.0, crates.io (cargo install)
#   mochi      2.7.9, the Go module proxy (go install github.com/mochi-mqtt/server/v2/cmd)
#   hivemq     HiveMQ CE 2025.5 embedded, Maven Central, run by bench/hivemq (a tiny main)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
DIR=${PEERS_DIR:-$ROOT/target/peers}
mkdir -p "$DIR/bin"

for peer in "$@"; do
    case $peer in
        mosquitto)
            if ! command -v mosquitto >/dev/null && [ ! -x /usr/sbin/mosquitto ]; then
                echo "installing mosquitto (Debian)"
                apt-get update -q
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mosquitto
            fi ;;
        rumqttd)
            if [ ! -x "$DIR/bin/rumqttd" ]; then
                echo "installing rumqttd 0.20.0 (cargo install, a few minutes)"
                cargo install -q rumqttd --version 0.20.0 --root "$DIR"
            fi ;;
        mochi)
            if [ ! -x "$DIR/bin/mochi" ]; then
                echo "installing mochi 2.7.9 (go install)"
                tmp=$(mktemp -d)
                GOBIN=$tmp go install github.com/mochi-mqtt/server/v2/cmd@v2.7.9
                mv "$tmp/cmd" "$DIR/bin/mochi"
                rmdir "$tmp"
            fi ;;
        hivemq)
            if [ ! -f "$ROOT/bench/hivemq/target/hivemq-peer-1.jar" ]; then
                echo "building the HiveMQ CE 2025.5 peer (Maven)"
                mvn -q -B -f "$ROOT/bench/hivemq/pom.xml" package -DskipTests
            fi ;;
        *) echo "unknown peer: $peer (known: mosquitto rumqttd mochi hivemq)" >&2; exit 2 ;;
    esac
done
