"""Placement of kolo.ray workers: the placement group that reserves their
resources, and ranks derived from the nodes Ray chose.

Ranks follow kolorun's layout: the workers of a node get consecutive
ranks, nodes in the order of their first bundle; local_rank is the index
on the node, cross_rank the node's index, cross_size the number of nodes.
"""
import time

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
"""The placement strategies Ray's placement groups accept."""


def bundles_for(num_workers, cpus_per_worker, gpus_per_worker, resources_per_worker=None):
    """num_workers equal placement-group bundles ({"CPU": ..., "GPU": ...,
    other resources}); resources of 0 or None are left out."""
    bundle = {}
    if cpus_per_worker:
        bundle["CPU"] = float(cpus_per_worker)
    if gpus_per_worker:
        bundle["GPU"] = float(gpus_per_worker)
    for name, amount in (resources_per_worker or {}).items():
        bundle[name] = float(amount)
    return [dict(bundle) for _ in range(num_workers)]


def _fmt(value):
    return ("%g" % value) if isinstance(value, float) else str(value)


def describe_shortage(ray, bundles, strategy):
    """One sentence: what the workers ask for and what the cluster has."""
    need = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    total = ray.cluster_resources()
    free = ray.available_resources()
    parts = []
    for name in sorted(need):
        have_total, have_free = total.get(name, 0.0), free.get(name, 0.0)
        flag = " (missing %s)" % _fmt(need[name] - have_free) if have_free < need[name] else ""
        parts.append("%s: need %s, %s free of %s in the cluster%s" % (
            name, _fmt(need[name]), _fmt(have_free), _fmt(have_total), flag))
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    per_node = "; ".join(
        "node %s: %s" % (n.get("NodeManagerAddress", "?"),
                         ", ".join("%s %s" % (k, _fmt(v)) for k, v in sorted(n.get("Resources", {}).items())
                                   if k in need))
        for n in nodes)
    text = "%d workers x %s (%s placement): %s" % (
        len(bundles), bundles[0] if bundles else {}, strategy, "; ".join(parts))
    if "STRICT" in strategy or all(free.get(k, 0.0) >= v for k, v in need.items()):
        text += " (per node: %s)" % per_node
    return text


def create_placement_group(ray, bundles, strategy, timeout_s):
    """Reserves the bundles; raises TimeoutError naming what is missing when
    Ray cannot place them within timeout_s (the group is removed first)."""
    from ray.util.placement_group import placement_group, remove_placement_group
    if strategy not in STRATEGIES:
        raise ValueError("placement strategy %r: expected one of %s" % (strategy, ", ".join(STRATEGIES)))
    pg = placement_group(bundles, strategy=strategy)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        shortage = describe_shortage(ray, bundles, strategy)
        remove_placement_group(pg)
        raise TimeoutError(
            "kolo.ray: Ray could not place the workers within %s s (start_timeout): %s. "
            "Start fewer workers, ask for fewer resources per worker, or add nodes to the "
            "cluster." % (_fmt(float(timeout_s)), shortage))
    return pg


def assign_ranks(infos):
    """infos: node_info() of each worker in bundle order. Returns one dict
    per worker (same order): rank, size, local_rank, local_size, cross_rank,
    cross_size, node (ip) and host index."""
    node_order = []
    for info in infos:
        if info["node_id"] not in node_order:
            node_order.append(info["node_id"])
    by_node = {n: [i for i, info in enumerate(infos) if info["node_id"] == n] for n in node_order}
    out = [None] * len(infos)
    rank = 0
    for cross_rank, node in enumerate(node_order):
        members = by_node[node]
        for local_rank, i in enumerate(members):
            out[i] = {
                "rank": rank,
                "size": len(infos),
                "local_rank": local_rank,
                "local_size": len(members),
                "cross_rank": cross_rank,
                "cross_size": len(node_order),
            }
            rank += 1
    return out


def node_gpu_lists(infos, places):
    """CUDA_VISIBLE_DEVICES per worker: every GPU Ray gave the workers of its
    node, in local-rank order, so that device local_rank * gpus_per_worker
    is the worker's own first GPU (Horovod scripts call
    torch.cuda.set_device(hvd.local_rank()))."""
    by_node = {}
    for info, place in sorted(zip(infos, places), key=lambda ip: ip[1]["rank"]):
        by_node.setdefault(info["node_id"], []).extend(info["gpu_ids"])
    return [",".join(by_node[info["node_id"]]) for info in infos]


class Deadline:
    """Seconds left until a point in time (for bounded multi-step waits)."""

    def __init__(self, seconds):
        self._end = time.monotonic() + seconds

    def left(self):
        """Seconds until the deadline, 0.0 once it passed."""
        return max(0.0, self._end - time.monotonic())
