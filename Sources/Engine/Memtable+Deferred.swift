// Deferred linking, for the memtable of a read-only store that follows a writer in another
// process. Such a reader replays every batch the writer commits, and linking each change
// into the skip list (a search of some twenty dependent cache misses per key) cost it as
// much as the writer's own memtable work: most of a reader process's time went to keeping
// up, not to its reads. Its reads mostly find keys through the hash index, which a change
// reaches with one probe. So the reader makes each change's node and names it in the index
// and filter, and leaves it out of the skip list until something walks the list in key
// order (a scan, a count, a conflict check): then every node left out is linked at once,
// sorted, the keys searched side by side as a commit's are (Memtable+LaneInsert.swift).
//
// Invariants (with Memtable.K1–K4 for the nodes in the list):
//  Memtable.D1. A node left out has its level-0 link set, before the index names it, to the
//      node the index named for its key until then (its older change, linked or left out
//      too), and `olderFollows` set when there was one. So a point lookup through the index
//      follows a key's changes newest first as in the list (Memtable.K1, K4), and linking
//      the node later stores that same link, or a node of a greater key where it had none.
//  Memtable.D2. Nodes are left out only while the index is complete (MemtableIndex.X1): a
//      batch that might fill it first links every node left out and stops deferring, so no
//      lookup ever falls back to a skip list that lacks a node it should find.
//  Memtable.D3. A walk in key order starts only after every node left out at the walk's
//      version is linked (`linkDeferred`, called by `entries` and the conflict check).
// Thread-safety: `apply` stays the single writer's; `linkDeferred` runs on any thread, and
// both hold `unlinked`'s lock while they touch the list, the finger or the arena. Linking
// follows Memtable.K2 (each link stored with release), so walks already under way are
// unaffected.
import CStrataPlatform
import StrataWAL

extension Memtable {
    /// Adds an encoded batch at `version` without linking its nodes (Memtable.D1), or
    /// returns false, having linked every node left out and stopped deferring, when the
    /// index might not take the batch's keys (Memtable.D2): the caller then applies it linked.
    func applyUnlinked(_ batch: WALBatch.Encoding, version: UInt64) -> Bool {
        let locations = batch.operationLocations
        return unlinked.withLock { unlinked in
            batch.bytes.withUnsafeBytes { bytes in
                locations.withUnsafeBufferPointer { locations in
                    func key(_ index: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[locations[index].key]) }
                    func value(_ index: Int) -> UnsafeRawBufferPointer? {
                        locations[index].value.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) }
                    }
                    // Room for every operation, as if no key repeated in the batch; failing
                    // that, for its distinct keys (found with a sort, only near the index's
                    // limit or for a batch of more operations than the index takes keys).
                    guard index.hasRoom(for: locations.count)
                            || index.hasRoom(for: lastOperations(count: locations.count, key).count) else {
                        stopDeferring(&unlinked)
                        return false
                    }
                    // Last operation first: a key's last operation in the batch is the one that
                    // counts (`apply`), and once its node is named (the index is complete for the
                    // whole batch, MemtableIndex.X1), the index answers the key's earlier operations
                    // with a node of this very version, so they are skipped. The lookup is the one
                    // the node's older change needs anyway; sorting the batch's keys to find each
                    // one's last operation took a tenth of a reader process's time. (The nodes lie
                    // in the arena in reverse operation order now, not in key order.)
                    let last = locations.count - 1
                    for position in stride(from: last, through: max(0, last - Self.prefetchDistance + 1), by: -1) { prefetch(key(position)) }
                    var made = 0
                    for position in stride(from: last, through: 0, by: -1) {
                        if position >= Self.prefetchDistance { prefetch(key(position - Self.prefetchDistance)) }
                        let changed = key(position)
                        let hash = hashKey(changed)
                        let older = index.newest(changed, hash: hash)
                        if let older, older.version == version { continue }
                        let node = makeNode(changed, version: version, value: value(position))
                        guard MemtableIndex.canName(node) else {
                            // Unreachable on the platforms Strata runs on (48-bit addresses); linked
                            // with the rest of the batch, after every node left out (Memtable.D2):
                            // the last operations of the keys not reached yet.
                            countMade(made)
                            stopDeferring(&unlinked)
                            link(node, continuingRun: false)
                            for earlier in lastOperations(count: locations.count, key) where earlier < position {
                                link(makeNode(key(earlier), version: version, value: value(earlier)), continuingRun: false)
                            }
                            return true
                        }
                        if let older {
                            node.link(0).store(older.bits, ordering: .relaxed)
                            node.markOlderFollows()
                        }
                        filter.add(hash)
                        index.record(node, hash: hash)
                        unlinked.append(node)
                        made += 1
                    }
                    countMade(made)
                    unlinkedCount.store(unlinked.count, ordering: .releasing)
                    return true
                }
            }
        }
    }

    /// Links every node left out into the skip list (Memtable.D3): O(1) when there is none.
    func linkDeferred() {
        guard unlinkedCount.load(ordering: .acquiring) > 0 else { return }
        unlinked.withLock { linkAll(&$0) }
    }

    /// Links every node left out and stops deferring for good (`unlinked` held).
    private func stopDeferring(_ unlinked: inout [MemtableNode]) {
        linkAll(&unlinked)
        defersLinking.store(false, ordering: .relaxed)
    }

    /// Links `unlinked` into the skip list and empties it (its lock held). Sorted by key,
    /// a key's changes oldest first; each key's predecessors are searched in rounds of
    /// `roundKeys`, `searchLanes` side by side, then each change goes in right after them
    /// (the older ones already there follow it: Memtable.K1, D1).
    private func linkAll(_ unlinked: inout [MemtableNode]) {
        guard !unlinked.isEmpty else { return }
        let nodes = unlinked
        // Equal keys stay in the order made, oldest first (positionsInKeyOrder).
        let order = positionsInKeyOrder(count: nodes.count) { nodes[$0].key }
        // The first position in `order` of each key.
        var starts: [Int] = []
        for position in order.indices
        where position == 0 || compareBytes(nodes[order[position - 1]].key, nodes[order[position]].key) != 0 {
            starts.append(position)
        }
        let height = Self.maxHeight
        let predecessors = UnsafeMutablePointer<MemtableNode>.allocate(capacity: Self.roundKeys * height)
        defer { predecessors.deallocate() }
        var first = 0
        while first < starts.count {
            let end = min(starts.count, first + Self.roundKeys)
            let top = levels.load(ordering: .relaxed) - 1
            let keys = starts[first..<end].map { nodes[order[$0]].key }
            search(keys[...], top: top, into: predecessors)
            // As in `insert(sorted:)`: each key's predecessors corrected for the nodes this
            // round linked before it (`seekFinger`).
            for level in 0..<height { finger[level] = head }
            for group in first..<end {
                let key = keys[group - first]
                let found = predecessors + (group - first) * height
                let changes = order[starts[group]..<(group + 1 < starts.count ? starts[group + 1] : order.count)]
                seekFinger(to: key, found: found, top: top, height: changes.map { nodes[$0].height }.max()!)
                // Oldest first, each right after the predecessors: newer before older.
                for position in changes {
                    let node = nodes[position]
                    for level in 0..<node.height {
                        node.link(level).store(finger[level].link(level).load(ordering: .relaxed), ordering: .relaxed)
                    }
                    for level in 0..<node.height { finger[level].link(level).store(node.bits, ordering: .releasing) }
                }
            }
            first = end
        }
        for level in 0..<height { finger[level] = head }
        unlinked = []
        unlinkedCount.store(0, ordering: .releasing)
    }
}
