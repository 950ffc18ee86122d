"""horovod.torch's signatures, positional and keyword: a script written for
Horovod (0.28) calls kolo.torch the same way. The table is Horovod's
documented API; kolo may add keyword arguments after Horovod's (join's
process_set)."""
import inspect

import torch

import kolo.torch as hvd

GPS = "process_set"
HOROVOD = {
    "allreduce": ["tensor", "average", "name", "compression", "op", "prescale_factor",
                  "postscale_factor", GPS],
    "allreduce_async": ["tensor", "average", "name", "op", "prescale_factor",
                        "postscale_factor", GPS],
    "allreduce_": ["tensor", "average", "name", "op", "prescale_factor", "postscale_factor",
                   GPS],
    "allreduce_async_": ["tensor", "average", "name", "op", "prescale_factor",
                         "postscale_factor", GPS],
    "grouped_allreduce": ["tensors", "average", "name", "compression", "op",
                          "prescale_factor", "postscale_factor", GPS],
    "grouped_allreduce_async": ["tensors", "average", "name", "op", "prescale_factor",
                                "postscale_factor", GPS],
    "grouped_allreduce_": ["tensors", "average", "name", "op", "prescale_factor",
                           "postscale_factor", GPS],
    "grouped_allreduce_async_": ["tensors", "average", "name", "op", "prescale_factor",
                                 "postscale_factor", GPS],
    "allgather": ["tensor", "name", GPS],
    "allgather_async": ["tensor", "name", GPS],
    "grouped_allgather": ["tensors", "name", GPS],
    "grouped_allgather_async": ["tensors", "name", GPS],
    "broadcast": ["tensor", "root_rank", "name", GPS],
    "broadcast_async": ["tensor", "root_rank", "name", GPS],
    "broadcast_": ["tensor", "root_rank", "name", GPS],
    "broadcast_async_": ["tensor", "root_rank", "name", GPS],
    "alltoall": ["tensor", "splits", "name", GPS],
    "alltoall_async": ["tensor", "splits", "name", GPS],
    "reducescatter": ["tensor", "name", "compression", "op", "prescale_factor",
                      "postscale_factor", GPS],
    "reducescatter_async": ["tensor", "name", "op", "prescale_factor", "postscale_factor",
                            GPS],
    "grouped_reducescatter": ["tensors", "name", "compression", "op", "prescale_factor",
                              "postscale_factor", GPS],
    "grouped_reducescatter_async": ["tensors", "name", "op", "prescale_factor",
                                    "postscale_factor", GPS],
    "barrier": [GPS],
    "join": ["device"],
    "poll": ["handle"],
    "synchronize": ["handle"],
    "broadcast_object": ["obj", "root_rank", "name", GPS],
    "init": ["comm", "process_sets"],
}


def test_parameters_match_horovod():
    for fn, params in HOROVOD.items():
        got = list(inspect.signature(getattr(hvd, fn)).parameters)
        assert got[:len(params)] == params, "%s%s, Horovod: %s" % (fn, got, params)
        if fn != "join":
            assert len(got) == len(params), "%s has extra parameters %s" % (fn, got)
        defaults = inspect.signature(getattr(hvd, fn)).parameters
        if GPS in defaults:
            assert defaults[GPS].default is hvd.global_process_set, fn


def test_positional_calls_like_horovod_scripts():
    n, r = hvd.size(), hvd.rank()
    t = torch.full((2,), float(r + 1))
    h = hvd.broadcast_async(t, 0, "sig.bc", hvd.global_process_set)
    assert torch.equal(hvd.synchronize(h), torch.ones(2))
    h = hvd.broadcast_async_(t.clone(), 0, "sig.bc_")
    assert torch.equal(hvd.synchronize(h), torch.ones(2))
    assert hvd.synchronize(hvd.allreduce_async(t, False, "sig.ar"))[0].item() == \
        sum(range(1, n + 1))
    assert hvd.synchronize(hvd.allreduce_async_(t.clone(), None, "sig.ar_", hvd.Sum,
                                                2.0, 0.5))[0].item() == sum(range(1, n + 1))
    assert hvd.synchronize(hvd.allgather_async(t, "sig.ag")).shape == (2 * n,)
    out, splits = hvd.synchronize(hvd.alltoall_async(torch.ones(n), None, "sig.a2a"))
    assert out.shape == (n,) and splits.tolist() == [1] * n
    assert hvd.synchronize(hvd.reducescatter_async(torch.ones(n), "sig.rs", hvd.Sum))\
        .tolist() == [float(n)]
    assert hvd.reducescatter(torch.ones(n), "sig.rs2", hvd.Compression.none, hvd.Sum)\
        .tolist() == [float(n)]
    outs = hvd.synchronize(hvd.grouped_allreduce_async([t, t], None, "sig.gar", hvd.Sum))
    assert outs[1][0].item() == sum(range(1, n + 1))
    res = hvd.grouped_allreduce_([t.clone()], None, "sig.gar_", hvd.Sum)
    assert res[0][0].item() == sum(range(1, n + 1))
    assert hvd.broadcast_object("x" if r == 0 else None, 0, "sig.obj") == "x"
    hvd.barrier(hvd.global_process_set)
    assert hvd.join(-1) in range(n)


def test_nccl_built_is_an_int():
    v = hvd.nccl_built()
    assert isinstance(v, int) and not isinstance(v, bool)
    # A torch without CUDA (Debian's) makes no CUDA tensor: no NCCL and no
    # CUDA to report, even where kolo's core compiled them.
    torch_cuda = torch.version.cuda is not None
    assert (v > 0) == (bool(hvd._kolo.build_info()["nccl"]) and torch_cuda)
    assert hvd.cuda_built() == (bool(hvd._kolo.build_info()["cuda"]) and torch_cuda)
    if v:
        assert v >= 20000  # NCCL_VERSION_CODE, e.g. 22809 for 2.28.9
