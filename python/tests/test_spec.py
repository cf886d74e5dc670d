"""The setup the tracer reads: each micro batch's longest sample, and the layouts it refuses."""
import pytest

from vramfit.trace.spec import Spec, Unsupported


def spec(**kwargs: object) -> Spec:
    return Spec(model="m", config="c.json", seq=512, accumulation=2, **kwargs)  # type: ignore[arg-type]


def test_fixed_lengths_are_the_whole_sequence():
    assert [spec().longest(m) for m in range(4)] == [512] * 4


def test_plain_varied_lengths_shorten_the_first_step():
    assert [spec(lengths="varied").longest(m) for m in range(4)] == [384, 384, 512, 512]


def test_drawn_lengths_are_followed_in_order():
    s = spec(lengths="varied", steps=8, batch_lengths=[300, 200, 512])
    assert [s.longest(m) for m in range(4)] == [300, 200, 512, 300]


def test_only_torchtune_traces_offloading():
    Spec.from_json('{"model": "m", "config": "c.json", "framework": "torchtune", "offload": ["activations"]}')
    with pytest.raises(Unsupported, match="only torchtune"):
        Spec.from_json('{"model": "m", "config": "c.json", "framework": "hf", "offload": ["activations"]}')
