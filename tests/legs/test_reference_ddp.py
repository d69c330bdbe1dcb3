"""The reference leg across devices (docs/cluster.md): a leg defined with `devices: ["cpu", "cpu"]` runs two
torch.distributed ranks (gloo), one micro-batch each per update, gradients all-reduced. Oracle: the
single-process reference leg of the same run, accumulating the same two micro-batches (micro_batch 1,
accumulation 2), with the same shared dropout masks. Loss and pre-clip gradient norm must agree to
1e-6 relative over 10 updates (and so must the held-out CE at every evaluation)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runner"))
from runner_fixture import TANDEM, h5_series, small_experiment  # noqa: E402

TOLERANCE = 1e-6


def max_relative(a, b):
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


def test_two_gloo_ranks_equal_single_process_accumulation(tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(
        tmp, "ddp", batch={"micro_batch": 1, "accumulation": 2, "epochs": 1, "max_updates": 10},
        eval={"interval": 5, "prefix_size": 8}, checkpoint={"interval": 5},
        legs={"single": {"implementation": "reference"},
              "ranks": {"implementation": "reference", "devices": ["cpu", "cpu"]}})
    p = subprocess.run([TANDEM, "run", spec, "--threads", "2", "--no-probe", "--quiet", "--out", os.path.join(tmp, "runs"),
                        "--catalog", os.path.join(tmp, "tandem.db")], capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    folder = os.path.join(tmp, "runs", os.listdir(os.path.join(tmp, "runs"))[0])

    with open(os.path.join(folder, "legs", "ranks", "events.jsonl")) as f:
        hello = json.loads(f.readline())
    assert hello["ranks"] == 2 and hello["devices"] == ["cpu", "cpu"]  # it did run as two ranks
    with open(os.path.join(folder, "legs.json")) as f:
        assert [e.get("devices") for e in json.load(f)] == [["cpu", "cpu"], None]

    s = h5_series(folder)
    single, ranks = s["single"], s["ranks"]
    assert single["update"] == ranks["update"] == list(range(10))
    assert single["tokens"] == ranks["tokens"] and single["lr"] == ranks["lr"]
    loss = max_relative(single["loss"], ranks["loss"])
    grad = max_relative(single["grad_norm"], ranks["grad_norm"])
    assert single["eval_update"] == ranks["eval_update"] == [0, 5, 10]
    ce = max_relative(single["heldout_ce"], ranks["heldout_ce"])
    print(f"\n2 gloo ranks vs 1 process, 10 updates: max relative difference loss {loss:.3g}, "
          f"grad norm {grad:.3g}, held-out CE {ce:.3g}")
    assert loss <= TOLERANCE and grad <= TOLERANCE and ce <= TOLERANCE
    # Training did move (an update that changed nothing would make the comparison empty).
    assert single["loss"][0] != single["loss"][-1] and single["heldout_ce"][0] != single["heldout_ce"][-1]
    # Rank 0 alone wrote the checkpoint and the final adapter.
    assert os.path.isdir(os.path.join(folder, "legs", "ranks", "ckpt-000005"))
    assert os.path.isdir(os.path.join(folder, "legs", "ranks", "final"))
