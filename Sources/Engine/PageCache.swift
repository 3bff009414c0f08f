// A bounded cache of verified B+tree pages (raw bytes, searched in place) for a data file
// the file system does not map (the simulated one; PageFile.swift says why a mapping is
// preferred where there is one). Eviction is two-generation (a "hot" and a "cold" map,
// the cold one dropped whole when the hot one fills), which approximates LRU at O(1) per
// access with no per-entry links.
// Thread-safety: every method takes the mutex; cached pages are immutable.
import StrataLocks
import Synchronization

final class PageCache: Sendable {
    private struct Generations {
        var hot: [PageID: CachedPage] = [:]
        var cold: [PageID: CachedPage] = [:]
    }

    /// The most pages held at once.
    let capacity: Int
    private let maps = Locked(Generations())

    init(capacity: Int) {
        self.capacity = max(capacity, 16)
    }

    func page(_ id: PageID) -> CachedPage? {
        maps.withLock { maps in
            if let page = maps.hot[id] { return page }
            guard let page = maps.cold.removeValue(forKey: id) else { return nil }
            insert(id, page, into: &maps)
            return page
        }
    }

    func insert(_ id: PageID, _ page: CachedPage) {
        maps.withLock { insert(id, page, into: &$0) }
    }

    /// Forgets a page that is about to be rewritten.
    func remove(_ id: PageID) {
        maps.withLock { maps in
            maps.hot[id] = nil
            maps.cold[id] = nil
        }
    }

    /// Forgets every page.
    func removeAll() {
        maps.withLock { $0 = Generations() }
    }

    var count: Int { maps.withLock { $0.hot.count + $0.cold.count } }

    private func insert(_ id: PageID, _ page: CachedPage, into maps: inout Generations) {
        if maps.hot.count >= capacity / 2 {
            maps.cold = maps.hot
            maps.hot = [:]
            maps.hot.reserveCapacity(capacity / 2)
        }
        maps.hot[id] = page
    }
}
