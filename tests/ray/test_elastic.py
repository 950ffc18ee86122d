"""kolo.ray.ElasticRayExecutor on a local Ray cluster: a worker actor killed
mid-training, the survivors go on in a smaller world from their last commit
(no restart), and the replacement Ray starts on the freed CPU joins at a
later commit."""
import os
import signal
import time

import pytest
import torch

RAY_NUM_CPUS = 3


def elastic_fn():
    import kolo.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    state = hvd.elastic.ObjectState(step=0, total=0.0)
    first_step = {}   # world -> wall time of its first completed step here
    pid = os.getpid()

    @hvd.elastic.run
    def train(state):
        while True:
            s = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="step").item()
            first_step.setdefault(hvd.elastic.world_version(), time.time())
            state.total += s
            state.step += 1
            if hvd.elastic.worker_id() == 1 and hvd.elastic.world_version() == 1 and state.step == 12:
                with open(os.environ["KOLO_TEST_KILLED_AT"], "w") as f:
                    f.write("%.6f" % time.time())
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
            if state.step % 4 == 0:
                state.commit()
                # done once the job grew back (3 ranks again) and trained there
                if hvd.elastic.world_version() >= 3 and hvd.size() == 3 and state.step >= 40:
                    return state.step
                if state.step >= 4000:
                    return state.step

    steps = train(state)
    return {"worker": hvd.elastic.worker_id(), "world": hvd.elastic.world_version(),
            "size": hvd.size(), "rank": hvd.rank(), "steps": steps, "total": state.total,
            "first_step": first_step}


@pytest.mark.timeout_s(240)
def test_killed_worker_survivors_go_on_and_the_job_grows_back(ray_cluster, tmp_path):
    from kolo.ray import ElasticRayExecutor
    killed_at = tmp_path / "killed_at"
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=3, timeout_s=20,
                                                  verbose=True)
    ex = ElasticRayExecutor(settings, cpus_per_slot=1,
                            env_vars={"KOLO_TEST_KILLED_AT": str(killed_at)})
    ex.start()
    try:
        results = ex.run(elastic_fn)
    finally:
        ex.shutdown()
    events = [text for _, text in ex.events]
    assert any("worker 1 " in t and "died" in t for t in events), events
    assert any(t.startswith("world 2: 2 ranks") for t in events), events
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert {r["worker"] for r in results} == {0, 2, 3}, results
    assert all(r["world"] == 3 and r["size"] == 3 for r in results), results
    # one state: every rank ends at the same step with the same sum
    assert len({(r["steps"], r["total"]) for r in results}) == 1, results
    # survivors went on: worker 0 and 2 trained in world 2 (no restart)
    survivors = [r for r in results if r["worker"] in (0, 2)]
    assert all(2 in r["first_step"] and 1 in r["first_step"] for r in survivors), results
    recovery = min(r["first_step"][2] for r in survivors) - float(killed_at.read_text())
    print("[elastic] kill to first step of world 2: %.0f ms" % (recovery * 1000))
    assert recovery < 20, recovery
