import StrataCodec
import StrataFileIO
import Testing
@testable import StrataEngine

/// The tree writer copies the cells it keeps from the bytes of the leaf it read
/// (StoredCell.swift) instead of decoding each into a `LeafEntry`: those cells must be the
/// entries `decodeLeaf` reads, make the same pages, and be refused where it refuses a page.
@Suite struct StoredCellTests {
    private static let pageBytes = 4096

    /// A cell's size counts each varint's bytes (`varintBytes`) as a cell's writer stores
    /// them (`ByteWriter.storeVarint`): at 0, at every power of two and one below it, and
    /// at the largest value.
    @Test func varintSizesAreTheBytesStored() {
        var values: [UInt64] = [0, .max]
        for shift in 1..<64 { values += [(1 << UInt64(shift)) - 1, 1 << UInt64(shift)] }
        for value in values {
            var stored = [UInt8](repeating: 0, count: 10)
            var end = 0
            stored.withUnsafeMutableBytes { ByteWriter.storeVarint(value, in: $0, at: &end) }
            #expect(varintBytes(value) == end, "varint of \(value)")
        }
    }

    /// Random entries in key order for one leaf: keys sharing a random prefix, inline values
    /// of 0 to 120 bytes, tombstones, and references to overflow runs and chains.
    private func randomEntries(_ random: inout SplitMix64) -> [LeafEntry] {
        let prefix = (0..<Int.random(in: 0...20, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
        var keys = Set<[UInt8]>()
        for _ in 0..<Int.random(in: 1...40, using: &random) {
            keys.insert(prefix + (0..<Int.random(in: 0...12, using: &random)).map { _ in UInt8.random(in: 0...3, using: &random) })
        }
        return keys.sorted { compareKeys($0, $1) < 0 }.map { key in
            let version = UInt64.random(in: 1...(UInt64(1) << UInt64.random(in: 1...62, using: &random)), using: &random)
            let payload: Payload
            switch Int.random(in: 0..<10, using: &random) {
            case 0: payload = .tombstone
            case 1: payload = .overflow(.chain(first: PageID(UInt64.random(in: 2...1_000, using: &random)), byteCount: 5_000))
            case 2: payload = .overflow(LargeValue(first: PageID(UInt64.random(in: 2...1_000, using: &random)), byteCount: 9_000,
                                                   run: LargeValue.Run(stored: 4_000, checksum: UInt32.random(in: 0...UInt32.max, using: &random))))
            default: payload = .inline((0..<Int.random(in: 0...120, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            }
            return LeafEntry(key: key, version: version, payload: payload)
        }
    }

    /// The entries that fit one leaf, from the first.
    private func fitting(_ entries: [LeafEntry]) -> [LeafEntry] {
        var count = entries.count
        while count > 1 && !PageCodec.leafFits(Array(entries[..<count]), pageBytes: Self.pageBytes) { count -= 1 }
        return Array(entries[..<count])
    }

    private func leaf(_ entries: [LeafEntry], elide: Bool) -> [UInt8] {
        var page = PageCodec.encodeLeaf(cells: entries.map(CellToWrite.entry)[...], id: PageID(3), generation: 1,
                                        pageBytes: Self.pageBytes, elide: elide)
        if !elide { PageCodec.seal(&page) }
        return page
    }

    /// Leaves of random entries, raw (their keys' prefix elided) and with whole keys (the
    /// layout a compressed leaf expands to): every stored cell has its entry's key,
    /// version, kind and size, and any run of them makes the page its entries make.
    @Test func storedCellsAreTheEntriesDecodeLeafReads() throws {
        var random = SplitMix64(seed: 0x5704_ED01)
        print("StoredCellTests seed 0x5704_ED01")
        for round in 0..<300 {
            let entries = fitting(randomEntries(&random))
            for elide in [true, false] {
                let page = leaf(entries, elide: elide)
                let (_, count, _) = try PageCodec.verify(page, id: PageID(3), expected: [.leaf])
                let decoded = try PageCodec.decodeLeaf(page, count: count)
                let stored = try PageCodec.storedCells(page, count: count)
                #expect(decoded == entries)
                try #require(stored.count == decoded.count, "round \(round)")
                for (cell, entry) in zip(stored, decoded) {
                    #expect(cell.withKey { Array($0) } == entry.key && cell.version == entry.version, "round \(round)")
                    #expect(cell.isTombstone == (entry.payload == .tombstone), "round \(round)")
                    if case let .overflow(value) = entry.payload { #expect(cell.largeValue == value) } else { #expect(cell.largeValue == nil) }
                    #expect(cell.cellBytes == entry.cellBytes, "round \(round)")
                }
                let start = Int.random(in: 0..<stored.count, using: &random)
                let end = Int.random(in: (start + 1)...stored.count, using: &random)
                for reencode in [true, false] {
                    let fromStored = PageCodec.encodeLeaf(cells: stored[start..<end].map(CellToWrite.stored)[...], id: PageID(9),
                                                          generation: 2, pageBytes: Self.pageBytes, elide: reencode)
                    let fromEntries = PageCodec.encodeLeaf(cells: decoded[start..<end].map(CellToWrite.entry)[...], id: PageID(9),
                                                           generation: 2, pageBytes: Self.pageBytes, elide: reencode)
                    #expect(fromStored == fromEntries, "round \(round), cells \(start)..<\(end)")
                }
            }
        }
    }

    /// A raw leaf that counts no cell but says its keys share a prefix (a crafted page):
    /// read as no cell, as `decodeLeaf` reads it, or refused by both.
    @Test func aLeafOfNoCellWithAPrefixReadsAsEmpty() throws {
        var page = leaf([LeafEntry(key: Array("shared-prefix-1".utf8), version: 1, payload: .inline([1]))], elide: true)
        page[6] = 0
        page[7] = 0
        PageCodec.seal(&page)
        let (_, count, _) = try PageCodec.verify(page, id: PageID(3), expected: [.leaf])
        #expect(count == 0 && page.withUnsafeBytes { PageCodec.storedHintOffset($0) } == 15)
        let decoded = Result { () throws(PageDefect) in try PageCodec.decodeLeaf(page, count: count) }
        let stored = Result { () throws(PageDefect) in try PageCodec.storedCells(page, count: count) }
        switch (decoded, stored) {
        case let (.success(entries), .success(cells)): #expect(entries.isEmpty && cells.isEmpty)
        case (.failure, .failure): break
        default: Issue.record("decodeLeaf \(decoded), storedCells \(stored)")
        }
    }

    /// A leaf with one byte changed past its header (its checksum then fixed, as a crafted
    /// file would have it): `storedCells` refuses it exactly when `decodeLeaf` does, and
    /// reads the same cells when both take it.
    @Test func storedCellsRefuseWhatDecodeLeafRefuses() throws {
        var random = SplitMix64(seed: 0x5704_ED02)
        print("StoredCellTests seed 0x5704_ED02")
        var refused = 0
        for round in 0..<3_000 {
            let entries = fitting(randomEntries(&random))
            var page = leaf(entries, elide: round % 2 == 0)
            let used = page.withUnsafeBytes { PageCodec.slotLayout($0) }.start + PageCodec.hintedSlotBytes * entries.count
            // A byte of the slots or hints, or of the cells at the end of the page.
            let at = Bool.random(using: &random) ? Int.random(in: PageHeader.bytes..<used, using: &random)
                : Int.random(in: max(used, Self.pageBytes - 600)..<Self.pageBytes, using: &random)
            page[at] ^= UInt8.random(in: 1...255, using: &random)
            PageCodec.seal(&page)
            guard let (_, count, _) = try? PageCodec.verify(page, id: PageID(3), expected: [.leaf]) else { continue }
            let decoded = Result { () throws(PageDefect) in try PageCodec.decodeLeaf(page, count: count) }
            let stored = Result { () throws(PageDefect) in try PageCodec.storedCells(page, count: count) }
            switch (decoded, stored) {
            case let (.success(entries), .success(cells)):
                #expect(cells.map { $0.withKey { Array($0) } } == entries.map(\.key), "round \(round), byte \(at)")
                #expect(cells.map(\.version) == entries.map(\.version), "round \(round), byte \(at)")
                #expect(cells.map(\.cellBytes) == entries.map(\.cellBytes), "round \(round), byte \(at)")
            case (.failure, .failure):
                refused += 1
            default:
                Issue.record("round \(round), byte \(at): decodeLeaf \(decoded), storedCells \(stored)")
            }
        }
        #expect(refused > 300, "the changed bytes should break many leaves: \(refused) of 3,000")
    }
}
