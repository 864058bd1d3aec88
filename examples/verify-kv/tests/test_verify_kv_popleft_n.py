# Test for patch 01-kv-popleft-n-valueerror, copied into vLLM's tests/v1/core/ by `patchset verify`.
# Fails on vLLM 0.30.0 (a bare AssertionError), passes with the patch (ValueError naming the counts).
import pytest

from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock


def test_popleft_n_more_than_free_raises_value_error():
    blocks = [KVCacheBlock(block_id=i) for i in range(2)]
    queue = FreeKVCacheBlockQueue(blocks)
    with pytest.raises(ValueError, match="Cannot pop 3 blocks: only 2 free"):
        queue.popleft_n(3)
    # the refused request left the queue as it was
    assert queue.num_free_blocks == 2
    assert [b.block_id for b in queue.popleft_n(2)] == [0, 1]
    assert queue.num_free_blocks == 0
