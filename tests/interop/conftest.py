"""Fixtures: one `ballast serve` process shared by the interop tests, and client cleanup."""

import pytest

from mqtt_helpers import start_broker


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """The real binary on free loopback ports. At the end it gets SIGTERM and must exit 0."""
    b = start_broker(tmp_path_factory.mktemp("ballast") / "data")
    yield b
    code = b.stop()
    assert code == 0, f"ballast exited with {code} after SIGTERM\n{b.log()}"


@pytest.fixture
def clients():
    """Collects the paho clients and mosquitto_sub processes a test makes and closes them."""
    made = []
    yield made
    for c in made:
        try:
            c.close() if hasattr(c, "close") else c.kill()
        except Exception:
            pass


def pytest_runtest_makereport(item, call):
    """On failure, show the end of the broker's log next to the assertion."""
    if call.when == "call" and call.excinfo is not None and "broker" in item.fixturenames:
        b = item.funcargs.get("broker")
        if b is not None:
            item.add_report_section("call", "ballast log (last lines)", b.log(40))
