"""start_timeline / stop_timeline write a Chrome trace."""
import json
import os

import torch

import kolo.torch as hvd


def test_timeline_records_named_ops(tmp_path):
    # Every rank gets the same path: rank r > 0 writes <stem>.rank<r>.json.
    base = hvd.broadcast_object(str(tmp_path / "timeline.json"), root_rank=0)
    hvd.start_timeline(base)
    hvd.allreduce(torch.ones(16), name="timeline.op")
    hvd.stop_timeline()
    path = base if hvd.rank() == 0 else base[:-len(".json")] + ".rank%d.json" % hvd.rank()
    assert os.path.exists(path), os.listdir(os.path.dirname(path))
    with open(path) as f:
        text = f.read()
    assert "timeline.op" in text
    json.loads(text)
    hvd.barrier()
