"""The tracker: storages counted once, frees seen, data-dependent values answered."""
import pytest
import torch

from vramfit.trace import fakecuda
from vramfit.trace.tracker import Tracker


@pytest.fixture()
def tracker():
    t = Tracker()
    fakecuda.install(fakecuda.DeviceFacts("test", (9, 0), 80 << 30), t.memory, t.empty_cache)
    return t


def live_bytes(events):
    live = {}
    for e in events:
        if e[0] == "a":
            live[e[1]] = e[2]
        elif e[0] == "f":
            live.pop(e[1])
    return sum(live.values())


def test_views_share_one_allocation(tracker):
    with fakecuda.fake_mode(), tracker:
        x = torch.empty(1024, 1024, device="cuda", dtype=torch.bfloat16)
        views = [x.view(-1), x.t(), x[:10]]
        allocs = [e for e in tracker.events if e[0] == "a"]
        assert [e[2] for e in allocs] == [2 * 1024 * 1024]
        del views


def test_free_is_recorded_when_the_storage_dies(tracker):
    with fakecuda.fake_mode(), tracker:
        x = torch.empty(4096, device="cuda")
        y = x * 2
        assert live_bytes(tracker.events) == 2 * 4096 * 4
        del y
        assert live_bytes(tracker.events) == 4096 * 4
        del x
    assert live_bytes(tracker.events) == 0


def test_a_storage_resized_in_place_frees_and_allocates(tracker):
    # FSDP2 frees a gathered parameter's memory with resize_(0) and gives it back with
    # resize_(bytes), beneath the dispatcher
    original = torch.UntypedStorage.resize_
    with fakecuda.fake_mode(), tracker:
        x = torch.empty(4096, device="cuda")
        x.untyped_storage().resize_(0)
        assert live_bytes(tracker.events) == 0
        x.untyped_storage().resize_(4096 * 4)
        assert live_bytes(tracker.events) == 4096 * 4
        del x
    assert live_bytes(tracker.events) == 0
    assert torch.UntypedStorage.resize_ is original


def test_cpu_tensors_are_not_counted(tracker):
    with fakecuda.fake_mode(), tracker:
        x = torch.empty(4096)
        x = x + 1
        assert [e for e in tracker.events if e[0] == "a"] == []


def test_backward_runs_on_the_fake_device(tracker):
    with fakecuda.fake_mode(), tracker:
        w = torch.nn.Parameter(torch.empty(256, 128, device="cuda"))
        x = torch.empty(32, 128, device="cuda")
        (x @ w.t()).sum().backward()
        assert w.grad.shape == (256, 128) and w.grad.device.type == "cuda"


def test_data_dependent_values_have_answers(tracker):
    with fakecuda.fake_mode(), tracker:
        loss = torch.empty((), device="cuda")
        assert torch.isnan(loss).item() is False  # a finite run
        assert bool(torch.isfinite(loss)) is True
        found_inf = torch.full((), 0.0, device="cuda")
        assert found_inf.item() == 0.0
        mask = torch.ones(2, 16, device="cuda", dtype=torch.bool)
        assert bool(mask.all()) is True  # fixed lengths: masks are full


def test_phases_and_labels_are_events(tracker):
    with fakecuda.fake_mode(), tracker:
        tracker.phase("forward")
        w = torch.empty(10, device="cuda")
        tracker.label([w], "weights")
    assert ("p", "forward") in tracker.events
    assert ("c", 1, "weights") in tracker.events


@pytest.fixture()
def streams():
    t = Tracker()
    fakecuda.install(fakecuda.DeviceFacts("test", (9, 0), 80 << 30), t.memory, t.empty_cache, t)
    return t


def test_streams_file_their_blocks_and_record_uses(streams):
    # FSDP1 all-gathers on its unshard stream and records the gathered tensor's use on the
    # computation stream before freeing it (torch/distributed/fsdp/_flat_param.py)
    with fakecuda.fake_mode(), streams:
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x = torch.empty(1024, device="cuda")
            assert torch.cuda.current_stream() == side
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        x.record_stream(torch.cuda.current_stream())
        event = torch.cuda.Event()
        event.record()
        event.synchronize()
        side.synchronize()
        torch.cuda.synchronize()
    sid = next(e[1] for e in streams.events if e[0] == "a")
    kinds = [e for e in streams.events if e[0] in "armws"]
    assert kinds == [("a", sid, 4096, side.stream_id), ("r", sid, 0), ("m", 1, 0), ("w", 1),
                     ("s", side.stream_id), ("s",)]


def test_a_wait_implies_the_work_its_stream_waited_for(streams):
    # the computation stream waits for the post-backward stream at the end of FSDP1's
    # backward; the host's later wait on the computation stream covers both
    with fakecuda.fake_mode(), streams:
        post = torch.cuda.Stream()
        torch.cuda.current_stream().wait_stream(post)
        event = torch.cuda.Event()
        event.record()
        event.synchronize()
    marks = [e for e in streams.events if e[0] in "mw"]
    assert marks == [("m", 1, post.stream_id), ("m", 2, 0), ("w", 2), ("w", 1)]


def test_reading_a_value_waits_for_the_stream(streams):
    with fakecuda.fake_mode(), streams:
        loss = torch.zeros((), device="cuda")
        loss.item()
    assert ("s", 0) in streams.events
