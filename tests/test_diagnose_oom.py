"""What a CUDA OOM message says: fragmentation (the free memory would serve the request if it were
contiguous) or capacity. The messages are the caching allocator's own wording (torch 2.x)."""

import pytest

from rewriter.diagnose.rungs.memory import from_oom
from rewriter.diagnose.oom import classify, describe

TAIL = " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."


def message(request: str, allocated: str, free: str, pools: str = "") -> str:
    return (
        f"CUDA out of memory. Tried to allocate {request}. GPU 0 has a total capacity of 139.72 GiB of which 120.00 GiB is free. "
        f"Including non-PyTorch memory, this process has 2.52 GiB memory in use. Of the allocated memory {allocated} is allocated "
        f"by PyTorch, {pools}and {free} is reserved by PyTorch but unallocated." + TAIL
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        # the fragmentation workload at a 2 GiB cap (benchmarks/alloc_sim_fragmentation.py)
        (message("448.00 MiB", "1.23 GiB", "597.33 MiB"), {"requested_mib": 448.0, "allocated_mib": 1259.5, "reserved_unallocated_mib": 597.3, "fragmentation": True}),
        # the live tensors need more than there is: nothing an allocator setting can do
        (message("19.68 GiB", "11.44 GiB", "43.59 MiB"), {"requested_mib": 20152.3, "allocated_mib": 11714.6, "reserved_unallocated_mib": 43.6, "fragmentation": False}),
        # CUDA graphs' private pools add a clause; equal sizes count as fragmentation
        (message("20.00 MiB", "1.00 GiB", "20.00 MiB", pools="with 512.00 MiB allocated in private pools (e.g., CUDA Graphs), "), {"requested_mib": 20.0, "allocated_mib": 1024.0, "reserved_unallocated_mib": 20.0, "fragmentation": True}),
        (message("5.96 GiB", "17.88 GiB", "0 bytes"), {"requested_mib": 6103.0, "allocated_mib": 18309.1, "reserved_unallocated_mib": 0.0, "fragmentation": False}),
        # an older or foreign message without the figure: the kind is unknown, not guessed
        ("CUDA out of memory. Tried to allocate 2.00 GiB", {"requested_mib": 2048.0, "allocated_mib": None, "reserved_unallocated_mib": None, "fragmentation": None}),
    ],
    ids=["fragmentation", "capacity", "private-pools", "zero-bytes", "no-figure"],
)
def test_classify_reads_the_allocators_message(text, expected):
    assert classify(text) == expected


def test_an_error_that_is_not_the_allocators_is_not_classified():
    assert classify("CUDA error: an illegal memory access was encountered") is None
    assert classify("") is None


def test_describe_names_the_kind_with_the_numbers():
    frag = classify(message("448.00 MiB", "1.23 GiB", "597.33 MiB"))
    assert describe(frag) == "asked for 448 MiB with 597 MiB reserved but unallocated (>= the request), 1260 MiB allocated: a fragmentation OOM"
    cap = classify(message("19.68 GiB", "11.44 GiB", "43.59 MiB"))
    assert describe(cap).endswith("(< the request), 11715 MiB allocated: a capacity OOM")


def test_memory_rung_verdict_from_a_fragmentation_oom_and_only_from_one():
    r = from_oom("batch_scaling", classify(message("448.00 MiB", "1.23 GiB", "597.33 MiB")))
    assert r.ok and r.implies.startswith("allocator") and r.verdict.startswith("fragmenting: out of memory in rung batch_scaling")
    assert r.measurement["source"] == "oom" and r.measurement["oom_rung"] == "batch_scaling"
    with pytest.raises(ValueError, match="not a fragmentation OOM"):
        from_oom("batch_scaling", classify(message("19.68 GiB", "11.44 GiB", "43.59 MiB")))
