// The changes a recovery replays, made into memtable nodes as the log is read (each key and
// value copied once, straight from the batch's bytes into the memtable's arena) but linked
// only at the end: sorted by key, the last change of each key linked as one sorted run
// (O(1) per key), the others left unlinked (invisible, freed with the memtable). No copy of
// the log's changes is kept beside the memtable: a million replayed changes were 113 MiB
// gathered and then copied again into nodes, and touching fresh memory (the kernel zeroing
// each page) was most of recovery's time.
import CStrataPlatform
import StrataWAL

final class ReplayedChanges {
    private let memtable: Memtable
    private var nodes: [MemtableNode] = []

    /// Changes to be linked into `memtable`, which only this replay writes until `linkLatest`.
    init(into memtable: Memtable) { self.memtable = memtable }

    /// Adds the operations of `record` at `version`; later changes of a key win over
    /// earlier ones. The caller has checked each key and value against the engine's limits
    /// (`checkReplayed`).
    func append(_ record: WALRecord, version: UInt64) {
        record.forEachOperation { _, key, value in
            nodes.append(memtable.makeNode(key, version: version, value: value))
        }
    }

    /// Links the last change of each key into the memtable, in key order.
    func linkLatest() {
        nodes.withUnsafeBufferPointer { nodes in
            let order = positionsInKeyOrder(count: nodes.count) { nodes[$0].key }
            // Both passes ask for a node a few places ahead (see positionsInKeyOrder).
            let ahead = 8
            var latest: [Int] = []
            latest.reserveCapacity(order.count)
            for (position, index) in order.enumerated() {
                if position + ahead < order.count { cplatform_prefetch(nodes[order[position + ahead]].base) }
                // positionsInKeyOrder keeps equal keys in log order: the last of a run is the newest.
                if position + 1 == order.count || compareBytes(nodes[index].key, nodes[order[position + 1]].key) != 0 {
                    latest.append(index)
                }
            }
            memtable.link(sortedUniqueCount: latest.count) { nodes[latest[$0]] }
        }
    }
}
