// The memtable's insert of a commit's batch: keys searched side by side in lanes, their
// cache misses overlapped, then linked in key order. Writer only (Memtable.swift's header).
import CStrataPlatform

extension Memtable {
    /// Keys searched at once by `insert(sorted:version:withValue:)`. Measured at 1M keys
    /// (Benchmarks/JOURNAL.md): 16 beat 8 by 8–16 % on fillrandom and 15–33 % on
    /// deleterandom; 32 was no better than 16 and slower on deleterandom.
    static let searchLanes = 16
    /// Keys per round of searching and linking (bounds the predecessor table).
    static let roundKeys = 256

    /// Inserts `keys` (sorted, no key twice) at `version`, the value of key `i` handed by
    /// `withValue(i, body)` to `body` (nil for a delete), borrowed, with whether its node
    /// may point at it in place (Memtable.K5). In a memtable
    /// larger than the caches each step of a skip-list search is a cache miss, one after
    /// another; here a round of keys is first searched `searchLanes` at a time, each lane's
    /// next node prefetched while the other lanes step, so the misses overlap. The
    /// predecessors found are then linked in key order, each corrected for the nodes this
    /// round inserted before it (a step forward from the later of the two).
    func insert(sorted keys: [UnsafeRawBufferPointer], version: UInt64,
                        withValue: (Int, (UnsafeRawBufferPointer?, Bool) -> Void) -> Void) {
        let height = Self.maxHeight
        let predecessors = UnsafeMutablePointer<MemtableNode>.allocate(capacity: Self.roundKeys * height)
        defer { predecessors.deallocate() }
        var start = 0
        while start < keys.count {
            let end = min(keys.count, start + Self.roundKeys)
            let top = levels.load(ordering: .relaxed) - 1
            // The round's filter words and index slots load while the search runs.
            for index in start..<end { prefetch(keys[index]) }
            search(keys[start..<end], top: top, into: predecessors)
            // Link in key order. `finger[level]` is the node this round last linked at `level`
            // (or a found predecessor before it): the later of it and the found predecessor
            // precedes the key.
            for level in 0..<height { finger[level] = head }
            for index in start..<end {
                let key = keys[index]
                let found = predecessors + (index - start) * height
                let nodeHeight = randomHeight()
                seekFinger(to: key, found: found, top: top, height: nodeHeight)
                withValue(index) { linkAfterFinger(makeNode(key, version: version, value: $0, height: nodeHeight, valueInPlace: $1)) }
            }
            start = end
        }
        // `finger` now holds the last key's predecessors at its levels only: a later
        // continuing run must not start from it.
        for level in 0..<height { finger[level] = head }
    }

    /// Sets `finger` to `key`'s predecessors at the levels below `height` (raising the
    /// list's levels to it), in a round of `insert(sorted:)` or `linkAll`: at each level the
    /// later of the predecessor the round's search found (`found`, up to level `top`) and
    /// the node the round left in `finger`, stepped forward past smaller keys.
    func seekFinger(to key: UnsafeRawBufferPointer, found: UnsafeMutablePointer<MemtableNode>, top: Int, height: Int) {
        if height > levels.load(ordering: .relaxed) { levels.store(height, ordering: .relaxed) }
        for level in 0..<height {
            var predecessor = level <= top ? found[level] : head
            let linked = finger[level]
            if linked != head && (predecessor == head || linked.compare(with: predecessor.key) > 0) { predecessor = linked }
            while let next = predecessor.next(level), next.compare(with: key) < 0 { predecessor = next }
            finger[level] = predecessor
        }
    }

    /// Finds, for each key, its predecessor at every level up to `top` in the list as it
    /// stands (the last node whose key is below it), into `predecessors` (`maxHeight` per
    /// key), running `searchLanes` searches interleaved.
    func search(_ keys: ArraySlice<UnsafeRawBufferPointer>, top: Int, into predecessors: UnsafeMutablePointer<MemtableNode>) {
        struct Lane {
            var key = -1
            var node: MemtableNode
            var level = 0
            var candidate: MemtableNode?
        }
        keys.withUnsafeBufferPointer { keys in
            // The lanes in a stack buffer: the loop touches them every step, and an array's
            // bounds and uniqueness checks on each were a visible share of the search.
            withUnsafeTemporaryAllocation(of: Lane.self, capacity: Self.searchLanes) { lanes in
                var nextKey = 0
                var running = 0
                func begin(_ lane: UnsafeMutablePointer<Lane>) {
                    guard nextKey < keys.count else {
                        lane.initialize(to: Lane(key: -1, node: head))
                        return
                    }
                    let candidate = head.next(top)
                    lane.initialize(to: Lane(key: nextKey, node: head, level: top, candidate: candidate))
                    nextKey += 1
                    running += 1
                    if let candidate { cplatform_prefetch(candidate.base) }
                }
                let base = lanes.baseAddress!
                for index in 0..<Self.searchLanes { begin(base + index) }
                while running > 0 {
                    for index in 0..<Self.searchLanes {
                        let lane = base + index
                        guard lane.pointee.key >= 0 else { continue }
                        let key = keys[lane.pointee.key]
                        if let candidate = lane.pointee.candidate, candidate.compare(with: key) < 0 {
                            lane.pointee.node = candidate
                        } else {
                            predecessors[lane.pointee.key * Self.maxHeight + lane.pointee.level] = lane.pointee.node
                            if lane.pointee.level == 0 {
                                running -= 1
                                begin(lane)
                                continue
                            }
                            lane.pointee.level -= 1
                        }
                        let next = lane.pointee.node.next(lane.pointee.level)
                        lane.pointee.candidate = next
                        if let next { cplatform_prefetch(next.base) }
                    }
                }
            }
        }
    }
}
