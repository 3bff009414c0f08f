// A bounded cache of decoded B+tree pages, shared by every reader.
//
// Why a cache over pread rather than mmap: pages are verified (checksum, layout, key
// order) once when they are read and then served decoded, and a corrupt page becomes an
// error instead of a SIGBUS; the memory bound is explicit. Eviction is two-generation
// (a "hot" and a "cold" map, the cold one dropped whole when the hot one fills), which
// approximates LRU at O(1) per access with no per-entry links.
// Thread-safety: every method takes the mutex; decoded nodes are immutable values.
import Locks
import Synchronization

final class PageCache: Sendable {
    private struct Generations {
        var hot: [PageID: Node] = [:]
        var cold: [PageID: Node] = [:]
    }

    /// The most pages held at once.
    let capacity: Int
    private let maps = Locked(Generations())

    init(capacity: Int) {
        self.capacity = max(capacity, 16)
    }

    func node(_ id: PageID) -> Node? {
        maps.withLock { maps in
            if let node = maps.hot[id] { return node }
            guard let node = maps.cold.removeValue(forKey: id) else { return nil }
            insert(id, node, into: &maps)
            return node
        }
    }

    func insert(_ id: PageID, _ node: Node) {
        maps.withLock { insert(id, node, into: &$0) }
    }

    /// Forgets a page that is about to be rewritten.
    func remove(_ id: PageID) {
        maps.withLock { maps in
            maps.hot[id] = nil
            maps.cold[id] = nil
        }
    }

    var count: Int { maps.withLock { $0.hot.count + $0.cold.count } }

    private func insert(_ id: PageID, _ node: Node, into maps: inout Generations) {
        if maps.hot.count >= capacity / 2 {
            maps.cold = maps.hot
            maps.hot = [:]
            maps.hot.reserveCapacity(capacity / 2)
        }
        maps.hot[id] = node
    }
}
