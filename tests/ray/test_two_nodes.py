"""kolo.ray across two Ray nodes on one machine: a Ray head in this network
namespace and a second Ray node in a network namespace "host" (made by
scripts/netns-hosts.sh, as the launcher's and elastic's multi-host tests
make theirs), joined with `ray start --address=HEAD`. A RayExecutor of 4
workers, 2 per node, must give ranks, local ranks and cross ranks that
follow the nodes Ray chose, and its collectives must cross the veth link;
the same through Ray Train (DataParallelTrainer with KoloConfig, 4 one-CPU
workers spread over the two 2-CPU nodes), where kolo's ranks must be Ray
Train's (world rank, local rank, node rank).

    PYTHONPATH=<build>/python python -m pytest -q tests/ray/test_two_nodes.py

Needs root (CAP_NET_ADMIN) and `ip`; skips, saying so, without them.

Isolation from other tests running at the same time: the namespace, bridge
and 10.77.NET.0/24 subnet are named after this process (NET is one no
interface uses yet), each node has its own Ray temp dir under a fresh
/tmp directory, and every Ray process of this cluster carries
KOLO_RAY_TWO_NODES=<this pid> in its environment. Cleanup ends exactly
those processes (SIGTERM to each `ray start --block`, then SIGKILL to any
process with the marker) and removes the namespace, even when a step
failed; `ray stop` is not used, since it stops every Ray process of the
machine, other tests' clusters included. Leftovers of an earlier run that
was killed (its pid gone) are removed first.
"""
import faulthandler
import glob
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

if __name__ != "__main__":
    # Ray Train V2 (Ray's default; test_train.py sets it the same way), read
    # when ray.train is imported; the cluster's processes get it too.
    os.environ["RAY_TRAIN_V2_ENABLED"] = "1"

import pytest

import ray
import ray.cloudpickle

from conftest import alive, kolo_segments

# Ray's workers on the namespaced node cannot import this file by name.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HOSTS_SCRIPT = os.path.join(SOURCE_DIR, "scripts", "netns-hosts.sh")
MARKER = "KOLO_RAY_TWO_NODES"
CPUS_PER_NODE = 2
NODE_START_S = 90   # both Ray nodes up and registered, on a loaded 2-core machine
SETUP_S = 3 * NODE_START_S  # the whole cluster fixture's setup
STOP_GRACE_S = 5    # Ray processes to end after SIGTERM, before SIGKILL


def _prefix(pid):
    # The whole pid (at most 7 digits): "kr<pid>hbr" fits an interface name.
    return "kr%dh" % pid


def _run(cmd, timeout=30):
    return subprocess.run(cmd, shell=isinstance(cmd, str), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout, text=True)


def _processes():
    """pid -> (session id, start time, network namespace inode, MARKER's
    value or None) of every process but this one. The marker is in the
    environment of every process Ray starts, but a process that renamed
    itself (setproctitle: Ray's workers and agents) may have overwritten
    it there; its session id (that of the `ray start` it descends from)
    and, on the namespaced node, its network namespace still tell."""
    out = {}
    needle = (MARKER + "=").encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            netns = os.stat("/proc/%s/ns/net" % name).st_ino
            with open("/proc/%s/environ" % name, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        marker = next((item[len(needle):].decode(errors="replace") for item in env
                       if item.startswith(needle)), None)
        out[int(name)] = (int(fields[3]), fields[19], netns, marker)
    return out


def _stop_processes(belongs, grace_s):
    """`ray stop` for one cluster alone: SIGTERM to every process for which
    belongs(session, netns, marker) holds, SIGKILL to what is left after
    grace_s. Returns the pids still alive 10 s after that."""
    known = {}  # pid -> start time, of every member seen: outlives reparenting
    left = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        deadline = time.monotonic() + wait_s
        signalled = set()
        while True:
            procs = _processes()
            for pid, (sid, start, netns, marker) in procs.items():
                if belongs(sid, netns, marker):
                    known.setdefault(pid, start)
            left = [pid for pid, start in known.items()
                    if pid in procs and procs[pid][1] == start]
            for pid in left:
                if pid not in signalled:
                    signalled.add(pid)
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not left:
            return []
    return left


def _netns_inode(ns):
    try:
        return os.stat("/run/netns/" + ns).st_ino
    except OSError:
        return None


def _remove_leftovers():
    """Namespaces and Ray processes of earlier runs whose pytest is gone
    (killed by ctest's timeout, say)."""
    stale = set()
    listing = _run("ip netns list; ip -o link show").stdout
    for word in re.findall(r"\bkr(\d+)h(?:\d+|br|v\d+)\b", listing):
        stale.add(int(word))
    for _, _, _, marker in _processes().values():
        if marker and marker.isdigit():
            stale.add(int(marker))
    for pid in stale:
        if pid == os.getpid() or alive(pid):
            continue
        mark = str(pid)
        ns = _netns_inode(_prefix(pid) + "1")
        # The sessions of its `ray start`s: those of the processes that
        # still show the marker (gcs_server, raylet).
        sessions = {sid for sid, _, _, m in _processes().values() if m == mark}
        _stop_processes(lambda sid, netns, m: (m == mark or sid in sessions
                                               or (ns is not None and netns == ns)), 0)
        _run([HOSTS_SCRIPT, "down", _prefix(pid)])
        for d in glob.glob("/tmp/%s-*" % _prefix(pid)):
            shutil.rmtree(d, ignore_errors=True)


def _free_net(seed):
    """The third octet of a 10.77.NET.0/24 no interface here uses yet."""
    used = _run("ip -o -4 addr show").stdout
    for k in range(200):
        net = 20 + (seed + 31 + k) % 200
        if " 10.77.%d." % net not in used:
            return net
    pytest.skip("no free 10.77.NET.0/24 test subnet")


def _free_ports(addr, n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((addr, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class TwoNodes:
    """The head (this namespace, on the bridge's address) and one node in
    namespace `ns`. Every method is bounded; stop() is safe to call twice
    and after a failed start."""

    def __init__(self):
        self.prefix = _prefix(os.getpid())
        self.ns = self.prefix + "1"
        self.net = None
        self.created = False
        self.ns_inode = None
        self.procs = []       # (name, Popen, log path) of each `ray start --block`
        # Short (Ray's socket paths), named after this process for the sweep.
        self.tmp = tempfile.mkdtemp(prefix=self.prefix + "-", dir="/tmp")
        self.env = dict(os.environ)
        self.env[MARKER] = str(os.getpid())
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.env["RAY_TRAIN_V2_ENABLED"] = "1"
        # This cluster's own token (Ray would otherwise take ~/.ray/auth_token,
        # shared with every other local cluster), given to the driver too.
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.env.update(self.auth)
        # `ray` of this interpreter, whatever is first on PATH.
        self.ray = [sys.executable, "-m", "ray.scripts.scripts"]

    def make_host(self):
        self.net = _free_net(os.getpid())
        up = _run([HOSTS_SCRIPT, "up", self.prefix, "1", str(self.net)])
        self.created = True
        if up.returncode != 0:
            return up.stdout
        self.head_ip = "10.77.%d.1" % self.net     # the bridge, in this namespace
        self.node_ip = "10.77.%d.2" % self.net     # eth0 in self.ns
        self.ns_inode = _netns_inode(self.ns)
        return None

    def _start(self, name, argv):
        log = os.path.join(self.tmp, name + ".log")
        with open(log, "wb") as out:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, env=self.env, cwd=self.tmp,
                                 start_new_session=True)
        self.procs.append((name, p, log))

    def _common(self, temp_dir):
        return ["--num-cpus=%d" % CPUS_PER_NODE, "--num-gpus=0",
                "--object-store-memory=%d" % (100 * 1024 * 1024),
                "--temp-dir=" + temp_dir, "--disable-usage-stats",
                "--block"]

    def start(self):
        # Ports of the head, on the bridge's address, are taken by nobody
        # now; the namespaced node's ports cannot clash with anything.
        (self.port, nm, om, agent_http, agent_grpc, rt_env,
         metrics) = _free_ports(self.head_ip, 7)
        head_tmp = os.path.join(self.tmp, "h")
        self._start("head", [
            *self.ray, "start", "--head", "--node-ip-address=" + self.head_ip,
            "--port=%d" % self.port, "--node-manager-port=%d" % nm,
            "--object-manager-port=%d" % om, "--dashboard-agent-listen-port=%d" % agent_http,
            "--dashboard-agent-grpc-port=%d" % agent_grpc, "--runtime-env-agent-port=%d" % rt_env,
            "--metrics-export-port=%d" % metrics, "--include-dashboard=false",
        ] + self._common(head_tmp))
        self.address = "%s:%d" % (self.head_ip, self.port)
        self._wait_port(self.head_ip, self.port, "head")
        self._start("node", [
            "ip", "netns", "exec", self.ns, "env", "PYTHONPATH=" + self.env.get("PYTHONPATH", ""),
            *self.ray, "start", "--address=" + self.address, "--node-ip-address=" + self.node_ip,
        ] + self._common(os.path.join(self.tmp, "n")))

    def _wait_port(self, host, port, name):
        deadline = time.monotonic() + NODE_START_S
        while time.monotonic() < deadline:
            self.check_running()
            try:
                socket.create_connection((host, port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.3)
        raise AssertionError("the Ray %s did not listen on %s:%d within %d s\n%s"
                             % (name, host, port, NODE_START_S, self.logs()))

    def check_running(self):
        for name, p, _ in self.procs:
            if p.poll() is not None:
                raise AssertionError("`ray start` of the %s exited (%s)\n%s"
                                     % (name, p.returncode, self.logs()))

    def wait_nodes(self, count):
        """Returns ray.nodes() once `count` nodes are alive (bounded)."""
        deadline = time.monotonic() + NODE_START_S
        while True:
            self.check_running()
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            if len(nodes) >= count:
                return nodes
            if time.monotonic() > deadline:
                raise AssertionError("%d of %d Ray nodes alive after %d s: %s\n%s"
                                     % (len(nodes), count, NODE_START_S, nodes, self.logs()))
            time.sleep(0.5)

    def logs(self):
        out = []
        for name, _, log in self.procs:
            try:
                with open(log, errors="replace") as f:
                    out.append("--- ray start (%s):\n%s" % (name, f.read()[-3000:]))
            except OSError:
                pass
        return "\n".join(out)

    def stop(self):
        """Stops both nodes and removes the namespace; returns what was
        left running (pids), which should be nothing."""
        # Ray's own graceful stop (SIGTERM) can take longer than a test
        # should wait on a loaded machine; what is left then is killed.
        sessions = {p.pid for _, p, _ in self.procs}
        marker = str(os.getpid())
        left = _stop_processes(
            lambda sid, netns, mark: (sid in sessions or mark == marker
                                      or (self.ns_inode is not None and netns == self.ns_inode)),
            STOP_GRACE_S)
        for _, p, _ in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                left.append(p.pid)
        self.procs = []
        if self.created:
            _run([HOSTS_SCRIPT, "down", self.prefix])
            self.created = False
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left


def _use_auth(values):
    """This process's Ray authentication from now on: values of
    RAY_AUTH_MODE and RAY_AUTH_TOKEN (None: unset). Ray reads both once
    and caches them; the reload is what Ray's own token setup does."""
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    from ray._raylet import AuthenticationTokenLoader, Config
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("needs root (CAP_NET_ADMIN) to create a network namespace; the two-node "
                    "Ray test did not run")
    if shutil.which("ip") is None:
        pytest.skip("`ip` (Debian package iproute2) is missing; the two-node Ray test did not run")
    _remove_leftovers()
    nodes = TwoNodes()
    failed = nodes.make_host()
    if failed is not None:
        nodes.stop()
        pytest.skip("cannot create network namespaces here (%s up failed: %s); the two-node "
                    "Ray test did not run" % (HOSTS_SCRIPT, failed.strip()))
    saved = {k: os.environ.get(k) for k in nodes.auth}
    _use_auth(nodes.auth)
    left = None
    try:
        # conftest's watchdog bounds each test, not this module's setup.
        faulthandler.dump_traceback_later(SETUP_S, exit=True, file=sys.stderr)
        nodes.start()
        ray.init(address=nodes.address, _node_ip_address=nodes.head_ip,
                 logging_level="WARNING", log_to_driver=True)
        try:
            nodes.ray_nodes = nodes.wait_nodes(2)
            faulthandler.cancel_dump_traceback_later()
            yield nodes
        finally:
            ray.shutdown()
    finally:
        faulthandler.cancel_dump_traceback_later()
        left = nodes.stop()
        _use_auth(saved)
    assert not left, "Ray processes left after stopping both nodes: %s" % left


def collectives():
    import os
    import torch
    import kolo.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    summed = hvd.allreduce(torch.tensor([float(r + 1), 10.0 * r]), op=hvd.Sum, name="sum")
    avg = hvd.allreduce(torch.full((3,), float(r)), name="avg")
    gathered = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int64), name="gather")
    return {
        "rank": r, "size": n, "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
        "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "pid": os.getpid(),
        "netns": os.stat("/proc/self/ns/net").st_ino,
        "sum": summed.tolist(), "avg": avg.tolist(), "gathered": gathered.tolist(),
    }


@pytest.mark.timeout_s(240)
def test_executor_ranks_span_both_nodes(cluster):
    import kolo.ray
    ips = sorted(n["NodeManagerAddress"] for n in cluster.ray_nodes)
    assert ips == sorted([cluster.head_ip, cluster.node_ip])
    root_ns = os.stat("/proc/self/ns/net").st_ino
    ns_of = {cluster.head_ip: root_ns, cluster.node_ip: _netns_inode(cluster.ns)}

    before = kolo_segments()
    settings = kolo.ray.RayExecutor.create_settings(timeout_s=30, start_timeout=90)
    ex = kolo.ray.RayExecutor(settings, num_hosts=2, num_workers_per_host=2, cpus_per_worker=1)
    ex.start()
    try:
        infos = ex.worker_info()
        out = ex.run(collectives)
    finally:
        ex.shutdown()

    n = 4
    assert [o["rank"] for o in out] == list(range(n))
    assert [o["pid"] for o in out] == [i["pid"] for i in infos]
    by_node = {}
    for o, info in zip(out, infos):
        assert o["size"] == n
        assert (o["local_size"], o["cross_size"]) == (2, 2), o
        # The worker runs in the namespace of the node Ray says it is on.
        assert o["netns"] == ns_of[info["node"]], (o, info)
        by_node.setdefault(info["node"], []).append(o)
    assert sorted(by_node) == sorted(ns_of), infos
    # kolorun's layout: a node's workers have consecutive ranks, local
    # ranks 0 and 1, and share the node's cross rank; the nodes have cross
    # ranks 0 and 1.
    cross = {}
    for node, members in by_node.items():
        assert [m["local_rank"] for m in members] == [0, 1], members
        assert len({m["cross_rank"] for m in members}) == 1, members
        assert members[1]["rank"] == members[0]["rank"] + 1, members
        assert members[0]["rank"] == 2 * members[0]["cross_rank"], members
        cross[node] = members[0]["cross_rank"]
    assert sorted(cross.values()) == [0, 1]
    for o in out:
        assert o["sum"] == [10.0, 60.0]
        assert o["avg"] == [1.5] * 3
        assert o["gathered"] == [[r, r] for r in range(n) for _ in range(r + 1)]

    # shutdown() left no actor, worker process or shared-memory segment.
    from ray._private import state
    actor_ids = {i["actor_id"] for i in infos}
    deadline = time.monotonic() + 20
    while True:
        left = ["actor %s (%s)" % (aid, a["State"]) for aid, a in state.actors().items()
                if aid in actor_ids and a["State"] != "DEAD"]
        left += ["pid %d" % i["pid"] for i in infos if alive(i["pid"])]
        extra = kolo_segments() - before
        if not left and not extra:
            break
        assert time.monotonic() < deadline, "left after shutdown(): %s %s" % (left, sorted(extra))
        time.sleep(0.2)


def train_loop(config):
    import os
    import torch
    import ray.train
    import kolo.torch as hvd
    hvd.init()
    ctx = ray.train.get_context()
    ip = ray.util.get_node_ip_address()
    mine = torch.tensor([[
        hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
        hvd.cross_size(), ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(),
        ctx.get_local_world_size(), ctx.get_node_rank(), int(ip.rsplit(".", 1)[1]),
        os.stat("/proc/self/ns/net").st_ino]], dtype=torch.int64)
    rows = hvd.allgather(mine, name="layout")
    summed = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="sum")
    metrics = {"rows": rows.tolist(), "sum": summed.item()}
    # Train V2's Result.metrics are those of the last checkpoint: rank 0
    # reports one.
    if hvd.rank() == 0:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "rank0"), "w") as f:
                f.write("0")
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
    else:
        ray.train.report(metrics)


TRAIN_FIELDS = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
                "world_rank", "world_size", "train_local_rank", "train_local_size",
                "node_rank", "ip_octet", "netns")


@pytest.mark.timeout_s(240)
def test_train_ranks_span_both_nodes(cluster, tmp_path):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from kolo.ray import KoloConfig
    trainer = DataParallelTrainer(
        train_loop, backend_config=KoloConfig(timeout_s=30),
        scaling_config=ScalingConfig(num_workers=4, resources_per_worker={"CPU": 1},
                                     placement_strategy="SPREAD"),
        run_config=RunConfig(name="two-nodes", storage_path=str(tmp_path)))
    result = trainer.fit()
    assert result.error is None, result.error
    assert result.metrics is not None, result
    rows = [dict(zip(TRAIN_FIELDS, row)) for row in result.metrics["rows"]]
    assert result.metrics["sum"] == 10.0
    root_ns = os.stat("/proc/self/ns/net").st_ino
    ns_of = {1: root_ns, 2: _netns_inode(cluster.ns)}   # last octet of each node's address
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    by_node = {}
    for r in rows:
        assert r["netns"] == ns_of[r["ip_octet"]], r
        # kolo's ranks are Ray Train's.
        assert (r["rank"], r["size"]) == (r["world_rank"], r["world_size"]) == (r["rank"], 4), r
        assert (r["local_rank"], r["local_size"]) == (r["train_local_rank"],
                                                      r["train_local_size"]), r
        assert (r["cross_rank"], r["cross_size"]) == (r["node_rank"], 2), r
        by_node.setdefault(r["ip_octet"], []).append(r)
    assert sorted(by_node) == [1, 2], rows
    assert sorted(members[0]["cross_rank"] for members in by_node.values()) == [0, 1]
    for members in by_node.values():
        assert [m["local_rank"] for m in members] == [0, 1], rows
        assert len({m["cross_rank"] for m in members}) == 1, rows
