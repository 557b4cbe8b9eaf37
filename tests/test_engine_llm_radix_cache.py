"""engine.llm.radix_cache: page-granular prefix sharing, node splits, locking and LRU eviction."""

from __future__ import annotations

from accord.engine.llm.radix_cache import RadixCache


def make(page_size: int = 2):
    released: list[int] = []
    return RadixCache(page_size, released.extend), released


def test_match_returns_whole_pages_of_the_longest_cached_prefix():
    cache, _ = make(page_size=2)
    assert cache.insert([1, 2, 3, 4, 5, 6], [10, 11, 12]) == 0
    pages, _ = cache.match_prefix([1, 2, 3, 4, 5])  # the odd token cannot share a page
    assert pages == [10, 11]
    assert cache.match_prefix([1, 2, 9, 9])[0] == [10]
    assert cache.match_prefix([7, 7])[0] == []


def test_insert_reports_the_already_cached_span_and_splits_nodes():
    cache, _ = make(page_size=2)
    cache.insert([1, 2, 3, 4], [10, 11])
    assert cache.insert([1, 2, 5, 6], [20, 21]) == 2  # page [1, 2] was there; 20 is a duplicate
    assert cache.match_prefix([1, 2, 5, 6])[0] == [10, 21]
    assert cache.match_prefix([1, 2, 3, 4])[0] == [10, 11]
    assert cache.cached_pages == 3


def test_eviction_frees_least_recently_used_unlocked_leaves_only():
    cache, released = make(page_size=1)
    cache.insert([1, 2], [10, 11])
    cache.insert([5, 6], [50, 51])
    _, node = cache.match_prefix([1, 2])  # [1, 2] is now the most recently used
    cache.lock(node)
    assert cache.evict(1) == 2 and released == [50, 51]
    assert cache.evict(5) == 0, "locked pages are never evicted"
    cache.unlock(node)
    assert cache.evict(5) == 2 and sorted(released) == [10, 11, 50, 51]
    assert cache.cached_pages == 0 and cache.match_prefix([1, 2])[0] == []
