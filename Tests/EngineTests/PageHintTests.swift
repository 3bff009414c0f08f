import StrataFileIO
import Testing
@testable import StrataEngine

/// Leaves and branches whose slots carry hints (format 3, PageCodec "Hints"), and leaves
/// that also store their keys' shared prefix once (format 6, "Elided prefixes"): a search
/// over the hints must give exactly what a search over the keys gives, for keys of the
/// page and keys that do not share its common prefix; a page whose hints do not match its
/// keys does not decode.
@Suite struct PageHintTests {
    private static let pageBytes = 4096

    /// Encodes `keys` (sorted, distinct) as a leaf, eliding their shared prefix (format 6)
    /// or not (format 3), and hands it over as a verified page.
    private func withLeaf<T>(_ keys: [[UInt8]], elide: Bool = true, _ body: (TreePage, [UInt8]) throws -> T) throws -> T {
        let entries = keys.enumerated().map { LeafEntry(key: $1, version: UInt64($0 + 1), payload: .inline([UInt8($0 & 0xFF)])) }
        var page = PageCodec.encodeLeaf(cells: entries.map(CellToWrite.entry)[...], id: PageID(7), generation: 1,
                                        pageBytes: Self.pageBytes, elide: elide)
        if !elide { PageCodec.seal(&page) }
        let (type, count, word) = try PageCodec.verify(page, id: PageID(7), expected: [.leaf])
        return try page.withUnsafeBytes { try body(TreePage(bytes: $0, type: type, count: count, word: word), page) }
    }

    /// Encodes `keys` (sorted, distinct) as the cells of a branch and hands it over.
    private func withBranch<T>(_ keys: [[UInt8]], _ body: (TreePage, [UInt8]) throws -> T) throws -> T {
        let entries = [BranchEntry(key: [], child: PageID(100))]
            + keys.enumerated().map { BranchEntry(key: $1, child: PageID(UInt64(101 + $0))) }
        let page = PageCodec.encodeBranch(entries[...], id: PageID(7), generation: 1, pageBytes: Self.pageBytes)
        let (type, count, word) = try PageCodec.verify(page, id: PageID(7), expected: [.branch])
        return try page.withUnsafeBytes { try body(TreePage(bytes: $0, type: type, count: count, word: word), page) }
    }

    @Test(arguments: [UInt64(11), 12, 13, 14], [true, false])
    func hintsFindWhatKeysFind(seed: UInt64, elide: Bool) throws {
        print("PageHintTests seed \(seed), elide \(elide)")
        var random = SplitMix64(seed: seed)
        // Few distinct byte values, so keys share prefixes and hints tie often.
        let alphabet: [UInt8] = [0, 1, 0x61, 0x7F, 0x80, 0xFF]
        func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] } }
        for round in 0..<300 {
            let prefix = bytes(Int(random.next() % 10))
            var keys = Set((0..<Int(random.next() % 40)).map { _ in prefix + bytes(Int(random.next() % 9)) })
            keys.remove([])
            let sorted = keys.sorted { $0.lexicographicallyPrecedes($1) }
            try withLeaf(sorted, elide: elide) { leaf, page in
                #expect(try PageCodec.decodeLeaf(page, count: sorted.count).map(\.key) == sorted)
                // Every whole key, put together from the prefix and the cell.
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: Limits.maxKeyBytes, alignment: 8)
                defer { buffer.deallocate() }
                for (index, key) in sorted.enumerated() {
                    let length = try leaf.copyKey(index, into: buffer)
                    #expect(Array(UnsafeRawBufferPointer(start: buffer, count: length)) == key, "seed \(seed) round \(round)")
                }
                // Keys of the page, keys sharing its prefix, and keys with any other start.
                let probes = sorted + (0..<40).map { _ in
                    random.next() % 2 == 0 ? prefix + bytes(Int(random.next() % 9)) : bytes(Int(random.next() % 12) + 1)
                }
                for probe in probes {
                    let expected = sorted.firstIndex { !$0.lexicographicallyPrecedes(probe) } ?? sorted.count
                    let present = expected < sorted.count && sorted[expected] == probe
                    let (index, found) = try probe.withUnsafeBytes { try leaf.lowerBound($0) }
                    #expect(index == expected && found == present, "seed \(seed) round \(round): \(probe) in \(sorted)")
                    let cell = try probe.withUnsafeBytes { try leaf.leafCell(for: $0) }
                    #expect(cell?.version == (present ? UInt64(expected + 1) : nil), "seed \(seed) round \(round): \(probe)")
                    // Against the first and the last key, as a finger brackets a key.
                    for index in [0, sorted.count - 1] where !sorted.isEmpty {
                        let order = try probe.withUnsafeBytes { try leaf.compareKey(index, with: $0) }
                        let model = sorted[index] == probe ? 0 : (sorted[index].lexicographicallyPrecedes(probe) ? -1 : 1)
                        #expect(order.signum() == model, "seed \(seed) round \(round): \(probe) against cell \(index)")
                    }
                }
            }
            try withBranch(sorted) { branch, page in
                #expect(try PageCodec.decodeBranch(page, count: sorted.count, leftmost: 100, lowerBound: []).map(\.key) == [[]] + sorted)
                let probes = sorted + (0..<40).map { _ in
                    random.next() % 2 == 0 ? prefix + bytes(Int(random.next() % 9)) : bytes(Int(random.next() % 12) + 1)
                }
                for probe in probes {
                    // The child whose range holds the key: one past the last cell at or below it.
                    let expected = sorted.filter { !probe.lexicographicallyPrecedes($0) }.count
                    let index = try probe.withUnsafeBytes { try branch.childIndex(for: $0) }
                    #expect(index == expected, "seed \(seed) round \(round): \(probe) in \(sorted)")
                    // From any child at or before the key's (as a batch of ascending keys
                    // starts from the child the key before took).
                    for first in 0...expected {
                        let galloped = try probe.withUnsafeBytes { try branch.childIndex(for: $0, from: first) }
                        #expect(galloped == expected, "seed \(seed) round \(round): \(probe) from \(first) in \(sorted)")
                    }
                }
            }
        }
    }

    @Test func aLeafStoresItsKeysCommonPrefixLengthAndEachKeysHint() throws {
        let keys = ["user:0042:a", "user:0042:b", "user:0042:bc", "user:0043"].map { Array($0.utf8) }
        try withLeaf(keys) { leaf, page in
            #expect(page[PageCodec.leafFormatOffset] == PageCodec.currentLeafFormat)
            #expect(PageCodec.storedHintOffset(leaf.bytes) == 8, "\"user:004\" is common to the first and last keys")
            let slots = PageCodec.slotLayout(leaf.bytes).start
            #expect(slots == PageCodec.hintedSlotsStart + 8, "the slots follow the shared prefix")
            #expect(Array(leaf.elidedPrefix) == Array("user:004".utf8))
            let hints = (0..<keys.count).map { PageCodec.slotHint(leaf.bytes, slots: slots, index: $0) }
            // "2:a" zero-padded, "2:b", "2:bc", "3" zero-padded, as big-endian numbers.
            #expect(hints == [0x323A_6100, 0x323A_6200, 0x323A_6263, 0x3300_0000])
        }
    }

    /// A page whose checksum matches but whose hints lie (a crafted file) is corrupt to
    /// `decodeLeaf`, which `verify` and checkpoints use; lookups never read past it.
    @Test(arguments: ["offset", "hint"])
    func wrongHintsAreACorruptPage(what: String) throws {
        let keys = ["a1", "a2", "a3"].map { Array($0.utf8) }
        var page = try withLeaf(keys) { _, page in page }
        if what == "offset" {
            page[PageHeader.bytes] = 0
        } else {
            page[PageCodec.hintedSlotsStart + 1 + PageCodec.hintedSlotBytes + 2] ^= 0x40 // after the prefix "a"
        }
        PageCodec.seal(&page)
        let (type, count, word) = try PageCodec.verify(page, id: PageID(7), expected: [.leaf])
        #expect(throws: PageDefect.self) { try PageCodec.decodeLeaf(page, count: count) }
        try page.withUnsafeBytes { bytes in
            let leaf = TreePage(bytes: bytes, type: type, count: count, word: word)
            for key in keys + [Array("a".utf8), Array("b".utf8)] {
                _ = try key.withUnsafeBytes { try leaf.lowerBound($0) }
            }
        }
        // A hint offset far past any key is clamped, not trusted.
        page[PageHeader.bytes] = 0xFF
        page[PageHeader.bytes + 1] = 0xFF
        PageCodec.seal(&page)
        _ = try PageCodec.verify(page, id: PageID(7), expected: [.leaf])
        try page.withUnsafeBytes { bytes in
            let leaf = TreePage(bytes: bytes, type: type, count: count, word: word)
            _ = try Array("a2".utf8).withUnsafeBytes { try leaf.leafCell(for: $0) }
        }
    }
}

extension TreePage {
    /// Copies cell `index`'s whole key into `buffer` (at least `Limits.maxKeyBytes`
    /// long) and returns its length: the key as the tests' model sees it, put together
    /// apart from the cursor's way (`TreeCursor.currentKey()`).
    func copyKey(_ index: Int, into buffer: UnsafeMutableRawPointer) throws(PageDefect) -> Int {
        let (start, length) = try PageCodec.keyLocation(bytes, index: index, count: count)
        var prefix = 0
        if isElided {
            prefix = PageCodec.storedHintOffset(bytes)
            guard prefix + length <= Limits.maxKeyBytes else { throw PageDefect("cell \(index) has a key of \(prefix + length) bytes") }
            buffer.copyMemory(from: bytes.baseAddress! + PageCodec.hintedSlotsStart, byteCount: prefix)
        }
        buffer.advanced(by: prefix).copyMemory(from: bytes.baseAddress! + start, byteCount: length)
        return prefix + length
    }
}
