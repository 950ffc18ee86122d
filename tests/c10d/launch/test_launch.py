"""The "kolo" backend under each way torch.distributed programs are started:
torchrun, mp.spawn, tcp:// and file:// init, Slurm's environment, kolorun
(env://, set by kolorun); "cpu:kolo,cuda:gloo", device meshes, the timeline,
and a peer that dies. Each test starts its processes itself, bounded in time.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
KOLORUN = os.environ["KOLO_TEST_KOLORUN"]
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env=None, timeout=120):
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, text=True)
    return p.returncode, p.stdout


def ranks(env_per_rank, args, timeout=120):
    """One process per rank with its own variables; (exit codes, outputs)."""
    procs = []
    for env in env_per_rank:
        full = dict(os.environ)
        full.update(env)
        procs.append(subprocess.Popen([sys.executable, WORKER] + args, env=full, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            p.kill()
    return [p.returncode for p in procs], outs


def assert_ok(output, size):
    for r in range(size):
        assert "ok %d %d %g" % (r, size, size * (size + 1) / 2) in output, output


@pytest.mark.parametrize("size", [2, 3])
def test_kolorun_sets_what_env_needs(size):
    code, out = run([KOLORUN, "--start-timeout", "120", "-np", str(size), sys.executable, WORKER, "env"])
    assert code == 0, out
    assert_ok(out, size)


@pytest.mark.parametrize("method", ["tcp", "file"])
def test_tcp_and_file_init(method, tmp_path):
    url = ("tcp://127.0.0.1:%d" % free_port() if method == "tcp"
           else "file://" + str(tmp_path / "rendezvous"))
    procs = []
    for r in range(2):
        procs.append(subprocess.Popen([sys.executable, WORKER, url, str(r), "2"], text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    out = "".join(p.communicate(timeout=120)[0] for p in procs)
    assert all(p.returncode == 0 for p in procs), out
    assert_ok(out, 2)


def test_mp_spawn():
    code, out = run([sys.executable, WORKER, "spawn", "tcp://127.0.0.1:%d" % free_port()])
    assert code == 0, out
    assert_ok(out, 2)


def test_slurm_environment():
    port = str(free_port())
    env = [{"SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(r),
            "SLURM_NODEID": "0", "SLURM_JOB_ID": "7", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port} for r in range(2)]
    codes, outs = ranks(env, ["slurm"])
    assert codes == [0, 0], outs
    assert_ok("".join(outs), 2)


@pytest.mark.skipif(not TORCH2, reason="torch 1.13's torchrun fails on Python 3.11 before "
                                       "starting a worker; the torch 2.x stage runs this")
def test_torchrun():
    code, out = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                     "--master-port", str(free_port()), WORKER, "env"])
    assert code == 0, out
    assert_ok(out, 2)


@pytest.mark.skipif(not TORCH2, reason="torch 1.13's torchrun fails on Python 3.11 before "
                                       "starting a worker; the torch 2.x stage runs this")
def test_torchrun_runs_a_horovod_api_script():
    """kolo.torch (hvd.init()) under torchrun itself: kolo reads torchrun's
    variables and meets the other ranks on MASTER_PORT + 1."""
    port = free_port()
    while port >= 65535:
        port = free_port()
    code, out = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                     "--master-port", str(port), WORKER, "hvd"])
    assert code == 0, out
    assert_ok(out, 2)


HOSTS_SCRIPT = os.path.join(HERE, "..", "..", "..", "scripts", "netns-hosts.sh")


@pytest.fixture
def namespace_host():
    """A second host: a network namespace on a bridge (scripts/netns-hosts.sh),
    named after this process. Yields (namespace, its address, this side's
    address); removed afterwards. Skips without root or `ip`."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and ip(8) to make a network namespace as the second node")
    used = subprocess.run(["ip", "-o", "addr"], stdout=subprocess.PIPE, text=True).stdout
    net = next(n for n in range(150, 250) if "10.77.%d." % n not in used)
    prefix = "tr%dh" % (os.getpid() % 100000)
    up = subprocess.run(["sh", HOSTS_SCRIPT, "up", prefix, "1", str(net)], text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if up.returncode != 0:
            pytest.skip("could not make a network namespace: " + up.stdout.strip())
        ns, addr = up.stdout.split()[:2]
        yield ns, addr, "10.77.%d.1" % net
    finally:
        subprocess.run(["sh", HOSTS_SCRIPT, "down", prefix])


@pytest.mark.skipif(not TORCH2, reason="torch 1.13's torchrun fails on Python 3.11 before "
                                       "starting a worker; the torch 2.x stage runs this")
def test_torchrun_two_nodes_c10d_rendezvous_restarts_a_failed_worker(namespace_host):
    """torchrun on two nodes (this host and a network namespace), as a
    cluster runs it: --nnodes 2, the c10d rendezvous, --max-restarts 1.
    Rank 1 of the first attempt dies after hvd.init(); its peer's allreduce
    fails naming it, torchrun restarts both workers, and the second
    attempt's kolo meets on that attempt's MASTER_ADDR/MASTER_PORT, across
    the veth link, and succeeds."""
    ns, addr, here = namespace_host
    port = free_port()
    agents = []
    for node, local in ((0, here), (1, addr)):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
               "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", "%s:%d" % (here, port), "--rdzv-id", "kolo-%d" % port,
               "--local-addr", local, "--max-restarts", "1", "--monitor-interval", "0.2",
               # The first agent serves the rendezvous store: torchrun does not
               # know the bridge's address as this machine's own.
               "--rdzv-conf", "is_host=%s" % ("true" if node == 0 else "false"),
               WORKER, "hvd-fail-once"]
        if node == 1:
            cmd = ["ip", "netns", "exec", ns] + cmd
        agents.append(subprocess.Popen(cmd, env=dict(os.environ, KOLO_TIMEOUT="20"), text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    try:
        for a in agents:
            outs.append(a.communicate(timeout=240)[0])
    finally:
        for a in agents:
            a.kill()
    out = "\n".join(outs)
    assert [a.returncode for a in agents] == [0, 0], out
    assert "rank 1 fails on purpose (attempt 0)" in out, out
    assert_ok(out, 2)


@pytest.mark.skipif(not TORCH2, reason="per-device backends (\"cpu:kolo,...\") are torch 2.x")
def test_kolo_for_cpu_tensors_beside_another_backend():
    code, out = run([KOLORUN, "--start-timeout", "120", "-np", "2", sys.executable, WORKER, "mixed"])
    assert code == 0, out
    assert "backend cpu:kolo,cuda:gloo" in out, out
    assert_ok(out, 2)


@pytest.mark.skipif(not TORCH2, reason="device meshes are torch 2.x")
def test_device_mesh_on_kolo():
    code, out = run([KOLORUN, "--start-timeout", "120", "-np", "2", sys.executable, WORKER, "mesh"])
    assert code == 0, out
    assert_ok(out, 2)


def test_timeline_names_calls_by_kind(tmp_path):
    """The default group writes timeline.pg0.json, beside the file of
    kolo.torch's engine (hvd.init() in the same process), which keeps
    KOLO_TIMELINE's own path."""
    path = str(tmp_path / "timeline.json")
    code, out = run([KOLORUN, "--start-timeout", "120", "-np", "2", sys.executable, WORKER, "timeline"],
                    env={"KOLO_TIMELINE": path})
    assert code == 0, out
    with open(str(tmp_path / "timeline.pg0.json")) as f:
        events = json.load(f)
    with open(path) as f:
        hvd_events = json.load(f)
    assert any(e.get("name") == "ALLREDUCE" for e in hvd_events), hvd_events
    rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "all_reduce(op=SUM)" in rows and "broadcast(src=0)" in rows, rows
    # Each call's span names it by the group and its place in the sequence.
    calls = [e["args"]["name"] for e in events
             if e.get("ph") == "B" and e.get("name") in ("ALLREDUCE", "BROADCAST")]
    assert calls == ["process group 0 #%d" % n for n in range(4)], calls


def test_a_dead_peer_is_named_within_seconds():
    code, out = run([KOLORUN, "--start-timeout", "120", "-np", "2", sys.executable, WORKER, "dead-peer"],
                    env={"KOLO_TIMEOUT": "60"}, timeout=120)
    assert code == 0, out
    line = [l for l in out.splitlines() if "failed after" in l]
    assert line, out
    seconds = float(line[0].split("failed after ")[1].split(" s")[0])
    assert seconds < 30, line[0]
    assert "rank 1" in line[0], line[0]


def test_the_ddp_example_runs_unchanged_but_for_the_backend_string():
    """examples/python/ddp_fashion_mnist.py on gloo and on kolo: the same
    loss, accuracy and parameters."""
    example = os.path.join(HERE, "..", "..", "..", "examples", "python", "ddp_fashion_mnist.py")
    results = {}
    for backend in ("gloo", "kolo"):
        code, out = run([KOLORUN, "--start-timeout", "120", "-np", "2", sys.executable, example, "--backend", backend,
                         "--limit", "600"], timeout=300)
        assert code == 0, out
        line = [l for l in out.splitlines() if "parameter checksum" in l]
        assert line, out
        fields = line[0].split("epoch 1: ")[1]
        results[backend] = (fields.split(", ")[0], fields.split(", ")[1],
                            float(fields.split("parameter checksum ")[1]))
    assert results["gloo"][:2] == results["kolo"][:2], results
    assert abs(results["gloo"][2] - results["kolo"][2]) < 1e-3, results
