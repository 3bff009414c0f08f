// The memtable: committed changes not yet folded into the B+tree, as a persistent map
// (PersistentSortedMap.swift, invariants M1–M2). Publishing a commit makes a new memtable
// that shares all but O(log n) nodes with the old one, so a snapshot keeps the memtable
// as of its version by holding a reference: readers never lock and never block writers.
// Thread-safety: values are immutable and `Sendable`.

/// A change as the memtable keeps it: the value (nil for a delete) and its version.
struct MemtableEntry: Sendable, Equatable {
    var version: UInt64
    var value: [UInt8]?
}

/// The committed changes not yet in the tree, with their size.
struct Memtable: Sendable {
    private(set) var map = PersistentSortedMap<MemtableEntry>()
    /// Approximate bytes held (keys, values and per-entry overhead), for the checkpoint trigger.
    private(set) var byteCount = 0

    static let entryOverheadBytes = 64

    /// Keys held.
    var count: Int { map.count }

    /// The entry for `key`, if the memtable has one. O(log n).
    func entry(_ key: [UInt8]) -> MemtableEntry? { map[key] }

    /// A memtable with `entry` under `key` (replacing any earlier one). O(log n) new nodes.
    func inserting(_ key: [UInt8], _ entry: MemtableEntry) -> Memtable {
        var result = self
        let replaced = result.map.updateValue(entry, forKey: key)
        result.byteCount += Self.bytes(key, entry) - (replaced.map { Self.bytes(key, $0) } ?? 0)
        return result
    }

    /// The largest key held, or nil when empty. O(log n).
    var lastKey: [UInt8]? {
        var iterator = map.entries(from: nil, reverse: true)
        return iterator.next()?.key
    }

    /// This memtable with `entries` (sorted by key, no key twice) added, replacing any
    /// entry of the same key. O(m log(n/m + 1)) for m entries into n.
    func merging(sortedUnique entries: [(key: [UInt8], entry: MemtableEntry)]) -> Memtable {
        var result = self
        var replacedBytes = 0
        result.map = map.merging(PersistentSortedMap(sortedUnique: entries.map { ($0.key, $0.entry) })) { key, old in
            replacedBytes += Self.bytes(key, old)
        }
        result.byteCount += entries.reduce(0) { $0 + Self.bytes($1.key, $1.entry) } - replacedBytes
        return result
    }

    /// A memtable holding the given entries, built balanced in O(n) without rotations.
    /// `entries` must be sorted by key with no key twice.
    static func build(sortedUnique entries: [(key: [UInt8], entry: MemtableEntry)]) -> Memtable {
        var memtable = Memtable()
        memtable.map = PersistentSortedMap(sortedUnique: entries.map { ($0.key, $0.entry) })
        memtable.byteCount = entries.reduce(0) { $0 + bytes($1.key, $1.entry) }
        return memtable
    }

    /// Entries in key order from the first key at or above `start` (forward) or at or
    /// below it (reverse); nil starts at the end.
    func entries(from start: [UInt8]?, reverse: Bool) -> MemtableIterator {
        map.entries(from: start, reverse: reverse)
    }

    /// Checks M1 and M2 of PersistentSortedMap.swift (tests only: O(n)).
    func checkInvariants() -> Bool { map.checkInvariants() }

    private static func bytes(_ key: [UInt8], _ entry: MemtableEntry) -> Int {
        key.count + (entry.value?.count ?? 0) + entryOverheadBytes
    }
}

typealias MemtableIterator = PersistentSortedMap<MemtableEntry>.Iterator
