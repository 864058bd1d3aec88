# Test for patch 02-kv-popleft-empty-guard, copied into vLLM's tests/v1/core/ by `patchset verify`.
# vLLM 0.30.0 already behaves this way, so it passes without the patch too: "not needed".
import pytest

from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock


def test_popleft_on_an_empty_queue_raises_value_error():
    with pytest.raises(ValueError, match="^No free blocks available$"):
        FreeKVCacheBlockQueue([]).popleft()


def test_popleft_after_draining_raises_value_error():
    queue = FreeKVCacheBlockQueue([KVCacheBlock(block_id=i) for i in range(2)])
    assert [queue.popleft().block_id for _ in range(2)] == [0, 1]
    with pytest.raises(ValueError, match="^No free blocks available$"):
        queue.popleft()
    assert queue.num_free_blocks == 0
