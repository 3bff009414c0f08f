import StrataCodec
import StrataFileIO
import StrataWAL
import Testing
@testable import StrataEngine

/// Leaves of format 6 store the prefix their keys share once (FORMAT.md, "Elided
/// prefixes"): what that buys a page, the edge cases of the layout, the pages a crafted
/// file could hold, and a store whose keys share long prefixes through checkpoints.
@Suite struct ElidedPrefixTests {
    private static let pageBytes = 4096

    private func cells(_ keys: [[UInt8]], valueBytes: Int = 1) -> [CellToWrite] {
        keys.enumerated().map {
            .entry(LeafEntry(key: $1, version: UInt64($0 + 1), payload: .inline([UInt8](repeating: 7, count: valueBytes))))
        }
    }

    /// The most of `cells` (from the first) that fit one leaf: with whole keys in every
    /// cell (format 3), or with their shared prefix stored once.
    private func fitting(_ cells: [CellToWrite], elided: Bool) -> Int {
        let capacity = PageCodec.hintedCapacity(pageBytes: Self.pageBytes)
        var count = 0
        while count < cells.count {
            let next = cells[..<(count + 1)]
            let bytes = elided ? PageCodec.leafBytes(next) : next.reduce(0) { $0 + $1.cellBytes }
            guard bytes <= capacity else { break }
            count += 1
        }
        return count
    }

    /// The benchmarks' keys (16 decimal digits) with 100-byte values and one-byte
    /// versions: consecutive keys share 14 bytes, so a leaf holds 36 pairs where whole
    /// keys fit 32 (the numbers FORMAT.md states), and the page they make decodes to them.
    @Test func decimalKeysFitMorePairsALeaf() throws {
        let keys = (1_000_000..<1_000_100).map { Array(String(format: "%016d", $0).utf8) }
        let all = cells(keys, valueBytes: 100)
        let whole = fitting(all, elided: false)
        let elided = fitting(all, elided: true)
        #expect(whole == 32)
        #expect(elided == 36)
        let page = PageCodec.encodeLeaf(cells: all[..<elided], id: PageID(3), generation: 1, pageBytes: Self.pageBytes)
        let (_, count, _) = try PageCodec.verify(page, id: PageID(3), expected: [.leaf])
        #expect(try PageCodec.decodeLeaf(page, count: count).map(\.key) == Array(keys[..<elided]))
        #expect(page.withUnsafeBytes { PageCodec.storedHintOffset($0) } == 14, "keys 1000000 … 1000035 share \"00000000010000\"")
    }

    /// A leaf of one key elides all of it (its cell's key is empty), and a first key that
    /// is the shared prefix itself has an empty rest: both read back, are found, and
    /// bracket only themselves.
    @Test(arguments: [["solo"], ["ab", "abc", "abd"], ["x", "x\u{0}", "xy"]])
    func keysThatAreThePrefixReadBack(_ strings: [String]) throws {
        let keys = strings.map { Array($0.utf8) }
        let page = PageCodec.encodeLeaf(cells: cells(keys)[...], id: PageID(3), generation: 1, pageBytes: Self.pageBytes)
        let (type, count, word) = try PageCodec.verify(page, id: PageID(3), expected: [.leaf])
        #expect(try PageCodec.decodeLeaf(page, count: count).map(\.key) == keys)
        try page.withUnsafeBytes { bytes in
            let leaf = TreePage(bytes: bytes, type: type, count: count, word: word)
            #expect(leaf.isElided && leaf.elidedPrefix.count == (keys.count == 1 ? keys[0].count : 1 + (strings[0] == "ab" ? 1 : 0)))
            for (index, key) in keys.enumerated() {
                let cell = try key.withUnsafeBytes { try leaf.leafCell(for: $0) }
                let order = try key.withUnsafeBytes { try leaf.compareKey(index, with: $0) }
                #expect(cell?.version == UInt64(index + 1) && order == 0)
            }
            for absent in ["", "a", "s", "sol", "soloo", "abb", "abe", "x\u{1}", "xz", "w"].map({ Array($0.utf8) }) where !keys.contains(absent) {
                let cell = try absent.withUnsafeBytes { try leaf.leafCell(for: $0) }
                #expect(cell == nil, "\(absent)")
            }
        }
    }

    /// Pages a crafted file could hold: each is corrupt to `decodeLeaf` (what `verify`
    /// and checkpoints use), with a reason, and no lookup reads past the page.
    @Test(arguments: ["long prefix", "rests share a byte", "key too long"])
    func craftedElidedLeavesAreCorrupt(_ what: String) throws {
        var page: [UInt8]
        switch what {
        case "long prefix":
            page = PageCodec.encodeLeaf(cells: cells([Array("k1".utf8), Array("k2".utf8)])[...], id: PageID(3), generation: 1,
                                        pageBytes: Self.pageBytes)
            page[PageHeader.bytes] = 0x01
            page[PageHeader.bytes + 1] = 0x04   // 1,025 bytes of prefix
        case "rests share a byte":
            // Keys "pa1" and "pa2" whose page says they share "p" only: the rests "a1" and
            // "a2" share "a".
            page = PageCodec.encodeLeaf(cells: cells([Array("pa1".utf8), Array("pa2".utf8)])[...], id: PageID(3), generation: 1,
                                        pageBytes: Self.pageBytes)
            #expect(page.withUnsafeBytes { PageCodec.storedHintOffset($0) } == 2)
            var forged = PageCodec.emptyPage(.leaf, id: PageID(3), generation: 1, count: 2, word: 0, pageBytes: Self.pageBytes)
            forged[PageCodec.leafFormatOffset] = PageCodec.currentLeafFormat
            forged[PageHeader.bytes] = 1
            forged[PageCodec.hintedSlotsStart] = UInt8(ascii: "p")
            let slots = PageCodec.hintedSlotsStart + 1
            var end = Self.pageBytes
            for (index, rest) in ["a1", "a2"].enumerated() {
                let cell: [UInt8] = [2] + Array(rest.utf8) + [UInt8(index + 1), 0, 1, 7]
                end -= cell.count
                forged.replaceSubrange(end..<(end + cell.count), with: cell)
                forged[slots + 6 * index] = UInt8(end & 0xFF)
                forged[slots + 6 * index + 1] = UInt8(end >> 8)
                let hint = Array(rest.utf8) + [0, 0]
                forged.replaceSubrange((slots + 6 * index + 2)..<(slots + 6 * index + 6), with: hint)
            }
            page = forged
        default:
            // A prefix of 700 bytes and a rest of 100: a key of 800 bytes.
            let prefix = [UInt8](repeating: 0x41, count: 700)
            page = PageCodec.encodeLeaf(cells: cells([prefix + [1], prefix + [2]])[...], id: PageID(3), generation: 1,
                                        pageBytes: Self.pageBytes)
            let (_, count, _) = try PageCodec.verify(page, id: PageID(3), expected: [.leaf])
            let start = try page.withUnsafeBytes { try PageCodec.keyLocation($0, index: 1, count: count).start }
            // Make the second cell's key length 100 (its rest was 1 byte): its bytes come
            // from the cell's version, flags and value and what follows, in the page.
            page[start - 1] = 100
        }
        PageCodec.seal(&page)
        let (type, count, word) = try PageCodec.verify(page, id: PageID(3), expected: [.leaf])
        #expect(throws: PageDefect.self) { try PageCodec.decodeLeaf(page, count: count) }
        page.withUnsafeBytes { bytes in
            let leaf = TreePage(bytes: bytes, type: type, count: count, word: word)
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: Limits.maxKeyBytes, alignment: 8)
            defer { buffer.deallocate() }
            for probe in ["k1", "k2", "pa1", "p", "z", ""].map({ Array($0.utf8) }) {
                _ = try? probe.withUnsafeBytes { try leaf.lowerBound($0) }
                _ = try? probe.withUnsafeBytes { try leaf.leafCell(for: $0) }
            }
            for index in 0..<count { _ = try? leaf.copyKey(index, into: buffer) }
        }
    }

    /// A cursor puts an elided leaf's keys together in a buffer of its own: a copy of the
    /// cursor that moves on leaves the original's next keys as they were (the memtable's
    /// keys interleave with the leaf's, so the original holds a tree key between calls).
    @Test func aCopiedCursorAndItsOriginalReadTheirOwnKeys() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem())
        let key = { (number: Int) in Array("key-\(number)".utf8) }
        try engine.commit(WALBatch([.put(key: key(2), value: [2]), .put(key: key(4), value: [4]), .put(key: key(6), value: [6])]))
        try engine.checkpoint()
        try engine.commit(WALBatch([.put(key: key(1), value: [1]), .put(key: key(3), value: [3]), .put(key: key(5), value: [5])]))
        var original = try engine.snapshot().cursor()
        #expect(try original.next()?.key == key(1))
        var copy = original
        for number in 2...6 {
            let pair = try copy.next()
            #expect(pair?.key == key(number) && pair?.value == [UInt8(number)], "the copy at \(number)")
        }
        for number in 2...6 {
            let pair = try original.next()
            #expect(pair?.key == key(number) && pair?.value == [UInt8(number)], "the original at \(number)")
        }
        #expect(try original.next() == nil && copy.next() == nil)
        try engine.close()
    }

    /// A scan puts each key together from its leaf's prefix and a rest copied by its
    /// length (none, 1–3, 4–7, 8–16 bytes, or longer, each class copied its own way):
    /// rests of every length from 0 to 40, each byte telling its place, read back whole
    /// forwards and in reverse.
    @Test func restsOfEveryLengthScanWhole() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem())
        let prefix = Array("shared-prefix/".utf8)
        let keys = (0...40).map { length in prefix + (0..<length).map { UInt8(truncatingIfNeeded: 0x20 + length * 3 + $0) } }
        try engine.commit(WALBatch(keys.map { .put(key: $0, value: [UInt8(truncatingIfNeeded: $0.count)]) }))
        try engine.checkpoint()
        let sorted = keys.sorted { $0.lexicographicallyPrecedes($1) }
        for reverse in [false, true] {
            var scanned: [[UInt8]] = []
            try engine.snapshot().forEach(reverse: reverse) { key, value in
                let key = key.withUnsafeBytes { Array($0) }
                #expect(value.withUnsafeBytes { Array($0) } == [UInt8(truncatingIfNeeded: key.count)])
                scanned.append(key)
                return true
            }
            #expect(scanned == (reverse ? sorted.reversed() : sorted))
        }
        try engine.close()
    }

    /// A store whose keys share long prefixes (as record keys and index entries do):
    /// through checkpoints that split, merge and rewrite leaves, every get, forward and
    /// reverse scan, range and `verify` agrees with a model, before and after a reopen.
    @Test func aStoreOfLongSharedPrefixesReadsAsItsModel() throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.checkpointLogBytes = 256 << 10
        var model: [[UInt8]: [UInt8]] = [:]
        var random = SplitMix64(seed: 61)
        print("ElidedPrefixTests seed 61")
        let prefixes = ["\u{FE}i\u{4}Book\u{5}title", "\u{FE}i\u{4}Book\u{6}author", "\u{FE}r\u{4}Book", "a", ""].map { Array($0.utf8) }
        func check(_ engine: StorageEngine) throws {
            let snapshot = engine.snapshot()
            let sorted = model.keys.sorted { $0.lexicographicallyPrecedes($1) }
            var scanned: [[UInt8]] = []
            try snapshot.forEach { key, value in
                let key = key.withUnsafeBytes { Array($0) }
                scanned.append(key)
                #expect(value.withUnsafeBytes { Array($0) } == model[key])
                return true
            }
            #expect(scanned == sorted)
            var reversed: [[UInt8]] = []
            try snapshot.forEach(reverse: true) { key, _ in
                reversed.append(key.withUnsafeBytes { Array($0) })
                return true
            }
            #expect(reversed == sorted.reversed())
            for key in sorted.prefix(200) { #expect(try snapshot.get(key) == model[key]) }
            for prefix in prefixes where !prefix.isEmpty {
                #expect(try snapshot.get(prefix) == model[prefix])
                #expect(try snapshot.get(prefix + [0xFF, 0xFF, 0xFF]) == model[prefix + [0xFF, 0xFF, 0xFF]])
            }
            #expect(engine.verify().isValid)
        }
        var (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        for round in 0..<12 {
            var operations: [WALBatch.Operation] = []
            for _ in 0..<1_500 {
                let prefix = prefixes[Int(random.next() % UInt64(prefixes.count))]
                let key = prefix + withUnsafeBytes(of: (random.next() % 5_000).bigEndian) { Array($0) }
                if random.next() % 5 == 0 {
                    operations.append(.delete(key: key))
                    model[key] = nil
                } else {
                    let value = [UInt8](repeating: UInt8(round), count: Int(random.next() % 40))
                    operations.append(.put(key: key, value: value))
                    model[key] = value
                }
            }
            try engine.commit(WALBatch(operations))
            if round % 3 == 2 { try engine.checkpoint() }
        }
        try engine.checkpoint()
        try check(engine)
        try engine.close()
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        try check(engine)
        try engine.close()
    }
}
