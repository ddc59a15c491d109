"""The default port of each Poolscope service, in one place.

Prometheus keeps a wiki page of default ports ("Default port allocations") so that
exporters on one host do not collide. Its exporter range, 9100-9999, is fully
allocated: 9201 and 9202, Poolscope's first defaults, belong to the remote-storage
bridge example and the Pacemaker exporter. These four sit outside every range the
page lists, and outside /etc/services. The Instance exporter's block leaves room for
one exporter per engine on a host (10100, 10101, ...). docs/ports.md says the same
for operators; tests/deploy/test_ports_documented.py keeps the deploy files in step.
"""

from __future__ import annotations

INSTANCE_EXPORTER = 10100  # a second engine on the host: 10101, and so on up to 10109
PROXY_EXPORTER = 10110
PROXY_BRIDGE = 10120
SCHEDULER_BRIDGE = 10130


def loopback(port: int) -> str:
    """The default listen address: loopback, so nothing is exposed until asked."""
    return f"127.0.0.1:{port}"
