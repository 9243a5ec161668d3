"""Durable sessions with paho-mqtt and mosquitto_pub against the real binary, across kill -9."""

import collections

from mqtt_helpers import Client, mosquitto_pub, start_broker, unique


def test_kill_9_keeps_what_paho_and_mosquitto_pub_had_acknowledged(tmp_path, clients):
    data = tmp_path / "data"
    topic = unique("durable")
    b = start_broker(data)
    try:
        subs = {}
        for version in ("v311", "v5"):
            c = Client(b.mqtt_port, version, client_id=f"dur-{version}", persistent=True)
            c.subscribe(f"{topic}/#", 2)
            c.disconnect()
            subs[version] = c
        pub = Client(b.mqtt_port, "v5")
        n = 100
        for i in range(n):
            # `publish` returns once PUBACK (QoS 1) or PUBCOMP (QoS 2) came back.
            pub.publish(f"{topic}/q1", f"q1-{i}".encode(), 1)
            pub.publish(f"{topic}/q2", f"q2-{i}".encode(), 2)
        pub.publish(f"{topic}/retained", b"kept", 1, retain=True)
        mosquitto_pub(b.mqtt_port, f"{topic}/cli", b"from-mosquitto-pub", 1, "v311")
        pub.close()
    finally:
        b.proc.kill()  # SIGKILL: no shutdown, nothing flushed on the way out
        b.proc.wait()

    b = start_broker(data)
    try:
        expected = 2 * n + 2
        back = {}
        for version in ("v311", "v5"):
            c = Client(b.mqtt_port, version, client_id=f"dur-{version}", persistent=True)
            clients.append(c)
            assert c.session_present, f"{version}: the session came back"
            got = c.messages.wait(expected)
            by_topic = collections.defaultdict(list)
            for m in got:
                by_topic[m.topic.rsplit("/", 1)[1]].append(m.payload.decode())
            assert sorted(set(by_topic["q1"])) == sorted(f"q1-{i}" for i in range(n)), version
            # paho hands a QoS 2 message to the application at PUBREL, so QoS 1 and QoS 2
            # interleave differently than published; among themselves QoS 2 keep their order.
            assert by_topic["q2"] == [f"q2-{i}" for i in range(n)], f"{version}: QoS 2 once, in order"
            assert by_topic["retained"] == ["kept"]
            assert by_topic["cli"] == ["from-mosquitto-pub"]
            back[version] = c
        # The subscriptions are intact: a message published after the restart arrives.
        after = Client(b.mqtt_port, "v311")
        clients.append(after)
        after.publish(f"{topic}/after", b"after", 1)
        for version, c in back.items():
            c.messages.wait_until(lambda m: m.payload == b"after", what=f"{version}: the message after restart")
        # The retained message is back for a new subscriber.
        fresh = Client(b.mqtt_port, "v5")
        clients.append(fresh)
        fresh.subscribe(f"{topic}/retained", 1)
        (m,) = fresh.messages.wait(1)
        assert m.payload == b"kept" and m.retain
        for c in clients:
            c.close()
        clients.clear()
    finally:
        assert b.stop() == 0, b.log()
