"""Gradients of the differentiable collectives. Rank s's loss weighs its
output by a rank-dependent W_s; the total loss is the sum over ranks, so
each expected gradient is computed here from every rank's W."""
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


def test_allgather_gradient_is_my_slice_of_the_sum():
    n, r = hvd.size(), hvd.rank()
    rows = [s + 1 for s in range(n)]
    x = torch.zeros((rows[r], 2), dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, name="grad.ag")
    (y * weights(r, (sum(rows), 2))).sum().backward()
    total = sum(weights(s, (sum(rows), 2)) for s in range(n))
    torch.testing.assert_close(x.grad, total[sum(rows[:r]):sum(rows[:r + 1])])


def test_broadcast_gradient_goes_to_root():
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    x = torch.full((4,), float(r), dtype=torch.float64, requires_grad=True)
    y = hvd.broadcast(x, root, name="grad.bc")
    assert torch.equal(y.detach(), torch.full((4,), float(root), dtype=torch.float64))
    (y * weights(r, (4,))).sum().backward()
    expect = sum(weights(s, (4,)) for s in range(n)) if r == root else torch.zeros(4, dtype=torch.float64)
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


def test_reducescatter_gradient_is_an_allgather():
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1
    shares = [rows // n + (1 if s < rows % n else 0) for s in range(n)]
    for op, factor in [(hvd.Sum, 1.0), (hvd.Average, 1.0 / n)]:
        x = torch.zeros((rows, 2), dtype=torch.float64, requires_grad=True)
        y = hvd.reducescatter(x, op=op, name="grad.rs.%s" % op)
        assert y.shape == (shares[r], 2)
        (y * weights(r, (shares[r], 2))).sum().backward()
        expect = torch.cat([weights(s, (shares[s], 2)) for s in range(n)]) * factor
        torch.testing.assert_close(x.grad, expect)


def test_gradients_flow_through_a_model():
    # allreduce inside a model: d/dw of sum over ranks of allreduce(w * x_r).
    n, r = hvd.size(), hvd.rank()
    w = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([float(r + 1)], dtype=torch.float64)
    y = hvd.allreduce(w * x, op=hvd.Sum, name="grad.model")
    y.sum().backward()
    # dL/dw = x_r * (number of ranks whose loss contains y) = x_r * n
    torch.testing.assert_close(w.grad, x * n)
