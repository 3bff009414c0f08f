// A committed batch linked into the memtable, from its encoding (a commit of up to one log
// frame, and every batch a reader in another process replays) or from its operations (a
// larger commit: the log encodes it a fragment at a time, never whole,
// `WALBatch.EncodingStream`). Recovery makes and links its nodes itself (ReplayedChanges).
// Both go through one generic `link`, specialized for each: a first version that took the
// keys and values through closures cost fillrandom 368 more instructions a key (callgrind,
// 200,000 keys), most of them allocating and freeing a closure's context per key.
// Writer only (Memtable.swift's header).
import StrataWAL

/// A batch's changes as `Memtable.link` reads them: each key, valid throughout the link,
/// and each value (nil for a delete), valid for one call, with whether its node may point
/// at it in place (Memtable.K5).
protocol BatchChanges {
    var count: Int { get }
    func key(_ index: Int) -> UnsafeRawBufferPointer
    func withValue(_ index: Int, _ body: (UnsafeRawBufferPointer?, Bool) -> Void)
    /// Has `memtable` keep the values its nodes point at, of the changes `linked`.
    func keepValues(linked: some Sequence<Int>, in memtable: Memtable)
}

/// The changes of an encoded batch, read where they lie in its bytes.
private struct EncodedChanges: BatchChanges {
    let bytes: UnsafeRawBufferPointer
    let locations: UnsafeBufferPointer<WALBatch.OperationLocation>

    var count: Int { locations.count }

    @inline(__always)
    func key(_ index: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[locations[index].key]) }

    @inline(__always)
    func withValue(_ index: Int, _ body: (UnsafeRawBufferPointer?, Bool) -> Void) {
        body(locations[index].value.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) }, false)
    }

    /// Nothing to keep: every value was copied.
    @inline(__always)
    func keepValues(linked: some Sequence<Int>, in memtable: Memtable) {}
}

/// The changes of a batch's operations: their keys copied side by side (an operation's
/// bytes are valid only while it is read), their values read where they lie.
private struct OperationChanges: BatchChanges {
    let operations: UnsafeBufferPointer<WALBatch.Operation>
    let keyBytes: UnsafeRawBufferPointer
    /// Where each operation's key ends in `keyBytes`.
    let keyEnds: UnsafeBufferPointer<Int>

    var count: Int { operations.count }

    @inline(__always)
    func key(_ index: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: keyBytes[(index == 0 ? 0 : keyEnds[index - 1])..<keyEnds[index]])
    }

    @inline(__always)
    func withValue(_ index: Int, _ body: (UnsafeRawBufferPointer?, Bool) -> Void) {
        WALBatch.Operation.withBytes(of: operations[index]) { _, value in
            body(value, (value?.count ?? 0) >= Memtable.inPlaceValueBytes)
        }
    }

    /// The arrays of the values linked in place, and of no other change (Memtable.K5).
    func keepValues(linked: some Sequence<Int>, in memtable: Memtable) {
        for index in linked {
            if let value = operations[index].value, value.count >= Memtable.inPlaceValueBytes {
                memtable.writerOnly.pointee.kept.append(value)
            }
        }
    }
}

extension Memtable {
    /// The smallest value a batch linked from its operations lends its node in place
    /// (Memtable.K5): a page. Copied, the values of a fill of 64 KiB values were the
    /// applier's whole time, most of it the kernel zeroing the arena's fresh blocks
    /// (Benchmarks/JOURNAL.md, "A large batch encoded a fragment at a time").
    static let inPlaceValueBytes = 4_096

    /// Adds every operation of `batch` at `version`, reading each key and value where it
    /// lies in the operations' arrays; the last operation of a key wins. `version` must be
    /// above every version held (Memtable.K3). Writer only. The engine links a batch larger
    /// than one log frame this way; a memtable that defers linking takes encodings
    /// (Memtable+Deferred.swift). A value of `inPlaceValueBytes` or more is not copied:
    /// its node points at it, and the memtable keeps its array (Memtable.K5).
    func apply(_ batch: WALBatch, version: UInt64) {
        guard !batch.operations.isEmpty else { return }
        guard !defersLinking.load(ordering: .relaxed) else { return apply(batch.encoding(), version: version) }
        batch.operations.withUnsafeBufferPointer { operations in
            var keyByteCount = 0
            for index in operations.indices {
                keyByteCount += WALBatch.Operation.withBytes(of: operations[index]) { key, _ in key.count }
            }
            let keyBytes = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, keyByteCount), alignment: 8)
            defer { keyBytes.deallocate() }
            let keyEnds = UnsafeMutableBufferPointer<Int>.allocate(capacity: operations.count)
            defer { keyEnds.deallocate() }
            var end = 0
            for index in operations.indices {
                WALBatch.Operation.withBytes(of: operations[index]) { key, _ in
                    UnsafeMutableRawBufferPointer(rebasing: keyBytes[end..<(end + key.count)]).copyMemory(from: key)
                    end += key.count
                }
                keyEnds[index] = end
            }
            link(OperationChanges(operations: operations, keyBytes: UnsafeRawBufferPointer(keyBytes),
                                  keyEnds: UnsafeBufferPointer(keyEnds)), version: version)
        }
    }

    /// Adds every operation of an encoded batch at `version`, reading each key and value
    /// where it lies in the encoding (a copy of a `WALBatch.Operation` retains and
    /// releases its arrays, atomically, while the committing thread releases them too);
    /// the last operation of a key wins. `version` must be above every version held (Memtable.K3).
    /// Writer only.
    func apply(_ batch: WALBatch.Encoding, version: UInt64) {
        let locations = batch.operationLocations
        guard !locations.isEmpty else { return }
        if defersLinking.load(ordering: .relaxed), applyUnlinked(batch, version: version) { return }
        batch.bytes.withUnsafeBytes { bytes in
            locations.withUnsafeBufferPointer { locations in
                link(EncodedChanges(bytes: bytes, locations: locations), version: version)
            }
        }
    }

    /// Links `changes` at `version`, the last change of each key winning.
    private func link<Changes: BatchChanges>(_ changes: Changes, version: UInt64) {
        if changes.count == 1 {
            let key = changes.key(0)
            changes.withValue(0) { link(makeNode(key, version: version, value: $0, valueInPlace: $1), continuingRun: false) }
            changes.keepValues(linked: CollectionOfOne(0), in: self)
            return
        }
        // Sorted, a batch goes in as one run: each key continues from the previous
        // one's place instead of searching from the top (a sequential batch costs
        // O(1) per key).
        let winners = lastOperations(count: changes.count, changes.key)
        let keys = winners.map(changes.key)
        if let last = lastNode(below: nil), last.compare(with: keys[0]) >= 0 {
            insert(sorted: keys, version: version) { position, body in changes.withValue(winners[position], body) }
        } else {
            // Every key goes after the last one held (sequential writes): each
            // continues from the previous one's place, O(1) per key, no search.
            // The filter words and index slots are the random accesses left,
            // loaded a few keys ahead.
            for key in keys.prefix(Self.prefetchDistance) { prefetch(key) }
            for (position, index) in winners.enumerated() {
                if position + Self.prefetchDistance < keys.count { prefetch(keys[position + Self.prefetchDistance]) }
                changes.withValue(index) { value, inPlace in
                    link(makeNode(keys[position], version: version, value: value, valueInPlace: inPlace), continuingRun: position > 0)
                }
            }
        }
        changes.keepValues(linked: winners, in: self)
    }
}
