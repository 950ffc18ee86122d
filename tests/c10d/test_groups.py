"""Groups on the process's one engine: every new_group(backend="kolo") is a
process set of the engine the default group made, so groups add no loop
thread, ops of two groups issued in opposite orders complete, groups made by
their members alone work, and send/recv (from a named rank or from any
source) go through the core's point-to-point messages, as gloo's do.
"""

import pytest
import torch
import torch.distributed as dist

from conftest import GLOO, KOLO, TIMEOUT, TORCH2, thread_names


def check(got, expected, what):
    assert got.dtype == expected.dtype and torch.equal(got, expected), \
        "%s: got %s, expected %s" % (what, got, expected)


def test_eight_groups_add_no_loop_thread(rank, size):
    dist.barrier(group=KOLO)
    before = thread_names()
    groups = [dist.new_group(backend="kolo", timeout=TIMEOUT) for _ in range(8)]
    for i, g in enumerate(groups):
        t = torch.full((2,), float(rank + i))
        dist.all_reduce(t, group=g)
        check(t, torch.full((2,), float(sum(range(size)) + i * size)), "all_reduce in group %d" % i)
    after = thread_names()
    loops = (before.count("kolo-loop"), after.count("kolo-loop"))
    assert loops[0] >= 1 and loops[1] == loops[0], \
        "kolo-loop threads before and after eight groups: %s (%s)" % (loops, sorted(after))
    assert len(after) - len(before) < len(groups), \
        "threads grew from %d to %d for %d groups: %s" % (len(before), len(after), len(groups),
                                                          sorted(after))
    print("threads: %d before, %d after eight kolo groups (kolo-loop: %d)"
          % (len(before), len(after), loops[1]))
    for g in groups:
        dist.destroy_process_group(g)


def test_ops_of_two_groups_in_opposite_orders_complete(rank, size):
    a = dist.new_group(backend="kolo", timeout=TIMEOUT)
    b = dist.new_group(backend="kolo", timeout=TIMEOUT)
    order = (a, b) if rank % 2 == 0 else (b, a)
    tensors = {a: torch.full((3,), 1.0 + rank), b: torch.full((5,), 10.0 * (rank + 1))}
    works = [dist.all_reduce(tensors[g], group=g, async_op=True) for g in order]
    for w in works:
        w.wait()
    check(tensors[a], torch.full((3,), float(size + sum(range(size)))), "group a")
    check(tensors[b], torch.full((5,), 10.0 * sum(range(1, size + 1))), "group b")
    dist.destroy_process_group(a)
    dist.destroy_process_group(b)


def test_subgroup_translates_group_ranks(rank, size):
    """A group of the last and the first rank: broadcast roots, gather's
    destination and all_gather's order are the group's ranks, as gloo's."""
    members = [0, size - 1]
    groups = {name: dist.new_group(members, backend=name, timeout=TIMEOUT)
              for name in ("gloo", "kolo")}
    if rank in members:
        results = {}
        for name, g in groups.items():
            t = torch.full((2,), float(rank))
            dist.broadcast(t, src=size - 1, group=g)
            gathered = [torch.empty(1) for _ in members]
            dist.all_gather(gathered, torch.tensor([float(rank * 10)]), group=g)
            results[name] = (t, torch.cat(gathered))
        check(results["kolo"][0], results["gloo"][0], "broadcast from the group's last rank")
        check(results["kolo"][1], results["gloo"][1], "all_gather order")
        check(results["kolo"][1], torch.tensor([0.0, (size - 1) * 10.0]), "all_gather order")
    dist.barrier(group=KOLO)
    for g in groups.values():
        dist.destroy_process_group(g)


def test_subgroup_send_recv(rank, size):
    members = [0, size - 1]
    groups = {name: dist.new_group(members, backend=name, timeout=TIMEOUT)
              for name in ("gloo", "kolo")}
    if rank in members:
        peer = members[1] if rank == members[0] else members[0]
        for name, g in groups.items():
            out = torch.full((4,), float(rank) + 0.5)
            back = torch.empty(4)
            if rank == members[0]:
                dist.send(out, peer, group=g, tag=3)
                dist.recv(back, peer, group=g, tag=3)
            else:
                dist.recv(back, peer, group=g, tag=3)
                dist.send(out, peer, group=g, tag=3)
            check(back, torch.full((4,), float(peer) + 0.5), "%s: subgroup recv" % name)
        # From any source in the group: the sender's global rank, as gloo.
        for name, g in groups.items():
            if rank == members[0]:
                got = torch.empty(2)
                sender = dist.recv(got, group=g, tag=5)
                assert sender == members[1], "%s: recv from any source said %r" % (name, sender)
                check(got, torch.full((2,), float(members[1])), "%s: recv any source" % name)
            else:
                dist.send(torch.full((2,), float(rank)), members[0], group=g, tag=5)
    dist.barrier(group=KOLO)
    for g in groups.values():
        dist.destroy_process_group(g)


def test_recv_from_any_source_returns_the_sender_as_gloo(rank, size):
    """Rank 0 receives one message from every other rank without naming
    them: each receive returns the sender, whose rank the data carries."""
    results = {}
    for name, group in (("gloo", GLOO), ("kolo", KOLO)):
        if rank == 0:
            got = []
            for _ in range(size - 1):
                t = torch.empty(3)
                sender = dist.recv(t, group=group, tag=9)
                check(t, torch.full((3,), float(sender)), "%s: the data of sender %r" % (name, sender))
                got.append(sender)
            results[name] = sorted(got)
        else:
            dist.send(torch.full((3,), float(rank)), 0, group=group, tag=9)
        dist.barrier(group=GLOO)
    if rank == 0:
        assert results["kolo"] == results["gloo"] == list(range(1, size)), results
    # One sender only: both name it.
    for name, group in (("gloo", GLOO), ("kolo", KOLO)):
        if rank == 0:
            t = torch.empty(1)
            assert dist.recv(t, group=group) == size - 1, name
            check(t, torch.tensor([7.0]), "%s: recv from any source" % name)
        elif rank == size - 1:
            dist.send(torch.tensor([7.0]), 0, group=group)
        dist.barrier(group=GLOO)


def test_a_tag_beyond_a_groups_range_is_a_value_error(rank, size):
    with pytest.raises(ValueError, match="tags on the process's kolo engine are below 1048576"):
        dist.send(torch.zeros(1), (rank + 1) % size, group=KOLO, tag=1 << 20)


@pytest.mark.skipif(not TORCH2, reason="torch 1.13's new_group has no use_local_synchronization "
                                       "(it runs in the torch2 stage)")
def test_a_group_its_members_make_alone(rank, size):
    """use_local_synchronization=True: only the members call new_group."""
    members = [r for r in range(size) if r != 0] if size > 2 else [0, 1]
    if rank in members:
        g = dist.new_group(members, backend="kolo", timeout=TIMEOUT,
                           use_local_synchronization=True)
        t = torch.full((2,), float(rank))
        dist.all_reduce(t, group=g)
        check(t, torch.full((2,), float(sum(members))), "all_reduce in a local group")
        dist.destroy_process_group(g)
    dist.barrier(group=KOLO)
