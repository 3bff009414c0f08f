import StrataFileIO
import Testing
import StrataWAL
@testable import StrataEngine

/// Expects both memtables to hold the same keys with the same entries, in order.
func expectSameEntries(_ first: Memtable, _ second: Memtable, sourceLocation: SourceLocation = #_sourceLocation) {
    var left = first.entries(from: nil, reverse: false)
    var right = second.entries(from: nil, reverse: false)
    while true {
        let a = left.next()
        let b = right.next()
        #expect(a?.key == b?.key && a?.value == b?.value, sourceLocation: sourceLocation)
        if a == nil || b == nil { break }
    }
}

@Suite struct MemtableTests {
    @Test(arguments: [UInt64(1), 2, 3])
    func aBuiltMemtableEqualsOneMadeByInsertingTheSameChangesInOrder(seed: UInt64) {
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        var changes: [(key: [UInt8], entry: MemtableEntry)] = []
        for version in 1...3000 {
            let key = Array("k\(random.next() % 700)".utf8)
            let value: [UInt8]? = random.next() % 5 == 0 ? nil : [UInt8(truncatingIfNeeded: version)]
            changes.append((key, MemtableEntry(version: UInt64(version), value: value)))
        }
        var inserted = Memtable()
        for change in changes { inserted = inserted.inserting(change.key, change.entry) }
        let built = Memtable.build(sortedUnique: StorageEngine.latestPerKey(changes))
        #expect(built.checkInvariants() && inserted.checkInvariants())
        #expect(built.count == inserted.count && built.byteCount == inserted.byteCount)
        expectSameEntries(built, inserted)
    }

    @Test func scansStartWhereAskedInBothDirections() {
        var memtable = Memtable()
        for key in ["b", "d", "f"] { memtable = memtable.inserting(Array(key.utf8), MemtableEntry(version: 1, value: [])) }
        func keys(_ start: String?, reverse: Bool) -> [String] {
            var iterator = memtable.entries(from: start.map { Array($0.utf8) }, reverse: reverse)
            var result: [String] = []
            while let next = iterator.next() { result.append(String(decoding: next.key, as: UTF8.self)) }
            return result
        }
        #expect(keys("c", reverse: false) == ["d", "f"])
        #expect(keys("d", reverse: false) == ["d", "f"])
        #expect(keys("c", reverse: true) == ["b"])
        #expect(keys("d", reverse: true) == ["d", "b"])
        #expect(keys(nil, reverse: true) == ["f", "d", "b"])
        #expect(keys("a", reverse: true) == [])
    }
}

@Suite struct MemtableMergeTests {
    /// Merging sorted batches (join-based union) gives the same memtable as inserting
    /// their changes one by one: entries, count, byte count, and AVL balance.
    @Test(arguments: [UInt64(1), 2, 3, 4])
    func mergingABatchEqualsInsertingItsChanges(seed: UInt64) {
        print("MemtableMergeTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        var merged = Memtable()
        var inserted = Memtable()
        for version in 1...200 {
            // Keys appended after all others, scattered among them, or overwriting them.
            let size = Int(random.next() % 300)
            var changes: [(key: [UInt8], entry: MemtableEntry)] = []
            for _ in 0..<size {
                let number = random.next() % 3 == 0 ? UInt64(version) * 1_000 + random.next() % 1_000 : random.next() % 5_000
                let key = Array(String(format: "%08llu", number).utf8)
                let value: [UInt8]? = random.next() % 6 == 0 ? nil : [UInt8](repeating: 7, count: Int(random.next() % 40))
                changes.append((key, MemtableEntry(version: UInt64(version), value: value)))
            }
            merged = merged.merging(sortedUnique: StorageEngine.latestPerKey(changes))
            for change in changes { inserted = inserted.inserting(change.key, change.entry) }
            #expect(merged.checkInvariants(), "seed \(seed), batch \(version)")
            #expect(merged.count == inserted.count && merged.byteCount == inserted.byteCount, "seed \(seed), batch \(version)")
        }
        expectSameEntries(merged, inserted)
    }
}

@Suite struct MemtableApplyTests {
    /// `applying` merges appended batches and inserts scattered ones; either way the
    /// result is the memtable of inserting every operation in order.
    @Test func applyingAppendedAndScatteredBatchesEqualsInsertingThem() {
        var random = SplitMix64(seed: 12)
        var applied = Memtable()
        var inserted = Memtable()
        for version in 1...60 {
            var batch = WALBatch()
            let appended = version % 2 == 0
            for index in 0..<(1 + Int(random.next() % 100)) {
                let number = appended ? version * 1_000 + index : Int(random.next() % UInt64(version * 1_000))
                let key = Array(String(format: "%08d", number).utf8)
                if random.next() % 7 == 0 { batch.delete(key) } else { batch.put(key, [UInt8(truncatingIfNeeded: version)]) }
            }
            applied = applied.applying(batch, version: UInt64(version))
            for operation in batch.operations {
                switch operation {
                case let .put(key, value): inserted = inserted.inserting(key, MemtableEntry(version: UInt64(version), value: value))
                case let .delete(key): inserted = inserted.inserting(key, MemtableEntry(version: UInt64(version), value: nil))
                }
            }
            #expect(applied.checkInvariants() && applied.count == inserted.count && applied.byteCount == inserted.byteCount)
        }
        expectSameEntries(applied, inserted)
    }
}
