"""Gradients of the differentiable collectives, with horovod.torch's
conventions. Rank s's loss weighs its output by a rank-dependent W_s; each
expected gradient is computed here from every rank's W the way Horovod
defines it: allreduce reduces the output gradients like the forward;
allgather and broadcast average them over the set (broadcast: on the root,
zeros elsewhere); reducescatter allgathers them, times the set size for Sum
and times the scale factors; alltoall sends them back."""
import torch

import kolo.torch as hvd


def weights(s, shape):
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64).reshape(shape) + 1) * (s + 1)


def test_allreduce_sum_average_and_scales():
    n, r = hvd.size(), hvd.rank()
    for op, pre, post, factor in [(hvd.Sum, 1.0, 1.0, 1.0), (hvd.Average, 1.0, 1.0, 1.0 / n),
                                  (hvd.Sum, 0.5, 3.0, 1.5)]:
        x = torch.full((2, 3), float(r), dtype=torch.float64, requires_grad=True)
        y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post,
                          name="grad.ar.%s.%g" % (op, pre))
        (y * weights(r, (2, 3))).sum().backward()
        expect = sum(weights(s, (2, 3)) for s in range(n)) * factor
        torch.testing.assert_close(x.grad, expect)


def test_allreduce_max_routes_gradient_to_the_maximum():
    n, r = hvd.size(), hvd.rank()
    x = torch.tensor([float(r), 5.0], dtype=torch.float64, requires_grad=True)  # [argmax n-1, tie]
    y = hvd.allreduce(x, op=hvd.Max, name="grad.max")
    (y * weights(r, (2,))).sum().backward()
    total = sum(weights(s, (2,)) for s in range(n))
    assert x.grad[0].item() == (total[0].item() if r == n - 1 else 0.0)
    assert abs(x.grad[1].item() - total[1].item() / n) < 1e-12  # shared by the tie


def test_grouped_allreduce_gradients():
    n, r = hvd.size(), hvd.rank()
    a = torch.full((3,), float(r), dtype=torch.float64, requires_grad=True)
    b = torch.full((2, 2), float(r), dtype=torch.float64, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum, name="grad.grouped")
    ((ya * weights(r, (3,))).sum() + (yb * weights(r, (2, 2))).sum()).backward()
    torch.testing.assert_close(a.grad, sum(weights(s, (3,)) for s in range(n)))
    torch.testing.assert_close(b.grad, sum(weights(s, (2, 2)) for s in range(n)))


def test_allgather_gradient_is_my_slice_of_the_average():
    n, r = hvd.size(), hvd.rank()
    rows = [s + 1 for s in range(n)]
    x = torch.zeros((rows[r], 2), dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, name="grad.ag")
    (y * weights(r, (sum(rows), 2))).sum().backward()
    mean = sum(weights(s, (sum(rows), 2)) for s in range(n)) / n
    torch.testing.assert_close(x.grad, mean[sum(rows[:r]):sum(rows[:r + 1])])


def test_broadcast_gradient_goes_to_root_averaged():
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    x = torch.full((4,), float(r), dtype=torch.float64, requires_grad=True)
    y = hvd.broadcast(x, root, name="grad.bc")
    assert torch.equal(y.detach(), torch.full((4,), float(root), dtype=torch.float64))
    (y * weights(r, (4,))).sum().backward()
    expect = (sum(weights(s, (4,)) for s in range(n)) / n if r == root
              else torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(x.grad, expect)


def test_alltoall_gradient_returns_to_the_sender():
    n, r = hvd.size(), hvd.rank()
    x = torch.zeros((n, 2), dtype=torch.float64, requires_grad=True)  # row j goes to rank j
    y, received = hvd.alltoall(x, splits=[1] * n, name="grad.a2a")
    assert received.tolist() == [1] * n
    (y * weights(r, (n, 2))).sum().backward()
    # Row j of x became row r of y on rank j.
    expect = torch.stack([weights(j, (n, 2))[r] for j in range(n)])
    torch.testing.assert_close(x.grad, expect)


def test_reducescatter_gradient_is_an_allgather_times_size_for_sum_and_the_scales():
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1
    shares = [rows // n + (1 if s < rows % n else 0) for s in range(n)]
    gathered = torch.cat([weights(s, (shares[s], 2)) for s in range(n)])
    for op, pre, post, factor in [(hvd.Sum, 1.0, 1.0, n), (hvd.Average, 1.0, 1.0, 1.0),
                                  (hvd.Sum, 0.5, 3.0, 1.5 * n), (hvd.Average, 2.0, 1.0, 2.0)]:
        x = torch.zeros((rows, 2), dtype=torch.float64, requires_grad=True)
        y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post,
                              name="grad.rs.%s.%g" % (op, pre))
        assert y.shape == (shares[r], 2)
        (y * weights(r, (shares[r], 2))).sum().backward()
        torch.testing.assert_close(x.grad, gathered * factor)


def test_grouped_allgather_and_reducescatter_gradients_are_element_wise():
    n, r = hvd.size(), hvd.rank()
    a = torch.zeros((r + 1, 2), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((1,), dtype=torch.float64, requires_grad=True)
    ya, yb = hvd.grouped_allgather([a, b], name="grad.gag")
    total_a = sum(s + 1 for s in range(n))
    ((ya * weights(r, (total_a, 2))).sum() + (yb * weights(r, (n,))).sum()).backward()
    mean_a = sum(weights(s, (total_a, 2)) for s in range(n)) / n
    mean_b = sum(weights(s, (n,)) for s in range(n)) / n
    offset = sum(s + 1 for s in range(r))
    torch.testing.assert_close(a.grad, mean_a[offset:offset + r + 1])
    torch.testing.assert_close(b.grad, mean_b[r:r + 1])

    c = torch.zeros((n, 3), dtype=torch.float64, requires_grad=True)
    d = torch.zeros((2 * n,), dtype=torch.float64, requires_grad=True)
    yc, yd = hvd.grouped_reducescatter([c, d], op=hvd.Sum, name="grad.grs")
    ((yc * weights(r, (1, 3))).sum() + (yd * weights(r, (2,))).sum()).backward()
    torch.testing.assert_close(c.grad, torch.cat([weights(s, (1, 3)) for s in range(n)]) * n)
    torch.testing.assert_close(d.grad, torch.cat([weights(s, (2,)) for s in range(n)]) * n)


def test_gradients_within_a_process_set():
    # Odd ranks form one set, even ranks the other: averages over the set.
    n, r = hvd.size(), hvd.rank()
    even = hvd.add_process_set([s for s in range(n) if s % 2 == 0])
    odd = hvd.add_process_set([s for s in range(n) if s % 2 == 1]) if n > 1 else None
    mine = even if r % 2 == 0 else odd
    members = mine.ranks
    try:
        x = torch.zeros((r + 1, 2), dtype=torch.float64, requires_grad=True)
        total = sum(s + 1 for s in members)
        y = hvd.allgather(x, name="grad.ps.ag", process_set=mine)
        (y * weights(r, (total, 2))).sum().backward()
        mean = sum(weights(s, (total, 2)) for s in members) / len(members)
        offset = sum(s + 1 for s in members if s < r)
        torch.testing.assert_close(x.grad, mean[offset:offset + r + 1])

        root = members[-1]
        z = torch.ones(3, dtype=torch.float64, requires_grad=True)
        w = hvd.broadcast(z, root, name="grad.ps.bc", process_set=mine)
        (w * weights(r, (3,))).sum().backward()
        expect = (sum(weights(s, (3,)) for s in members) / len(members) if r == root
                  else torch.zeros(3, dtype=torch.float64))
        torch.testing.assert_close(z.grad, expect)

        k = len(members)
        v = torch.zeros((k,), dtype=torch.float64, requires_grad=True)
        u = hvd.reducescatter(v, op=hvd.Sum, name="grad.ps.rs", process_set=mine)
        (u * weights(r, (1,))).sum().backward()
        torch.testing.assert_close(v.grad, torch.cat([weights(s, (1,)) for s in members]) * k)
    finally:
        if odd is not None:
            hvd.remove_process_set(odd)
        hvd.remove_process_set(even)


def test_allgather_gradient_with_a_joined_rank():
    # The last rank joins; the others allgather with gradients. Rows are
    # counted per rank in the forward, so the backward needs no extra
    # collective that the joined rank would not take part in.
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        return
    if r == n - 1:
        hvd.join()
        return
    x = torch.zeros((r + 1, 1), dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, name="grad.join.ag")
    total = sum(s + 1 for s in range(n - 1))
    assert y.shape == (total, 1)
    (y * weights(r, (total, 1))).sum().backward()
    # Averaged over the set (the joined rank adds zeros).
    mean = sum(weights(s, (total, 1)) for s in range(n - 1)) / n
    offset = sum(s + 1 for s in range(r))
    torch.testing.assert_close(x.grad, mean[offset:offset + r + 1])
    hvd.join()


def test_gradients_flow_through_a_model():
    # allreduce inside a model: d/dw of sum over ranks of allreduce(w * x_r).
    n, r = hvd.size(), hvd.rank()
    w = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([float(r + 1)], dtype=torch.float64)
    y = hvd.allreduce(w * x, op=hvd.Sum, name="grad.model")
    y.sum().backward()
    # dL/dw = x_r * (number of ranks whose loss contains y) = x_r * n
    torch.testing.assert_close(w.grad, x * n)
