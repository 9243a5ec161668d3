"""Helpers for the interop tests: the ballast process, paho clients, mosquitto_sub, metrics.

Every wait here has a deadline and polls or blocks on an event; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

HOST = "127.0.0.1"
TIMEOUT = 10.0

PROTOCOLS = {"v311": mqtt.MQTTv311, "v5": mqtt.MQTTv5}
MOSQUITTO_VERSIONS = {"v311": "mqttv311", "v5": "mqttv5"}


def unique(prefix: str) -> str:
    """A topic or client id no other test uses."""
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


def wait_for(condition, timeout: float = TIMEOUT, what: str = "condition", interval: float = 0.02):
    """Polls `condition` until it returns a truthy value, which is returned; fails at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, str, dict]:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def metric_value(text: str, name: str) -> float | None:
    """The value of the sample `name` (with its labels, if any, written as in the exposition)."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == name:
            return float(value)
    return None


# ---------------------------------------------------------------------------------------------
# The broker process
# ---------------------------------------------------------------------------------------------


@dataclass
class Broker:
    proc: subprocess.Popen
    mqtt_port: int
    ws_port: int
    http_port: int
    log_path: Path

    def log(self, last: int = 80) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-last:])

    def metrics(self) -> str:
        status, body, _ = http_get(self.http_port, "/metrics")
        assert status == 200, f"/metrics answered {status}: {body}"
        return body

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then the exit code (killing it if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"ballast did not exit within {timeout}s of SIGTERM\n{self.log()}")


def ballast_bin() -> str:
    path = os.environ.get("BALLAST_BIN")
    if not path:
        path = str(Path(__file__).resolve().parents[2] / "target" / "debug" / "ballast")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"ballast binary not found at {path}: build it or set BALLAST_BIN")
    return path


def start_broker(data_dir: Path) -> Broker:
    """Starts `ballast serve` on free loopback ports and waits until /healthz answers."""
    mqtt_port, ws_port, http_port = free_port(), free_port(), free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.log"
    args = [
        ballast_bin(), "serve",
        "--mqtt", f"{HOST}:{mqtt_port}",
        "--ws", f"{HOST}:{ws_port}",
        "--http", f"{HOST}:{http_port}",
        "--data", str(data_dir),
        "--workers", "2",
        "--log-level", os.environ.get("BALLAST_LOG", "info"),
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    broker = Broker(proc, mqtt_port, ws_port, http_port, log_path)

    def healthy():
        if proc.poll() is not None:
            raise AssertionError(f"ballast exited with {proc.returncode} at start\n{broker.log()}")
        try:
            status, body, _ = http_get(http_port, "/healthz", timeout=0.5)
        except OSError:
            return False
        return status == 200 and body

    try:
        wait_for(healthy, timeout=30, what="ballast /healthz")
    except BaseException:
        broker.stop()
        raise
    return broker


# ---------------------------------------------------------------------------------------------
# paho-mqtt clients (v2 callback API)
# ---------------------------------------------------------------------------------------------


class Messages:
    """What a subscriber received, in order, with a way to wait for it."""

    def __init__(self):
        self._cond = threading.Condition()
        self._items: list[mqtt.MQTTMessage] = []

    def add(self, msg: mqtt.MQTTMessage):
        with self._cond:
            self._items.append(msg)
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = TIMEOUT) -> list[mqtt.MQTTMessage]:
        """The first `count` messages; fails if fewer arrive in time."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self._items) >= count, timeout)
            items = list(self._items)
        assert ok, f"expected {count} messages within {timeout}s, got {len(items)}: " + repr(
            [(m.topic, m.payload) for m in items]
        )
        return items[:count]

    def wait_until(self, predicate, timeout: float = TIMEOUT, what: str = "a message"):
        """The first message matching `predicate`, and every message before it."""
        with self._cond:
            ok = self._cond.wait_for(lambda: any(predicate(m) for m in self._items), timeout)
            items = list(self._items)
        assert ok, f"no {what} within {timeout}s; got " + repr([(m.topic, m.payload) for m in items])
        i = next(i for i, m in enumerate(items) if predicate(m))
        return items[i], items[:i]

    def snapshot(self) -> list[mqtt.MQTTMessage]:
        with self._cond:
            return list(self._items)


class Client:
    """A connected paho client running its network loop on a thread."""

    def __init__(self, port: int, protocol: str = "v311", transport: str = "tcp",
                 client_id: str | None = None, will: tuple[str, bytes, int] | None = None,
                 ws_path: str = "/mqtt", persistent: bool = False):
        """`persistent`: a session that outlives the connection (3.1.1 clean session 0, 5.0
        clean start 0 with an hour of session expiry)."""
        self.protocol = protocol
        self.messages = Messages()
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.connect_reason = None
        self.disconnect_reason = None
        self._subacks: dict[int, list] = {}
        self._suback_cond = threading.Condition()
        self.c = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id or unique("it").replace("/", "-"),
            protocol=PROTOCOLS[protocol],
            transport=transport,
            reconnect_on_failure=False,
            **({"clean_session": not persistent} if protocol == "v311" else {}),
        )
        if transport == "websockets":
            self.c.ws_set_options(path=ws_path)
        if will:
            topic, payload, qos = will
            self.c.will_set(topic, payload, qos=qos)
        self.c.on_connect = self._on_connect
        self.c.on_disconnect = self._on_disconnect
        self.c.on_subscribe = self._on_subscribe
        self.c.on_message = lambda _c, _u, msg: self.messages.add(msg)
        if protocol == "v5":
            props = Properties(PacketTypes.CONNECT)
            if persistent:
                props.SessionExpiryInterval = 3600
            self.c.connect(HOST, port, keepalive=30, clean_start=not persistent, properties=props)
        else:
            self.c.connect(HOST, port, keepalive=30)
        self.session_present = None
        self.c.loop_start()
        assert self.connected.wait(TIMEOUT), f"no CONNACK within {TIMEOUT}s"
        assert not self.connect_reason.is_failure, f"CONNECT refused: {self.connect_reason}"

    def _on_connect(self, _c, _u, flags, reason_code, _props):
        self.connect_reason = reason_code
        self.session_present = flags.session_present
        self.connected.set()

    def _on_disconnect(self, _c, _u, _flags, reason_code, _props):
        self.disconnect_reason = reason_code
        self.disconnected.set()

    def _on_subscribe(self, _c, _u, mid, reason_codes, _props):
        with self._suback_cond:
            self._subacks[mid] = reason_codes
            self._suback_cond.notify_all()

    def subscribe(self, topic: str, qos: int) -> None:
        """Subscribes and waits for the SUBACK granting `qos`."""
        result, mid = self.c.subscribe(topic, qos)
        assert result == mqtt.MQTT_ERR_SUCCESS, f"subscribe failed to send: {result}"
        with self._suback_cond:
            ok = self._suback_cond.wait_for(lambda: mid in self._subacks, TIMEOUT)
            codes = self._subacks.get(mid)
        assert ok, f"no SUBACK for {topic} within {TIMEOUT}s"
        assert len(codes) == 1 and not codes[0].is_failure, f"SUBACK refused {topic}: {codes}"
        assert codes[0].value == qos, f"SUBACK granted QoS {codes[0].value}, asked {qos}"

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        """Publishes and waits until sent (QoS 0) or acknowledged (PUBACK / PUBCOMP)."""
        info = self.c.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), f"publish to {topic} (QoS {qos}) not completed in {TIMEOUT}s"

    def disconnect(self) -> None:
        """A normal DISCONNECT, waiting until the client has sent it and closed."""
        self.c.disconnect()
        assert self.disconnected.wait(TIMEOUT), "disconnect did not complete"
        self.c.loop_stop()

    def drop(self) -> None:
        """Closes the socket without DISCONNECT, as a device losing power would."""
        self.c.loop_stop()
        sock = self.c.socket()
        assert sock is not None, "client has no socket"
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def close(self) -> None:
        """Cleanup after a test: disconnect if still connected, stop the loop."""
        try:
            if self.c.is_connected():
                self.c.disconnect()
                self.disconnected.wait(2)
        finally:
            self.c.loop_stop()


# ---------------------------------------------------------------------------------------------
# mosquitto_pub / mosquitto_sub
# ---------------------------------------------------------------------------------------------


def mosquitto_pub(port: int, topic: str, payload: bytes | None, qos: int, version: str,
                  retain: bool = False) -> None:
    """Runs mosquitto_pub once; `payload=None` sends a zero-length message (-n)."""
    args = ["mosquitto_pub", "-h", HOST, "-p", str(port), "-t", topic, "-q", str(qos),
            "-V", MOSQUITTO_VERSIONS[version]]
    if payload is None:
        args.append("-n")
    else:
        args += ["-m", payload.decode()]
    if retain:
        args.append("-r")
    r = subprocess.run(args, capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0, f"{' '.join(args)} exited {r.returncode}: {r.stderr.decode()}"


class MosquittoSub:
    """mosquitto_sub in the background, with -d so we can see its CONNACK and SUBACK.

    Messages are printed as `MSG|qos|retain|topic|payload` lines (-F), debug lines start with
    "Client ".
    """

    def __init__(self, port: int, topic: str, qos: int, version: str, count: int,
                 timeout_s: int = int(TIMEOUT), extra: list[str] | None = None):
        # stdbuf: mosquitto_sub's stdout is block-buffered on a pipe, and we read it live.
        self.args = ["stdbuf", "-oL", "mosquitto_sub", "-h", HOST, "-p", str(port), "-t", topic, "-q", str(qos),
                     "-V", MOSQUITTO_VERSIONS[version], "-C", str(count), "-W", str(timeout_s),
                     "-d", "-F", "MSG|%q|%r|%t|%p"] + (extra or [])
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            with self._cond:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, needle: str, timeout: float = TIMEOUT) -> None:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: any(needle in line for line in self.lines) or self.proc.poll() is not None,
                timeout,
            )
            found = any(needle in line for line in self.lines)
        assert ok and found, f"mosquitto_sub printed no '{needle}' in {timeout}s: {self.lines}"

    def wait_subscribed(self) -> None:
        self.wait_line("received SUBACK")

    def finish(self, timeout: float = TIMEOUT + 5) -> list[tuple[int, bool, str, str]]:
        """Waits for exit 0 and returns the messages as (qos, retain, topic, payload)."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"mosquitto_sub did not exit: {self.lines}")
        self._reader.join(2)
        assert rc == 0, f"{' '.join(self.args)} exited {rc}: {self.lines}"
        return self.messages()

    def messages(self) -> list[tuple[int, bool, str, str]]:
        out = []
        with self._cond:
            lines = list(self.lines)
        for line in lines:
            if line.startswith("MSG|"):
                _, qos, retain, topic, payload = line.split("|", 4)
                out.append((int(qos), retain == "1", topic, payload))
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
