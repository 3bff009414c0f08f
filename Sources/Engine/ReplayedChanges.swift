// The changes a recovery replays, made into memtable nodes as the log is read (each key and
// value copied once, straight from the batch's bytes into the memtable's arena) but linked
// only at the end: sorted by key, the last change of each key linked as one sorted run
// (O(1) per key), the others left unlinked (invisible, freed with the memtable). No copy of
// the log's changes is kept beside the memtable: a million replayed changes were 113 MiB
// gathered and then copied again into nodes, and touching fresh memory (the kernel zeroing
// each page) was most of recovery's time.
//
// Memory is bounded by what the replay keeps, not by how many changes the log holds: when
// the nodes made reach `compactionBytes` (then four times what the last look kept), and at
// least half of them are superseded, the last change of each key is copied into a fresh
// memtable and the old one is freed. A
// log that writes a few keys millions of times (a 64 MiB batch of 4-byte operations is
// stored in 340 KB) then costs what its keys cost, not ~100 bytes a change (FORMAT.md,
// "Replay memory"). A look starts from an estimate of how many keys the changes hold
// (`DistinctKeyEstimate`, kept as they are made): the exact look, a random probe of a
// table twice the nodes' count for each change, was an eighth of a million-key recovery
// whose changes were nearly all the last of their key, and found nothing to free.
import CStrataPlatform
import StrataWAL
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

final class ReplayedChanges {
    /// The node bytes at which a replay first compacts.
    static let compactionBytes = 16 << 20

    private let budgetBytes: Int
    /// Whether the memtable is a reader's that follows a writer: it defers linking later
    /// batches (Memtable+Deferred.swift).
    private let followsWriter: Bool
    private(set) var memtable: Memtable
    private var nodes: [MemtableNode] = []
    /// Node bytes that trigger the next compaction.
    private var compactAt: Int
    private let compactionBytes: Int
    /// How many distinct keys the changes made hold, estimated.
    private var distinct = DistinctKeyEstimate()
    /// Looks for superseded changes (for tests): every one, the exact ones the estimate let
    /// through, and those that copied the last changes.
    private(set) var compactions = 0
    private(set) var exactLooks = 0
    private(set) var copies = 0

    /// Changes to be linked into a memtable of about `budgetBytes`, which only this replay
    /// writes until `linkLatest`. `followsWriter`: for a read-only store beside a writer,
    /// which defers the linking of the batches it reads later. `compactionBytes` is for tests.
    init(budgetBytes: Int, followsWriter: Bool = false, compactionBytes: Int = ReplayedChanges.compactionBytes) {
        self.budgetBytes = budgetBytes
        self.followsWriter = followsWriter
        memtable = Memtable(budgetBytes: budgetBytes, defersLinking: followsWriter)
        compactAt = compactionBytes
        self.compactionBytes = compactionBytes
    }

    /// Adds the operations of `record` at `version`; later changes of a key win over
    /// earlier ones. The log's reader checked each key and value against the format's
    /// limits, which are the engine's.
    func append(_ record: WALRecord, version: UInt64) {
        record.forEachOperation { _, key, value in
            nodes.append(memtable.makeNode(key, version: version, value: value))
            distinct.add(hashKey(key))
            if memtable.byteCount >= compactAt { compact() }
        }
    }

    /// Links the last change of each key into the memtable, in key order, and returns it.
    func linkLatest() -> Memtable {
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
        nodes = []
        return memtable
    }

    /// Copies the last change of each key into a fresh memtable (in log order, so later
    /// changes still come after them) and frees the old one with every superseded change,
    /// when at least half the changes are superseded.
    /// The last changes are found through a hash table of positions (no sort: the nodes of
    /// a log that writes few keys over and over are mostly superseded).
    private func compact() {
        compactions += 1
        // Copying keeps one change of each key, so the estimate goes on counting the keys
        // of the nodes kept and made since. It errs by a few per cent of the keys, whatever
        // keys a log holds (its hash is seeded per replay): past 0.55 of the changes, fewer
        // than half of them are superseded.
        guard distinct.estimate <= 0.55 * Double(nodes.count) else {
            compactAt = 4 * memtable.byteCount
            return
        }
        exactLooks += 1
        var latest: [Int] = []
        nodes.withUnsafeBufferPointer { nodes in
            var slots = 16
            while slots < 2 * nodes.count { slots *= 2 }
            let mask = slots - 1
            // Slot → 1 + the position of the newest node of its key so far (0 = empty).
            var table = [Int](repeating: 0, count: slots)
            for position in nodes.indices {
                let key = nodes[position].key
                var slot = Int(truncatingIfNeeded: hashKey(key)) & mask
                while table[slot] != 0 && compareBytes(nodes[table[slot] - 1].key, key) != 0 { slot = (slot + 1) & mask }
                table[slot] = position + 1
            }
            latest = table.compactMap { $0 == 0 ? nil : $0 - 1 }
        }
        guard 2 * latest.count <= nodes.count else {
            // Most changes are the last of their key (a normal log): a copy would free little
            // and touch as much fresh memory as it keeps. Look again once it has grown fourfold.
            compactAt = 4 * memtable.byteCount
            return
        }
        latest.sort()
        let fresh = Memtable(budgetBytes: budgetBytes, defersLinking: followsWriter)
        let kept = latest.map { position in
            let node = nodes[position]
            return fresh.makeNode(node.key, version: node.version, value: node.value, height: node.height)
        }
        nodes = kept
        memtable = fresh
        copies += 1
        // What was kept is not looked at again until the replay has made three times as much.
        compactAt = max(compactionBytes, 4 * fresh.byteCount)
    }
}

/// An estimate of how many distinct keys were added (HyperLogLog: Flajolet, Fusy, Gandouet
/// and Meunier, 2007, with its linear-counting correction for small counts): 4,096
/// one-byte registers, a standard error of about 1.6 % (up to about 2 % where the two
/// estimators meet, near 10,000 keys; `ReplayedChangesTests` measures it). Adding a key costs
/// its `hashKey`, a mix and a byte compared, in a table that stays in the first-level cache.
///
/// The keys' hash is mixed with a seed drawn per estimate: `hashKey` is the same in every
/// process, and a forged log whose few keys were picked for hashes with many leading zeros
/// would otherwise look like millions of keys, and keep a replay from ever dropping its
/// superseded changes (FORMAT.md, "Replay memory"). Seeded, a log's keys hash as random.
struct DistinctKeyEstimate {
    private static let indexBits = 12
    private var registers = [UInt8](repeating: 0, count: 1 << indexBits)
    private let seed: UInt64

    init(seed: UInt64 = .random(in: .min ... .max)) {
        self.seed = seed
    }

    /// Adds a key by its `hashKey`: the top 12 bits of the seeded mix pick a register,
    /// which keeps the most leading zeros (plus one) seen in the other 52.
    mutating func add(_ keyHash: UInt64) {
        // Every bit of the seed affects every bit of the mix.
        let hash = finalizeHash(keyHash ^ seed)
        let index = Int(truncatingIfNeeded: hash >> (64 - Self.indexBits))
        let rank = UInt8(truncatingIfNeeded: min((hash << Self.indexBits).leadingZeroBitCount, 64 - Self.indexBits) + 1)
        if registers[index] < rank { registers[index] = rank }
    }

    /// The number of distinct keys added, estimated.
    var estimate: Double {
        let count = Double(registers.count)
        var sum = 0.0
        var empty = 0
        for rank in registers {
            sum += 1 / Double(UInt64(1) << rank)
            if rank == 0 { empty += 1 }
        }
        let raw = 0.7213 / (1 + 1.079 / count) * count * count / sum
        // Few keys: count the registers still empty instead.
        if raw <= 2.5 * count && empty > 0 { return count * log(count / Double(empty)) }
        return raw
    }
}
