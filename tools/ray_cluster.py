"""A Ray cluster on this machine for the Ray backend's tests and benchmark (agent/ray_environments.py):
a head without CPUs (it runs no sandbox) and `nodes` worker nodes, each its own raylet with its own
workers, every Ray process on the loopback address.

    with local_cluster(nodes=2) as cluster:      # cluster.address for agent.ray_address
        ...
        cluster.kill_worker_node()               # a node lost: its raylet and workers killed

`cores`: per node, the CPUs its raylet (and so its workers and their sandboxes) may run on.
"""
from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

# Ray otherwise binds its services to the host's outward address; its switch for single-machine
# clusters keeps them all on 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# A lost node is noticed within about 5 s (Ray's defaults: about 30 s), and a raylet slowed by a busy
# machine is not taken for a lost one.
FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 10,
                      "health_check_initial_delay_ms": 0}


@dataclass
class LocalCluster:
    cluster: Any
    workers: list = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.cluster.address

    def kill_worker_node(self) -> None:
        """Kills the last worker node still up, as a machine lost: its raylet's children (the workers,
        which would otherwise serve their callers until they notice the raylet gone) and then the raylet
        and the node's other processes, with SIGKILL."""
        from ray._private import ray_constants

        node = self.workers.pop()
        raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
        for pid in _children(raylet):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.cluster.remove_node(node, allow_graceful=False)

    def alive_worker_nodes(self) -> int:
        import ray

        return sum(n["Alive"] and n["Resources"].get("CPU", 0) > 0 for n in ray.nodes())


def _children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (from /proc: no process library needed)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found.append(int(stat.parent.name))
    return found


@contextlib.contextmanager
def local_cluster(nodes: int = 2, cpus_per_node: int = 1,
                  cores: Optional[Sequence[set[int]]] = None) -> Iterator[LocalCluster]:
    import ray
    from ray.cluster_utils import Cluster

    small = {"object_store_memory": 80 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "_system_config": FAST_HEALTH_CHECKS, **small})
    running = LocalCluster(cluster)
    mine = os.sched_getaffinity(0)
    try:
        for i in range(nodes):
            if cores is not None:
                os.sched_setaffinity(0, cores[i])  # the raylet, its workers and their sandboxes inherit it
            running.workers.append(cluster.add_node(num_cpus=cpus_per_node, **small))
        os.sched_setaffinity(0, mine)
        cluster.wait_for_nodes()
        yield running
    finally:
        os.sched_setaffinity(0, mine)
        ray.shutdown()
        cluster.shutdown()
