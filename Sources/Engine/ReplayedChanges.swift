// The changes a recovery replays, gathered flat: each batch's bytes copied once, whole, into
// arena blocks that never move (MemtableArena), and a small record per change pointing at
// its key and value in that copy, so a million replayed changes are a few large
// allocations and one copy per batch instead of two million arrays, and sorting compares
// bytes in place. Blocks rather than one growing array: doubling an array of 100 MiB
// touched twice the memory, and page faults were half of recovery's time.
import CStrataPlatform
import StrataWAL

final class ReplayedChanges {
    private struct Change {
        var key: UnsafeRawPointer
        var version: UInt64
        /// -1 for a delete.
        var valueCount: Int32
        var keyCount: UInt16
        /// Where the value starts, counted from the key's first byte.
        var valueOffset: UInt16
    }

    private var arena = MemtableArena()
    private var changes: [Change] = []

    deinit { arena.deallocateAll() }

    /// Adds the operations of `record` at `version` (copying its bytes); later changes of a
    /// key win over earlier ones. The caller has checked each key and value against the
    /// engine's limits (`checkReplayed`), so a key's length and a value's offset from it
    /// fit in 16 bits.
    func append(_ record: WALRecord, version: UInt64) {
        let locations = record.operationLocations
        guard !locations.isEmpty else { return }
        record.encoded.withUnsafeBytes { bytes in
            let copy = UnsafeRawPointer(arena.allocate(bytes.count))
            UnsafeMutableRawPointer(mutating: copy).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            for location in locations {
                let key = location.key
                changes.append(Change(key: copy + key.lowerBound, version: version,
                                      valueCount: location.value.map { Int32($0.count) } ?? -1,
                                      keyCount: UInt16(key.count),
                                      valueOffset: location.value.map { UInt16($0.lowerBound - key.lowerBound) } ?? 0))
            }
        }
    }

    /// Inserts the last change of each key into `memtable`, in key order.
    func insertLatest(into memtable: Memtable) {
        changes.withUnsafeBufferPointer { changes in
            func key(_ index: Int) -> UnsafeRawBufferPointer {
                UnsafeRawBufferPointer(start: changes[index].key, count: Int(changes[index].keyCount))
            }
            let order = positionsInKeyOrder(count: changes.count, key)
            // Both passes ask for the key a few places ahead (see positionsInKeyOrder).
            let ahead = 8
            var latest: [Int] = []
            latest.reserveCapacity(order.count)
            for (position, index) in order.enumerated() {
                if position + ahead < order.count { cplatform_prefetch(changes[order[position + ahead]].key) }
                if position + 1 == order.count || compareBytes(key(index), key(order[position + 1])) != 0 {
                    latest.append(index)
                }
            }
            memtable.insert(sortedUniqueCount: latest.count) { position in
                if position + ahead < latest.count { cplatform_prefetch(changes[latest[position + ahead]].key) }
                let change = changes[latest[position]]
                let value = change.valueCount < 0 ? nil
                    : UnsafeRawBufferPointer(start: change.key + Int(change.valueOffset), count: Int(change.valueCount))
                return (key(latest[position]), change.version, value)
            }
        }
    }
}
