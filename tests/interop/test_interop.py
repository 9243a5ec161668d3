"""Interop: the real `ballast serve` binary against clients people actually use.

paho-mqtt (PyPI, v2 API) and mosquitto_pub / mosquitto_sub (Debian), over TCP and WebSocket,
MQTT 3.1.1 and 5.0, QoS 0/1/2, retained messages, wills, /healthz and /metrics, and the
graceful shutdown on SIGTERM.
"""

import json
import signal
import socket
import struct
import subprocess

import pytest

from mqtt_helpers import (
    HOST,
    TIMEOUT,
    Client,
    MosquittoSub,
    ballast_bin,
    free_port,
    http_get,
    metric_value,
    mosquitto_pub,
    start_broker,
    unique,
    wait_for,
)

VERSIONS = ["v311", "v5"]
QOS = [0, 1, 2]


def connect(broker, clients, protocol="v311", **kw):
    port = broker.ws_port if kw.get("transport") == "websockets" else broker.mqtt_port
    c = Client(port, protocol=protocol, **kw)
    clients.append(c)
    return c


# --- paho -> paho ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", QOS)
def test_paho_to_paho(broker, clients, version, qos):
    topic = unique(f"paho/{version}/q{qos}")
    sub = connect(broker, clients, version)
    sub.subscribe(topic, qos)
    pub = connect(broker, clients, version)
    payloads = [f"message {i}".encode() for i in range(5)]
    for p in payloads:
        pub.publish(topic, p, qos)
    got = sub.messages.wait(len(payloads))
    assert [m.payload for m in got] == payloads, "every message, in order"
    for m in got:
        assert m.topic == topic
        assert m.qos == qos
        assert not m.retain
    if qos == 2:
        # Exactly once: nothing more arrives after the last one (checked with a later marker).
        pub.publish(topic, b"marker", 2)
        _, before = sub.messages.wait_until(lambda m: m.payload == b"marker", what="marker")
        assert [m.payload for m in before] == payloads, "no duplicates at QoS 2"


@pytest.mark.parametrize("pub_version,sub_version", [("v5", "v311"), ("v311", "v5")])
def test_paho_across_protocol_versions(broker, clients, pub_version, sub_version):
    topic = unique(f"cross/{pub_version}-{sub_version}")
    sub = connect(broker, clients, sub_version)
    sub.subscribe(topic, 2)
    pub = connect(broker, clients, pub_version)
    for qos in QOS:
        pub.publish(topic, f"qos {qos}".encode(), qos)
    got = sub.messages.wait(3)
    assert [(m.payload, m.qos) for m in got] == [(f"qos {q}".encode(), q) for q in QOS]


# --- mosquitto_pub -> paho, paho -> mosquitto_sub --------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", QOS)
def test_mosquitto_pub_to_paho(broker, clients, version, qos):
    topic = unique(f"mpub/{version}/q{qos}")
    sub = connect(broker, clients, version)
    sub.subscribe(topic, qos)
    mosquitto_pub(broker.mqtt_port, topic, b"from mosquitto_pub", qos, version)
    [m] = sub.messages.wait(1)
    assert (m.topic, m.payload, m.qos, m.retain) == (topic, b"from mosquitto_pub", qos, False)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", QOS)
def test_paho_to_mosquitto_sub(broker, clients, version, qos):
    topic = unique(f"msub/{version}/q{qos}")
    sub = MosquittoSub(broker.mqtt_port, topic, qos, version, count=3)
    clients.append(sub)
    sub.wait_subscribed()
    pub = connect(broker, clients, version)
    for i in range(3):
        pub.publish(topic, f"to mosquitto_sub {i}".encode(), qos)
    got = sub.finish()
    assert got == [(qos, False, topic, f"to mosquitto_sub {i}") for i in range(3)]


# --- retained --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_set_and_cleared(broker, clients, version):
    topic = unique(f"retained/{version}")
    # QoS 1, so mosquitto_pub exits only after the broker has taken the message.
    mosquitto_pub(broker.mqtt_port, topic, b"last known value", 1, version, retain=True)

    late = connect(broker, clients, version)
    late.subscribe(topic, 1)
    [m] = late.messages.wait(1)
    assert (m.topic, m.payload, m.retain) == (topic, b"last known value", True)

    # An empty retained publish clears it: a new subscriber gets nothing retained. A live
    # marker published after its SUBACK arrives after any retained message would have.
    mosquitto_pub(broker.mqtt_port, topic, None, 1, version, retain=True)
    later = connect(broker, clients, version)
    later.subscribe(topic, 1)
    marker_pub = connect(broker, clients, version)
    marker_pub.publish(topic, b"marker", 1)
    marker, before = later.messages.wait_until(lambda m: m.payload == b"marker", what="marker")
    assert not marker.retain
    assert before == [], f"retained message not cleared: {[(m.payload, m.retain) for m in before]}"


def test_retained_reaches_mosquitto_sub_with_retain_flag(broker):
    topic = unique("retained/msub")
    mosquitto_pub(broker.mqtt_port, topic, b"stored", 1, "v5", retain=True)
    sub = MosquittoSub(broker.mqtt_port, topic, 1, "v5", count=1)
    try:
        assert sub.finish() == [(1, True, topic, "stored")]
    finally:
        sub.kill()
    mosquitto_pub(broker.mqtt_port, topic, None, 1, "v5", retain=True)


# --- will ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_will_published_when_connection_drops(broker, clients, version):
    will_topic = unique(f"will/{version}")
    watcher = connect(broker, clients, version)
    watcher.subscribe(will_topic, 1)
    device = connect(broker, clients, version, will=(will_topic, b"device gone", 1))
    device.drop()
    [m] = watcher.messages.wait(1)
    assert (m.topic, m.payload, m.qos) == (will_topic, b"device gone", 1)


def test_will_published_when_mosquitto_sub_is_killed(broker, clients):
    will_topic = unique("will/killed")
    watcher = connect(broker, clients, "v5")
    watcher.subscribe(will_topic, 1)
    victim = MosquittoSub(
        broker.mqtt_port, unique("will/idle"), 0, "v5", count=1, timeout_s=60,
        extra=["--will-topic", will_topic, "--will-payload", "killed", "--will-qos", "1"],
    )
    clients.append(victim)
    victim.wait_subscribed()
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(TIMEOUT)
    [m] = watcher.messages.wait(1)
    assert (m.topic, m.payload) == (will_topic, b"killed")


@pytest.mark.parametrize("version", VERSIONS)
def test_no_will_after_normal_disconnect(broker, clients, version):
    will_topic = unique(f"will/clean/{version}")
    watcher = connect(broker, clients, version)
    watcher.subscribe(will_topic, 1)
    device = connect(broker, clients, version, will=(will_topic, b"should not appear", 1))
    closed_before = metric_value(broker.metrics(), 'ballast_connections_closed_total{reason="client_disconnect"}') or 0
    device.disconnect()
    # Let the broker finish closing that connection (its close counter moves) before the
    # marker, so a wrongly published will would be ahead of the marker.
    wait_for(
        lambda: (metric_value(broker.metrics(), 'ballast_connections_closed_total{reason="client_disconnect"}') or 0)
        > closed_before,
        what="the broker to count the client's DISCONNECT",
    )
    other = connect(broker, clients, version)
    other.publish(will_topic, b"marker", 1)
    _, before = watcher.messages.wait_until(lambda m: m.payload == b"marker", what="marker")
    assert before == [], f"will published after a normal DISCONNECT: {[m.payload for m in before]}"


# --- WebSocket -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_websocket_pub_sub(broker, clients, version):
    topic = unique(f"ws/{version}")
    ws_sub = connect(broker, clients, version, transport="websockets")
    ws_sub.subscribe(topic, 1)
    tcp_sub = connect(broker, clients, version)
    tcp_sub.subscribe(topic, 1)
    ws_pub = connect(broker, clients, version, transport="websockets")
    ws_pub.publish(topic, b"over websocket", 1)
    tcp_pub = connect(broker, clients, version)
    tcp_pub.publish(topic, b"over tcp", 1)
    for sub in (ws_sub, tcp_sub):
        got = sub.messages.wait(2)
        assert sorted(m.payload for m in got) == [b"over tcp", b"over websocket"]
        assert all(m.topic == topic and m.qos == 1 for m in got)


# --- HTTP ------------------------------------------------------------------------------------


def test_healthz_and_unknown_path(broker):
    status, body, _ = http_get(broker.http_port, "/healthz")
    assert status == 200
    assert json.loads(body)["status"] == "ok"
    status, body, _ = http_get(broker.http_port, "/no/such/path")
    assert status == 404
    assert "/no/such/path" in body


def test_metrics_count_published_messages(broker, clients):
    topic = unique("metrics")
    pub = connect(broker, clients, "v5")
    pub.publish(topic, b"counted", 1)
    value = wait_for(
        lambda: metric_value(broker.metrics(), "ballast_messages_received_total"),
        what="a non-zero ballast_messages_received_total",
    )
    assert value > 0
    text = broker.metrics()
    for name in ["ballast_connections", "ballast_sessions", "ballast_retained_messages",
                 "ballast_subscriptions", "ballast_messages_sent_total",
                 "ballast_connections_accepted_total"]:
        assert metric_value(text, name) is not None, f"{name} missing from /metrics"
    assert metric_value(text, "ballast_connections") >= 1, "our client is connected"


# --- bad input -------------------------------------------------------------------------------

CONNECT_V311 = b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02ab"
CONNECT_V5 = b"\x10\x0f\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x02ab"
BAD_INPUTS = [
    b"\x00\x00",  # reserved packet type instead of CONNECT
    CONNECT_V311 + b"\x00\x00",  # then a reserved packet type
    CONNECT_V5 + b"\x00\x00",
    CONNECT_V5 + b"\x30\xff\xff\xff\xff\x7f",  # PUBLISH with a 5-byte remaining length
    CONNECT_V5,  # a valid CONNECT, then the connection is reset
]


def test_bad_input_and_resets_leave_the_broker_serving(tmp_path):
    """Clients that send garbage and reset the connection (RST) while the broker answers them
    must not take the broker down: it keeps serving everyone else."""
    b = start_broker(tmp_path / "data")
    made = []
    try:
        topic = unique("survivor")
        sub = Client(b.mqtt_port, protocol="v5")
        made.append(sub)
        sub.subscribe(topic, 1)
        for _ in range(200):
            for payload in BAD_INPUTS:
                try:
                    s = socket.create_connection((HOST, b.mqtt_port), timeout=TIMEOUT)
                except OSError as e:
                    try:
                        b.proc.wait(5)
                    except Exception:
                        pass
                    raise AssertionError(
                        f"cannot connect after bad input ({e}); ballast exit status "
                        f"{b.proc.poll()}\n{b.log()}"
                    ) from None
                # Linger 0: close() sends RST, so the broker's reply hits a reset socket.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.sendall(payload)
                s.close()
        wait_for(lambda: http_get(b.http_port, "/healthz")[0] == 200, what="/healthz after bad input")
        pub = Client(b.mqtt_port, protocol="v311")
        made.append(pub)
        pub.publish(topic, b"still serving", 1)
        [m] = sub.messages.wait(1)
        assert m.payload == b"still serving"
        assert b.proc.poll() is None, f"ballast died\n{b.log()}"
        for c in made:
            c.close()
        assert b.stop() == 0, b.log()
    finally:
        for c in made:
            c.close()
        if b.proc.poll() is None:
            b.proc.kill()


# --- start-up ------------------------------------------------------------------------------


def test_second_node_on_a_taken_mqtt_port_fails_to_start(broker, tmp_path):
    """Two nodes must never share a listening port (clients would be split between them at
    random): the second exits 1 naming the address."""
    http_port = free_port()
    args = [ballast_bin(), "serve", "--mqtt", f"{HOST}:{broker.mqtt_port}",
            "--ws", f"{HOST}:{free_port()}", "--http", f"{HOST}:{http_port}",
            "--data", str(tmp_path / "data")]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        def exited_or_serving():
            if proc.poll() is not None:
                return "exited"
            try:
                return "serving" if http_get(http_port, "/healthz", timeout=0.5)[0] == 200 else None
            except OSError:
                return None

        outcome = wait_for(exited_or_serving, what="the second node to exit or serve")
        assert outcome == "exited", (
            f"a second node started on the MQTT port {broker.mqtt_port} already in use"
        )
        out = proc.stdout.read().decode(errors="replace")
        assert proc.returncode == 1, f"exit {proc.returncode}: {out}"
        assert str(broker.mqtt_port) in out, out
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(TIMEOUT)


# --- shutdown --------------------------------------------------------------------------------


def test_sigterm_disconnects_mqtt5_clients_and_exits_0(tmp_path):
    """A broker of its own: SIGTERM sends MQTT 5 clients DISCONNECT 0x8B and exits 0."""
    b = start_broker(tmp_path / "data")
    try:
        c = Client(b.mqtt_port, protocol="v5")
        try:
            assert b.stop() == 0, b.log()
            assert c.disconnected.wait(TIMEOUT), "client not disconnected by the shutdown"
            assert c.disconnect_reason is not None and c.disconnect_reason.value == 0x8B, (
                f"expected DISCONNECT 0x8B (server shutting down), got {c.disconnect_reason}"
            )
        finally:
            c.close()
    finally:
        if b.proc.poll() is None:
            b.proc.kill()
