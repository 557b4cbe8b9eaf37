"""A radix tree over token ids whose values are KV pages: finished requests leave their prefix here,
and a new request that starts the same way reuses those pages instead of recomputing them.

Sharing is page-granular: edges hold whole pages of tokens (a multiple of page_size) and a match is
rounded down to whole pages, so a shared page is never written to by a second owner. Nodes in use
by running requests are locked; eviction frees least-recently-used unlocked leaves. "Recently" is a
logical clock, not wall time, so the same request sequence always evicts the same pages.
"""

from __future__ import annotations

from typing import Callable, Sequence


class Node:
    __slots__ = ("key", "pages", "children", "parent", "lock_ref", "last_use")

    def __init__(self, key: tuple[int, ...], pages: list[int], parent: "Node | None"):
        self.key = key
        self.pages = pages
        self.children: dict[tuple[int, ...], Node] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_use = 0


class RadixCache:
    def __init__(self, page_size: int, release_pages: Callable[[list[int]], None]):
        self.page_size = page_size
        self._release = release_pages
        self.root = Node((), [], None)
        self.root.lock_ref = 1  # never evicted
        self._clock = 0
        self.cached_pages = 0

    def _first_page(self, tokens: Sequence[int], at: int = 0) -> tuple[int, ...]:
        return tuple(tokens[at:at + self.page_size])

    def _matched_pages(self, key: tuple[int, ...], tokens: Sequence[int], at: int) -> int:
        """How many whole pages of `key` equal `tokens[at:]`."""
        p = self.page_size
        n = 0
        while (n + 1) * p <= len(key) and at + (n + 1) * p <= len(tokens) and \
                key[n * p:(n + 1) * p] == tuple(tokens[at + n * p:at + (n + 1) * p]):
            n += 1
        return n

    def match_prefix(self, tokens: Sequence[int]) -> tuple[list[int], Node]:
        """The cached pages of the longest whole-page prefix of `tokens`, and the node it ends in."""
        self._clock += 1
        node, at, pages = self.root, 0, []
        while at + self.page_size <= len(tokens):
            child = node.children.get(self._first_page(tokens, at))
            if child is None:
                break
            n = self._matched_pages(child.key, tokens, at)
            if n * self.page_size < len(child.key):
                child = self._split(child, n)
            child.last_use = self._clock
            pages.extend(child.pages)
            at += len(child.key)
            node = child
        return pages, node

    def insert(self, tokens: Sequence[int], pages: list[int]) -> int:
        """Cache `pages` as the KV of `tokens` (whole pages only). Returns how many leading tokens
        were already cached: the caller still owns its pages for that span and must free those it
        computed itself."""
        assert len(tokens) == len(pages) * self.page_size
        self._clock += 1
        node, at = self.root, 0
        while at < len(tokens):
            key = self._first_page(tokens, at)
            child = node.children.get(key)
            if child is None:
                new = Node(tuple(tokens[at:]), pages[at // self.page_size:], node)
                new.last_use = self._clock
                node.children[key] = new
                self.cached_pages += len(new.pages)
                return at
            n = self._matched_pages(child.key, tokens, at)
            if n * self.page_size < len(child.key):
                child = self._split(child, n)
            child.last_use = self._clock
            at += len(child.key)
            node = child
        return at

    def _split(self, node: Node, pages: int) -> Node:
        """Cut `node` after its first `pages` pages; returns the new upper part."""
        cut = pages * self.page_size
        upper = Node(node.key[:cut], node.pages[:pages], node.parent)
        upper.lock_ref, upper.last_use = node.lock_ref, node.last_use
        node.parent.children[self._first_page(node.key)] = upper
        node.key, node.pages, node.parent = node.key[cut:], node.pages[pages:], upper
        upper.children[self._first_page(node.key)] = node
        return upper

    def lock(self, node: Node) -> None:
        """Protect the path root..node from eviction while a request reads it."""
        while node is not None:
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node is not None:
            node.lock_ref -= 1
            node = node.parent

    def evict(self, pages_needed: int) -> int:
        """Free unlocked leaves, least recently used first, until `pages_needed` pages are freed."""
        freed = 0
        while freed < pages_needed:
            leaves = [n for n in self._nodes() if not n.children and n.lock_ref == 0]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: n.last_use)
            del victim.parent.children[self._first_page(victim.key)]
            self._release(victim.pages)
            self.cached_pages -= len(victim.pages)
            freed += len(victim.pages)
        return freed

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
