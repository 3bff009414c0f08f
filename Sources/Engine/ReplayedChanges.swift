// The changes a recovery replays, made into memtable nodes as the log is read (each key and
// value copied once, straight from the batch's bytes into the memtable's arena) but linked
// only at the end: sorted by key, the last change of each key linked as one sorted run
// (O(1) per key), the others left unlinked (invisible, freed with the memtable). No copy of
// the log's changes is kept beside the memtable: a million replayed changes were 113 MiB
// gathered and then copied again into nodes, and touching fresh memory (the kernel zeroing
// each page) was most of recovery's time.
//
// Memory is bounded by what the replay keeps, not by how many changes the log holds: when
// the nodes made reach `compactionBytes` (and twice what the last compaction kept), the
// last change of each key is copied into a fresh memtable and the old one is freed. A log
// that writes a few keys millions of times (a 64 MiB batch of 4-byte operations compresses
// to 288 KB) then costs what its keys cost, not 100 bytes a change (FORMAT.md, "Replay
// memory").
import CStrataPlatform
import StrataWAL

final class ReplayedChanges {
    /// The node bytes at which a replay first compacts.
    static let compactionBytes = 64 << 20

    private let budgetBytes: Int
    private(set) var memtable: Memtable
    private var nodes: [MemtableNode] = []
    /// Node bytes that trigger the next compaction.
    private var compactAt: Int
    /// Compactions made (for tests).
    private(set) var compactions = 0

    /// Changes to be linked into a memtable of about `budgetBytes`, which only this replay
    /// writes until `linkLatest`. `compactionBytes` is for tests.
    init(budgetBytes: Int, compactionBytes: Int = ReplayedChanges.compactionBytes) {
        self.budgetBytes = budgetBytes
        memtable = Memtable(budgetBytes: budgetBytes)
        compactAt = compactionBytes
    }

    /// Adds the operations of `record` at `version`; later changes of a key win over
    /// earlier ones. The log's reader checked each key and value against the format's
    /// limits, which are the engine's.
    func append(_ record: WALRecord, version: UInt64) {
        record.forEachOperation { _, key, value in
            nodes.append(memtable.makeNode(key, version: version, value: value))
            if memtable.byteCount >= compactAt { compact() }
        }
    }

    /// Links the last change of each key into the memtable, in key order, and returns it.
    func linkLatest() -> Memtable {
        let latest = latestPositions(sorted: true)
        nodes.withUnsafeBufferPointer { nodes in
            memtable.link(sortedUniqueCount: latest.count) { nodes[latest[$0]] }
        }
        nodes = []
        return memtable
    }

    /// The positions in `nodes` of each key's last change: in key order when `sorted`, else
    /// in log order.
    private func latestPositions(sorted: Bool) -> [Int] {
        nodes.withUnsafeBufferPointer { nodes in
            let order = positionsInKeyOrder(count: nodes.count) { nodes[$0].key }
            // Ask for a node a few places ahead (see positionsInKeyOrder).
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
            if !sorted { latest.sort() }
            return latest
        }
    }

    /// Copies the last change of each key into a fresh memtable (in log order, so later
    /// changes still come after them) and frees the old one with every superseded change.
    private func compact() {
        let latest = latestPositions(sorted: false)
        let fresh = Memtable(budgetBytes: budgetBytes)
        let kept = latest.map { position in
            let node = nodes[position]
            return fresh.makeNode(node.key, version: node.version, value: node.value, height: node.height)
        }
        nodes = kept
        memtable = fresh
        compactions += 1
        compactAt = max(compactAt, 2 * fresh.byteCount)
    }
}
