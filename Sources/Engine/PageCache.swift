// A bounded cache of verified B+tree pages (raw bytes, searched in place): every page of a
// data file that is not mapped (the simulated file system maps nothing, and
// `EngineOptions.mapsDataFile` may turn the mapping off; PageFile.swift says why a
// mapping is preferred where there is one), and the expansions of compressed leaves
// (CompressedLeaf.swift) wherever the file lies. Eviction is two-generation (a "hot" and a "cold" map,
// the cold one dropped whole when the hot one fills), which approximates LRU at O(1) per
// access with no per-entry links.
// Thread-safety: every method takes the mutex; cached pages are immutable.
import StrataLocks
import Synchronization

final class PageCache: Sendable {
    private struct Generations {
        var hot: [PageID: CachedPage] = [:]
        var cold: [PageID: CachedPage] = [:]
        /// Bytes of the pages in `hot`.
        var hotBytes = 0
    }

    /// The most bytes of pages held at once (each generation holds up to half).
    let capacityBytes: Int
    private let maps = Locked(Generations())

    /// A cache of at least 16 pages of `pageBytes`.
    init(capacityBytes: Int, pageBytes: Int) {
        self.capacityBytes = max(capacityBytes, 16 * pageBytes)
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
            if let page = maps.hot.removeValue(forKey: id) { maps.hotBytes -= page.page.bytes.count }
            maps.cold[id] = nil
        }
    }

    /// Forgets every page.
    func removeAll() {
        maps.withLock { $0 = Generations() }
    }

    var count: Int { maps.withLock { $0.hot.count + $0.cold.count } }

    private func insert(_ id: PageID, _ page: CachedPage, into maps: inout Generations) {
        let bytes = page.page.bytes.count
        if maps.hotBytes + bytes > capacityBytes / 2 && !maps.hot.isEmpty {
            let expected = maps.hot.count
            maps.cold = maps.hot
            maps.hot = [:]
            maps.hot.reserveCapacity(expected)
            maps.hotBytes = 0
        }
        if let replaced = maps.hot.updateValue(page, forKey: id) { maps.hotBytes -= replaced.page.bytes.count }
        maps.hotBytes += bytes
    }
}
