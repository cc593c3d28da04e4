"""A real multi-node Ray cluster on this machine for the tests (``ray.cluster_utils.Cluster``):
a head and worker nodes, each its own raylet, every address on 127.0.0.1.

Two things make it start here, neither changes what Ray does once it runs:

* ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray resolve this machine's address as 127.0.0.1,
  so no node or client reaches for the outside interface. Ray reads it when imported: the nodes
  (new processes) get it from the environment, this process by setting the constant it became,
  as another test module may have imported ray first;
* each node's dashboard-agent listen port is chosen here and announced in the session folder the
  moment it exists (``ray._raylet.persist_port``, the file the agent itself writes): Ray 2.60's
  raylet waits a fixed 30 s for that file, and on a loaded shared machine the agent takes longer
  than that to import. The agent is given the same port, and writes the same file when it is up.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
import threading
from contextlib import contextmanager
from typing import Any, Iterator

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402
from ray._common.utils import get_default_ray_temp_dir  # noqa: E402
from ray._private import ray_constants  # noqa: E402
from ray._raylet import DASHBOARD_AGENT_LISTEN_PORT_NAME, persist_port  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalCluster:
    """``Cluster`` with every node on 127.0.0.1 and its agent ports fixed and announced."""

    def __init__(self) -> None:
        ray_constants.ENABLE_RAY_CLUSTER = False  # services.get_node_ip_address reads it per call
        self.temp_dir = tempfile.mkdtemp(prefix="wb-raycluster-", dir="/tmp")
        # the head also notes its address in Ray's default temp folder, which it does not create
        os.makedirs(get_default_ray_temp_dir(), exist_ok=True)
        self._announce: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._announcer, daemon=True)
        self._thread.start()
        self.cluster = Cluster(initialize_head=True, head_node_args=self._node_args(
            num_cpus=0, include_dashboard=False, temp_dir=self.temp_dir))

    def _node_args(self, **kwargs: Any) -> dict:
        node_id = ray.NodeID.from_random().hex()
        listen = _free_port()
        self._announce[node_id] = listen
        return {"node_ip_address": "127.0.0.1", "metrics_agent_port": _free_port(), "metrics_export_port": _free_port(),
                "runtime_env_agent_port": _free_port(), "dashboard_agent_listen_port": listen,
                "env_vars": {"RAY_OVERRIDE_NODE_ID_FOR_TESTING": node_id}, **kwargs}

    def _announcer(self) -> None:
        written: set[tuple[str, str]] = set()
        while not self._stop.wait(0.05):
            for session in glob.glob(os.path.join(self.temp_dir, "session_2*")):
                for node_id, port in list(self._announce.items()):
                    if (session, node_id) not in written:
                        persist_port(session, node_id, DASHBOARD_AGENT_LISTEN_PORT_NAME, port)
                        written.add((session, node_id))

    def add_worker(self, **kwargs: Any):
        return self.cluster.add_node(**self._node_args(**kwargs))

    @property
    def address(self) -> str:
        return self.cluster.address

    def shutdown(self) -> None:
        try:
            if ray.is_initialized():
                ray.shutdown()
            self.cluster.shutdown()
        finally:
            self._stop.set()
            shutil.rmtree(self.temp_dir, ignore_errors=True)  # the sessions' logs and sockets


@contextmanager
def local_cluster(workers: list[dict]) -> Iterator[LocalCluster]:
    """A head (no CPUs: tasks go to the workers) and one worker node per ``workers`` entry
    (``add_node`` keywords), this process connected as the driver; all shut down at the end."""
    cluster = LocalCluster()
    try:
        for worker in workers:
            cluster.add_worker(**worker)
        cluster.cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        yield cluster
    finally:
        cluster.shutdown()
