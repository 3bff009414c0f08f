import FileIO
import Testing
@testable import Engine

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
        var left = built.entries(from: nil, reverse: false)
        var right = inserted.entries(from: nil, reverse: false)
        while true {
            let a = left.next()
            let b = right.next()
            #expect(a?.key == b?.key && a?.value == b?.value)
            if a == nil || b == nil { break }
        }
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
