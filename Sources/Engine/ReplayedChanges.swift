// The changes a recovery replays, gathered flat: every key and value side by side in one
// buffer and a small record per change, so a million replayed changes are a few large
// allocations instead of two million arrays, and sorting compares bytes in place.
struct ReplayedChanges {
    private struct Change {
        var keyStart: Int
        var keyCount: Int
        /// The value follows the key; -1 for a delete.
        var valueCount: Int
        var version: UInt64
    }

    private var bytes: [UInt8] = []
    private var changes: [Change] = []

    /// Adds a change; later changes of a key win over earlier ones.
    mutating func append(key: [UInt8], value: [UInt8]?, version: UInt64) {
        changes.append(Change(keyStart: bytes.count, keyCount: key.count, valueCount: value?.count ?? -1, version: version))
        bytes.append(contentsOf: key)
        if let value { bytes.append(contentsOf: value) }
    }

    /// Inserts the last change of each key into `memtable`, in key order.
    func insertLatest(into memtable: Memtable) {
        bytes.withUnsafeBytes { bytes in
            changes.withUnsafeBufferPointer { changes in
                func key(_ index: Int) -> UnsafeRawBufferPointer {
                    UnsafeRawBufferPointer(rebasing: bytes[changes[index].keyStart..<(changes[index].keyStart + changes[index].keyCount)])
                }
                let order = positionsInKeyOrder(count: changes.count, key)
                var latest: [Int] = []
                latest.reserveCapacity(order.count)
                for (position, index) in order.enumerated()
                    where position + 1 == order.count || compareBytes(key(index), key(order[position + 1])) != 0 {
                    latest.append(index)
                }
                memtable.insert(sortedUniqueCount: latest.count) { position in
                    let change = changes[latest[position]]
                    let valueStart = change.keyStart + change.keyCount
                    let value = change.valueCount < 0 ? nil
                        : UnsafeRawBufferPointer(rebasing: bytes[valueStart..<(valueStart + change.valueCount)])
                    return (key(latest[position]), change.version, value)
                }
            }
        }
    }
}
