// Leaves stored LZ4-compressed (`EngineOptions.leafCompression`, FORMAT.md "Compressed
// leaves"): an expansion is the raw leaf it was made from; stores written with and without
// compression read each other's leaves; data that does not compress keeps leaves as full
// as without; a hostile compressed page is a corrupt page naming its offset, never a trap
// or a large allocation; a vacuuming close moves compressed leaves like any other.
import Foundation
@testable import StrataEngine
import StrataCodec
import StrataFileIO
import StrataWAL
import Testing

@Suite struct CompressedLeafTests {
    /// Values of `size` bytes, half random and half one repeated byte (half compress away).
    private func value(_ size: Int, _ random: inout SplitMix64, compressible: Bool = true) -> [UInt8] {
        var value = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        if compressible, size > 1 { value.replaceSubrange(size / 2..<size, with: repeatElement(value[0], count: size - size / 2)) }
        return value
    }

    /// An empty store at /db of a new simulated file system, and a generator seeded with
    /// `seed` (printed).
    private func freshStore(seed: UInt64, _ compression: LeafCompression,
                            chains: Bool = false) throws -> (SimulatedFileSystem, StorageEngine, SplitMix64) {
        print("seed \(seed)")
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(compression, chains: chains))
        return (fileSystem, engine, SplitMix64(seed: seed))
    }

    /// Options compressing as `compression`; with `chains`, large values are written as
    /// chains of pages, as format 4 wrote them.
    private func options(_ compression: LeafCompression, chains: Bool = false) -> EngineOptions {
        var options = EngineOptions()
        options.leafCompression = compression
        options.writesOverflowChains = chains
        return options
    }

    /// Fills /db with `count` keys of `size`-byte values in batches of 500, checkpoints,
    /// and returns the model.
    @discardableResult
    private func fill(_ engine: StorageEngine, count: Int, size: Int, random: inout SplitMix64,
                      compressible: Bool = true, keyOffset: Int = 0, keyStride: Int = 1,
                      checkpoint: Bool = true) throws -> [[UInt8]: [UInt8]] {
        var model: [[UInt8]: [UInt8]] = [:]
        for start in stride(from: 0, to: count, by: 500) {
            var batch = WALBatch()
            for index in start..<min(count, start + 500) {
                let key = Array(String(format: "key%010d", index * keyStride * 7 + keyOffset).utf8)
                let value = value(size, &random, compressible: compressible)
                batch.put(key, value)
                model[key] = value
            }
            try engine.commit(batch)
        }
        if checkpoint { try engine.checkpoint() }
        return model
    }

    private func expectHolds(_ engine: StorageEngine, _ model: [[UInt8]: [UInt8]], _ note: Comment) throws {
        let snapshot = engine.snapshot()
        for (key, value) in model { #expect(try snapshot.get(key) == value, note) }
        var keys: [[UInt8]] = []
        try snapshot.forEach(reverse: true) { key, _ in
            keys.append(key.withUnsafeBytes { Array($0) })
            return true
        }
        #expect(keys == model.keys.sorted { compareKeys($0, $1) > 0 }, note)
    }

    /// CompressedLeaf.C2: whatever the cells (inline values, tombstones, overflow
    /// references, keys of 1 to 300 bytes sharing prefixes or not) and the page size, the
    /// expansion of a compressed leaf is the raw leaf of its cells, slots and hints included
    /// (and a 64 KiB page's leaves, which no expansion could outgrow, stay raw).
    @Test(arguments: [4_096, 16_384, 65_536])
    func anExpansionIsTheRawLeafItWasMadeFrom(pageBytes: Int) throws {
        let seed = UInt64(0xC0_4000 + pageBytes)
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        var scratch: [UInt8] = []
        var compressed = 0
        for round in 0..<40 {
            var keys = Set<[UInt8]>()
            let prefix = [UInt8](repeating: 0x70, count: Int(random.next() % 40))
            while keys.count < (30 + Int(random.next() % 400)) * pageBytes / 4_096 {
                let length = 1 + Int(random.next() % (random.next() % 4 == 0 ? 300 : 12))
                keys.insert(prefix + (0..<length).map { _ in UInt8(truncatingIfNeeded: 0x61 + random.next() % 6) })
            }
            var entries: [LeafEntry] = []
            for key in keys.sorted(by: { compareKeys($0, $1) < 0 }) {
                let payload: Payload
                switch random.next() % 8 {
                case 0: payload = .tombstone
                case 1: payload = .overflow(.chain(first: PageID(2 + random.next() % 1_000), byteCount: 5_000))
                case 2:
                    let run = LargeValue.Run(stored: 1 + Int(random.next() % 5_000), checksum: UInt32(truncatingIfNeeded: random.next()))
                    payload = .overflow(LargeValue(first: PageID(2 + random.next() % 1_000), byteCount: 5_000, run: run))
                default: payload = .inline(value(Int(random.next() % 200), &random))
                }
                entries.append(LeafEntry(key: key, version: random.next() % 1_000_000, payload: payload))
            }
            // As many entries as fit the largest expansion.
            var total = 0
            entries = Array(entries.prefix { entry in
                total += entry.cellBytes
                return total <= PageCodec.maxExpandedCapacity(pageBytes: pageBytes)
            })
            // Fewer entries until they fit a page, as a checkpoint splits a leaf whose body does not.
            let id = PageID(2 + UInt64(round))
            var encoded: PageCodec.EncodedLeaf
            repeat {
                encoded = PageCodec.encodeLeafPage(cells: entries.map(CellToWrite.entry)[...], id: id, generation: 5,
                                                   pageBytes: pageBytes, compress: true, scratch: &scratch)
                if case .tooLarge = encoded { entries.removeLast(max(1, entries.count / 8)) }
            } while entries.count > 1 && { if case .tooLarge = encoded { true } else { false } }()
            let cells = entries.map(CellToWrite.entry)[...]
            guard case let .page(page, ratio) = encoded else { continue }
            #expect(page.count == pageBytes)
            let (type, count, _) = try PageCodec.verify(page, id: id, expected: .tree)
            #expect(type == .leaf && count == entries.count)
            guard ratio != nil else {
                #expect(page.withUnsafeBytes { !PageCodec.isCompressedLeaf($0) })
                continue
            }
            compressed += 1
            #expect(page.withUnsafeBytes { PageCodec.isPiecedLeaf($0) && $0[36] > 1 }, "round \(round): a leaf of pieces")
            // Each piece is cut before the cell that would take its cells past `pieceBytes`
            // (FORMAT.md): its stated cells and bytes are those of the entries it holds.
            var next = 0
            for piece in 0..<Int(page[36]) {
                let at = 40 + 6 * piece
                let (pieceCells, pieceBytes) = (Int(page[at]) | Int(page[at + 1]) << 8, Int(page[at + 2]) | Int(page[at + 3]) << 8)
                let held = entries[next..<(next + pieceCells)].reduce(0) { $0 + $1.cellBytes - PageCodec.hintedSlotBytes }
                #expect(held == pieceBytes && (pieceCells == 1 || pieceBytes <= PageCodec.pieceBytes), "round \(round) piece \(piece)")
                next += pieceCells
                if next < entries.count {
                    #expect(pieceBytes + entries[next].cellBytes - PageCodec.hintedSlotBytes > PageCodec.pieceBytes, "round \(round) piece \(piece) cut early")
                }
            }
            #expect(next == entries.count)
            let raw = PageCodec.encodeLeaf(cells: cells, id: id, generation: 5,
                                           pageBytes: PageCodec.hintedSlotsStart + cells.reduce(0) { $0 + $1.cellBytes }, elide: false)
            let expanded = try page.withUnsafeBytes { try PageCodec.expandLeaf($0, pageBytes: pageBytes) }
            #expect(expanded[4...] == raw[4...], "round \(round)")
            #expect(try PageCodec.decodeLeaf(expanded, count: count) == entries, "round \(round)")
            // A point read's piece finds every key, and no key the leaf lacks (CompressedLeaf.C3).
            try page.withUnsafeBytes { page in
                for entry in entries {
                    let absent = entry.key + [0]
                    for key in [entry.key, absent] {
                        let found = try key.withUnsafeBytes { key in
                            try PageCodec.withPieceCell(of: page, pageBytes: pageBytes, for: key) { $0?.entry(key: key) }
                        }
                        let expected = key == entry.key ? entry : entries.first { $0.key == absent }
                        #expect(found == expected, "round \(round): \(key)")
                    }
                }
                let below = try [UInt8]().withUnsafeBytes { key in
                    try PageCodec.withPieceCell(of: page, pageBytes: pageBytes, for: key) { $0 != nil }
                }
                #expect(!below, "round \(round): the empty key")
            }
        }
        // A 64 KiB page's cell offsets reach no further than the page: its leaves stay raw.
        #expect(pageBytes == 65_536 ? compressed == 0 : compressed > 10, "most rounds make a compressed leaf: \(compressed)")
    }

    /// An expansion past 32 KiB (a 16 KiB page of cells that compress well) is the raw leaf
    /// of its cells too, and a point read finds each key in its piece: the cells' offsets
    /// and the keys' places, which the rebuild of the slots keeps in 16 bits, use all of them.
    @Test func anExpansionPast32KiBIsTheRawLeafItWasMadeFrom() throws {
        let pageBytes = 16_384
        var entries: [LeafEntry] = []
        var total = 0
        while true {
            let index = entries.count
            let entry = LeafEntry(key: Array("key-\(100_000 + index)".utf8), version: UInt64(index),
                                  payload: .inline([UInt8](repeating: UInt8(index % 7), count: 200)))
            guard total + entry.cellBytes <= PageCodec.maxExpandedCapacity(pageBytes: pageBytes) else { break }
            total += entry.cellBytes
            entries.append(entry)
        }
        let cells = entries.map(CellToWrite.entry)[...]
        var scratch: [UInt8] = []
        let id = PageID(7)
        guard case let .page(page, ratio) = PageCodec.encodeLeafPage(cells: cells, id: id, generation: 5, pageBytes: pageBytes,
                                                                      compress: true, scratch: &scratch), ratio != nil else {
            Issue.record("\(entries.count) cells of repeated bytes do not make one compressed leaf")
            return
        }
        let expanded = try page.withUnsafeBytes { try PageCodec.expandLeaf($0, pageBytes: pageBytes) }
        #expect(expanded.count > 32_768, "an expansion of \(expanded.count) bytes")
        let raw = PageCodec.encodeLeaf(cells: cells, id: id, generation: 5,
                                       pageBytes: PageCodec.hintedSlotsStart + cells.reduce(0) { $0 + $1.cellBytes }, elide: false)
        // Compared first, so that a failure does not print 64 KiB twice.
        let sameAsRaw = expanded[4...] == raw[4...]
        #expect(sameAsRaw, "the expansion is not the raw leaf of its cells")
        try page.withUnsafeBytes { page in
            for entry in entries {
                let found = try entry.key.withUnsafeBytes { key in
                    try PageCodec.withPieceCell(of: page, pageBytes: pageBytes, for: key) { $0?.entry(key: key) }
                }
                #expect(found == entry)
            }
        }
    }

    /// A piece whose cells do not compress (values of random bytes among compressible
    /// ones) is stored as a block all the same: the leaf is compressed when the whole saves
    /// an eighth, and it expands, and every key is found in its piece, as in any other.
    @Test func aPieceThatDoesNotCompressKeepsItsLeafCompressed() throws {
        let seed: UInt64 = 0xC0_4006
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        // The last 8 keys (the last piece's cells, and more) are random bytes after a "z",
        // with values of random bytes: nothing in them repeats for LZ4 to find.
        let entries = (0..<40).map { index in
            let size = 110
            guard index >= 32 else {
                return LeafEntry(key: Array(String(format: "key%05d", index).utf8), version: 7, payload: .inline(value(size, &random)))
            }
            let key = [UInt8(ascii: "z")] + (0..<15).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            return LeafEntry(key: key, version: 7, payload: .inline((0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }))
        }.sorted { compareKeys($0.key, $1.key) < 0 }
        var scratch: [UInt8] = []
        let cells = entries.map(CellToWrite.entry)[...]
        guard case let .page(page, ratio) = PageCodec.encodeLeafPage(cells: cells, id: PageID(2), generation: 1, pageBytes: 4_096,
                                                                     compress: true, scratch: &scratch) else {
            Issue.record("the leaf did not fit a page")
            return
        }
        #expect(ratio != nil && page.withUnsafeBytes { PageCodec.isPiecedLeaf($0) }, "compressed in pieces")
        // The last piece's block: the last entry, after every block before it.
        let pieces = Int(page[36])
        let last = 40 + 6 * (pieces - 1)
        let (lastBytes, lastBlock) = (Int(page[last + 2]) | Int(page[last + 3]) << 8, Int(page[last + 4]) | Int(page[last + 5]) << 8)
        #expect(lastBlock >= lastBytes, "the last piece, random bytes, is a block no smaller than its \(lastBytes) bytes: \(lastBlock)")
        let expanded = try page.withUnsafeBytes { try PageCodec.expandLeaf($0, pageBytes: 4_096) }
        #expect(try PageCodec.decodeLeaf(expanded, count: entries.count) == entries)
        try page.withUnsafeBytes { page in
            for entry in entries {
                let found = try entry.key.withUnsafeBytes { key in
                    try PageCodec.withPieceCell(of: page, pageBytes: 4_096, for: key) { $0?.entry(key: key) }
                }
                #expect(found == entry)
            }
        }
    }

    /// A closed store of 3,000 keys of 100-byte values half one repeated byte, its leaves
    /// compressed: in a new temporary directory of the real file system (read through a
    /// mapping), which the caller removes, or at /db of a simulated one; its model, and the
    /// generator (seeded with `seed`, printed) after the fill.
    private func filledCompressedStore(seed: UInt64, mapped: Bool, count: Int = 3_000) throws
        -> (path: String, fileSystem: any FileSystem, model: [[UInt8]: [UInt8]], random: SplitMix64) {
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let (path, fileSystem): (String, any FileSystem) = mapped
            ? (FileManager.default.temporaryDirectory.appendingPathComponent("strata-compressed-\(UUID().uuidString)").path, POSIXFileSystem())
            : ("/db", SimulatedFileSystem())
        let (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options(.lz4))
        let model = try fill(engine, count: count, size: 100, random: &random)
        try engine.close()
        return (path, fileSystem, model, random)
    }

    /// The byte 5 of every leaf the store's tree reaches, read from the data file's bytes.
    private func leafForms(_ engine: StorageEngine, file: [UInt8]) throws -> [UInt8] {
        let tree = engine.snapshot().state.tree
        var forms: [UInt8] = []
        var stack = tree.root == .none ? [] : [tree.root]
        while let id = stack.popLast() {
            switch try engine.pageFile.nodeAndForm(id).node {
            case .leaf: forms.append(file[Int(id.rawValue) * engine.pageFile.pageBytes + PageCodec.leafFormatOffset])
            case let .branch(entries): stack += entries.map(\.child)
            }
        }
        return forms
    }

    /// A store whose compressed leaves are single blocks, as builds of formats 4 to 6 wrote
    /// them, reads every key (mapped, where a point read falls back to the whole leaf's
    /// expansion, and through the cache) and verifies; a checkpoint that rewrites its keys
    /// writes its leaves in pieces (FORMAT.md, "Format versions").
    @Test(arguments: [false, true])
    func leavesOfOneBlockReadAndAreRewrittenInPieces(mapped: Bool) throws {
        var (path, fileSystem, model, random) = try filledCompressedStore(seed: 0xC0_4007, mapped: mapped)
        defer { if mapped { try? FileManager.default.removeItem(atPath: path) } }
        // Every leaf in pieces becomes the same leaf as one block.
        let handle = try fileSystem.open(path + "/data", options: [.write])
        var image = try handle.read(count: Int(handle.size()), at: 0)
        let pageBytes = 4_096
        var scratch: [UInt8] = []
        var rewritten = 0
        for index in 2..<(image.count / pageBytes) {
            let offset = index * pageBytes
            let page = Array(image[offset..<(offset + pageBytes)])
            guard let (type, count, _) = try? PageCodec.verify(page, id: PageID(UInt64(index)), expected: .tree), type == .leaf,
                  page.withUnsafeBytes({ PageCodec.isPiecedLeaf($0) }) else { continue }
            let entries = try page.withUnsafeBytes { try PageCodec.decodeLeaf(PageCodec.expandLeaf($0, pageBytes: pageBytes), count: count) }
            let generation = page.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 16, as: UInt64.self) }
            guard case let .page(single, _) = PageCodec.encodeLeafPage(cells: entries.map(CellToWrite.entry)[...], id: PageID(UInt64(index)),
                                                                       generation: UInt64(littleEndian: generation), pageBytes: pageBytes,
                                                                       compress: true, inPieces: false, scratch: &scratch),
                  single[PageCodec.leafFormatOffset] == PageCodec.compressedLeafFormat else { continue }
            image.replaceSubrange(offset..<(offset + pageBytes), with: single)
            rewritten += 1
        }
        try handle.write(image, at: 0)
        try handle.close()
        #expect(rewritten > 10, "leaves of one block: \(rewritten)")

        var (reopened, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options(.lz4))
        #expect((reopened.pageFile.mappingBase != nil) == mapped)
        #expect(try leafForms(reopened, file: image).filter { $0 == PageCodec.compressedLeafFormat }.count == rewritten)
        try expectHolds(reopened, model, "leaves of one block")
        var report = reopened.verify()
        #expect(report.isValid && report.compressedLeafPages >= rewritten, "\(report)")
        // Every key written again: the checkpoint rewrites every leaf, in pieces.
        var batch = WALBatch()
        for key in model.keys {
            let value = value(100, &random)
            batch.put(key, value)
            model[key] = value
        }
        try reopened.commit(batch)
        try reopened.checkpoint()
        let after = try fileSystem.open(path + "/data", options: [.write])
        let file = try after.read(count: Int(after.size()), at: 0)
        try after.close()
        let forms = try leafForms(reopened, file: file)
        #expect(!forms.contains(PageCodec.compressedLeafFormat) && forms.filter { $0 == PageCodec.piecedLeafFormat }.count > 10, "\(forms)")
        try expectHolds(reopened, model, "rewritten in pieces")
        report = reopened.verify()
        #expect(report.isValid, "\(report)")
        try reopened.close()
        (reopened, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options(.lz4))
        try expectHolds(reopened, model, "reopened")
        try reopened.close()
    }

    /// Point reads of compressed leaves in the mapped file put nothing in the page cache
    /// (each expands its piece for the read alone); a scan, which expands whole leaves,
    /// keeps them there (up to a quarter of the cache, which holds this store whole:
    /// EngineOptions.leafCompression).
    @Test func mappedPointReadsLeaveThePageCacheEmpty() throws {
        let (directory, fileSystem, model, _) = try filledCompressedStore(seed: 0xC0_4008, mapped: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (reopened, _) = try StorageEngine.open(path: directory, fileSystem: fileSystem, options: options(.lz4))
        #expect(reopened.pageFile.mappingBase != nil && reopened.verify().compressedLeafPages > 10)
        let snapshot = reopened.snapshot()
        let before = reopened.pageFile.cache.count
        for (key, value) in model { #expect(try snapshot.get(key) == value) }
        #expect(reopened.pageFile.cache.count == before, "point reads cached \(reopened.pageFile.cache.count - before) pages")
        try snapshot.forEach { _, _ in true }
        #expect(reopened.pageFile.cache.count > before, "a scan keeps the leaves it expands")
        try reopened.close()
    }

    /// A walk holds its leaves through the page cache up to a quarter of it, and the rest
    /// beside it: with a cache of 1 MiB, a scan of the whole store, either way and each
    /// from an empty cache, reads every pair in order and leaves about a quarter of the
    /// cache taken by its leaves (and the branches it descended), mapped or not, and the
    /// same scan again finds them there and adds nothing; with the default cache every
    /// leaf stays cached. A count, which steps through leaves too, agrees
    /// (PageFile.holdPage).
    @Test(arguments: [true, false]) func aLongWalkHoldsItsLeavesBesideThePageCache(mapped: Bool) throws {
        let (path, fileSystem, model, _) = try filledCompressedStore(seed: 0xC0_4010, mapped: mapped, count: 12_000)
        defer { if mapped { try? FileManager.default.removeItem(atPath: path) } }
        let ascending = model.keys.sorted { compareKeys($0, $1) < 0 }
        for cacheBytes in [1 << 20, EngineOptions().cacheBytes] {
            for reverse in [false, true] {
                var options = options(.lz4)
                options.cacheBytes = cacheBytes
                let (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options)
                #expect((engine.pageFile.mappingBase != nil) == mapped)
                let report = engine.verify()
                let cache = engine.pageFile.cache
                #expect(report.isValid && report.compressedLeafPages > 100 && cache.count == 0, "\(report)")
                for pass in 0..<2 {
                    let (before, bytesBefore) = (cache.count, cache.byteCount)
                    var keys: [[UInt8]] = []
                    var matched = 0
                    try engine.snapshot().forEach(reverse: reverse) { key, value in
                        let key = key.withUnsafeBytes { Array($0) }
                        if value.withUnsafeBytes({ Array($0) }) == model[key] { matched += 1 }
                        keys.append(key)
                        return true
                    }
                    let note: Comment = "cache \(cacheBytes), reverse \(reverse), pass \(pass)"
                    #expect(keys == (reverse ? ascending.reversed() : ascending) && matched == model.count,
                            "\(note): \(keys.count) keys, \(matched) values match")
                    let (added, addedBytes) = (cache.count - before, cache.byteCount - bytesBefore)
                    if pass == 1 {
                        // The walk's first leaves are found where the last walk left them.
                        #expect(added == 0, "\(note): the walk cached \(added) more pages")
                    } else if cacheBytes < EngineOptions().cacheBytes {
                        // A quarter, plus the seek's leaf (not counted) and the step that
                        // reached it, and the branches read through the cache where the
                        // file is not mapped.
                        let bound = cacheBytes / 4 + 2 * PageCodec.maxExpandedLeafBytes(pageBytes: engine.pageFile.pageBytes)
                            + (mapped ? 0 : report.branchPages * engine.pageFile.pageBytes)
                        #expect(addedBytes >= cacheBytes / 4 && addedBytes <= bound,
                                "\(note): the walk cached \(addedBytes) bytes, \(added) pages of \(report.leafPages) leaves")
                    } else {
                        // Where the file is mapped, a raw leaf is read where it lies.
                        let leaves = mapped ? report.compressedLeafPages : report.leafPages
                        #expect(added >= leaves, "\(note): the walk cached \(added) pages of \(leaves) leaves")
                    }
                }
                #expect(try engine.snapshot().count() == model.count)
                try engine.close()
            }
        }
    }

    /// A leaf a walk holds beside the page cache is checked as any leaf read: the last
    /// compressed leaf of an unmapped store, its stated cell bytes past what a leaf holds
    /// (its checksum made to match), stops a forward scan with 1 MiB of cache, which
    /// reaches it past the quarter, with `corruptPage` naming the file and the leaf's
    /// offset; the keys of every other leaf still read (PageFile.holdPage).
    @Test func aDamagedLeafHeldBesideThePageCacheIsReported() throws {
        let (path, fileSystem, model, _) = try filledCompressedStore(seed: 0xC0_4011, mapped: false, count: 12_000)
        let simulated = try #require(fileSystem as? SimulatedFileSystem)
        var options = options(.lz4)
        options.cacheBytes = 1 << 20
        var (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options)
        // The last leaf in key order compressed in pieces (a raw leaf may end the tree),
        // which a forward scan reaches past the quarter.
        let tree = engine.snapshot().state.tree
        try #require(tree.height >= 2, "a tree of one leaf")
        var parent = tree.root
        for _ in 2..<tree.height {
            guard case let .branch(entries) = try engine.pageFile.node(parent) else { Issue.record("a leaf above the bottom"); return }
            parent = try #require(entries.last).child
        }
        guard case let .branch(children) = try engine.pageFile.node(parent) else { Issue.record("no branch above the leaves"); return }
        let pageBytes = engine.pageFile.pageBytes
        let image = try #require(simulated.contents(of: path + "/data"))
        let damaged = try #require(children.reversed().map(\.child).first { id in
            image[(Int(id.rawValue) * pageBytes)...].withUnsafeBytes { PageCodec.isPiecedLeaf(UnsafeRawBufferPointer(rebasing: $0[..<pageBytes])) }
        })
        guard case let .leaf(entries) = try engine.pageFile.node(damaged), !entries.isEmpty else {
            Issue.record("no leaf with keys at the bottom")
            return
        }
        let leafKeys = Set(entries.map(\.key))
        let before = model.keys.filter { compareKeys($0, entries[0].key) < 0 }.count
        try engine.close(checkpoint: false)
        let offset = Int(damaged.rawValue) * pageBytes
        #expect(simulated.modify(path + "/data") { image in
            var page = Array(image[offset..<(offset + pageBytes)])
            page.replaceSubrange(PageHeader.bytes..<(PageHeader.bytes + 4), with: [0xFF, 0xFF, 0xFF, 0x7F])
            PageCodec.seal(&page)
            image.replaceSubrange(offset..<(offset + pageBytes), with: page)
        })
        (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options)
        var scanned = 0
        do {
            try engine.snapshot().forEach { _, _ in
                scanned += 1
                return true
            }
            Issue.record("the scan read \(scanned) keys past the damaged leaf")
        } catch let EngineError.corruptPage(damaged, at, reason) {
            #expect(damaged == path + "/data" && at == Int64(offset), "\(damaged) at \(at): \(reason)")
        }
        #expect(scanned == before && before > model.count / 2, "\(scanned) keys before the damaged leaf, \(before) expected")
        #expect(engine.pageFile.cache.byteCount <= options.cacheBytes / 2, "\(engine.pageFile.cache.byteCount) bytes cached")
        let snapshot = engine.snapshot()
        for (key, value) in model where !leafKeys.contains(key) { #expect(try snapshot.get(key) == value) }
        try engine.close(checkpoint: false)
    }

    /// A store written raw reads after a reopen with compression on, and the leaves its
    /// checkpoints rewrite come out compressed; a reopen with compression off reads them
    /// and writes raw leaves again. Every step verifies and holds the model.
    @Test func storesWrittenEitherWayReadEachOthersLeaves() throws {
        let (fileSystem, opened, seeded) = try freshStore(seed: 0xC0_4001, .none)
        var (engine, random) = (opened, seeded)
        var model = try fill(engine, count: 6_000, size: 100, random: &random)
        var report = engine.verify()
        #expect(report.isValid && report.compressedLeafPages == 0, "\(report)")
        let rawLeaves = report.leafPages
        try engine.close()

        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(.lz4))
        try expectHolds(engine, model, "raw leaves read with compression on")
        // Three new keys for every four, in three checkpoints: every leaf outgrows its page
        // (a fourth would take its cells past what one compressed page holds: it would split).
        for round in 0..<3 {
            model.merge(try fill(engine, count: 1_500, size: 100, random: &random, keyOffset: 1 + round * 7, keyStride: 4)) { $1 }
        }
        report = engine.verify()
        #expect(report.isValid, "\(report)")
        #expect(report.compressedLeafPages * 10 > report.leafPages * 9, "leaves that outgrew a page are compressed: \(report)")
        #expect(report.leafPages * 10 < rawLeaves * 12, "1.75 times the keys in fewer than 1.2 times the leaves: \(report) against \(rawLeaves)")
        try expectHolds(engine, model, "compressed")
        try engine.close()

        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(.none))
        try expectHolds(engine, model, "compressed leaves read with compression off")
        var batch = WALBatch()
        for key in model.keys.sorted(by: { compareKeys($0, $1) < 0 }).prefix(3_000) {
            let value = value(90, &random)
            batch.put(key, value)
            model[key] = value
        }
        try engine.commit(batch)
        try engine.checkpoint()
        report = engine.verify()
        #expect(report.isValid && report.compressedLeafPages > 0 && report.compressedLeafPages < report.leafPages, "\(report)")
        try expectHolds(engine, model, "mixed")
        try engine.close()
    }

    /// Values that do not compress: leaves stay raw and as full as without compression
    /// (a compression that fails splits a leaf by its block's size, not into slivers).
    @Test func incompressibleValuesKeepLeavesAsFullAsRaw() throws {
        let seed: UInt64 = 0xC0_4002
        print("seed \(seed)")
        var leaves: [LeafCompression: Int] = [:]
        for compression in [LeafCompression.none, .lz4] {
            var random = SplitMix64(seed: seed)
            let fileSystem = SimulatedFileSystem()
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(compression))
            let model = try fill(engine, count: 8_000, size: 100, random: &random, compressible: false)
            // Random updates among the keys split leaves as a B+tree's do.
            var batch = WALBatch()
            for key in model.keys.shuffled(using: &random).prefix(2_000) { batch.put(key + [0x21], value(100, &random, compressible: false)) }
            try engine.commit(batch)
            try engine.checkpoint()
            let report = engine.verify()
            #expect(report.isValid && report.compressedLeafPages * 20 < report.leafPages, "\(compression): \(report)")
            leaves[compression] = report.leafPages
            try engine.close()
        }
        let raw = try #require(leaves[.none])
        let compressed = try #require(leaves[.lz4])
        #expect(compressed * 10 <= raw * 11, "\(compressed) leaves with compression on, \(raw) without")
    }

    /// Keys and values of random bytes, which LZ4 cannot shrink: no leaf is stored
    /// compressed (a block no smaller than its cells is never written as one), and every
    /// key reads back after checkpoints, a reopen and `verify`.
    @Test func cellsThatDoNotCompressAreWrittenRaw() throws {
        let (fileSystem, opened, seeded) = try freshStore(seed: 0xC0_4005, .lz4)
        var (engine, random) = (opened, seeded)
        var model: [[UInt8]: [UInt8]] = [:]
        for _ in 0..<6 {
            var batch = WALBatch()
            for _ in 0..<1_500 {
                let key = (0..<(8 + Int(random.next() % 24))).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                let value = value(Int(random.next() % 300), &random, compressible: false)
                batch.put(key, value)
                model[key] = value
            }
            try engine.commit(batch)
            try engine.checkpoint()
        }
        try engine.close()
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(.lz4))
        let report = engine.verify()
        #expect(report.isValid && report.compressedLeafPages == 0, "\(report)")
        try expectHolds(engine, model, "random keys and values")
        try engine.close()
    }

    /// Values too large for a leaf (3 to 20 KB) are stored as LZ4 blocks in shorter overflow
    /// runs when they compress, and raw when they do not; every one reads back, through a
    /// reopen and `verify`.
    @Test func largeValuesTakeShorterRunsCompressed() throws {
        var overflowPages: [LeafCompression: Int] = [:]
        for compression in [LeafCompression.none, .lz4] {
            let (fileSystem, opened, seeded) = try freshStore(seed: 0xC0_4006, compression)
            var (engine, random) = (opened, seeded)
            var model: [[UInt8]: [UInt8]] = [:]
            var batch = WALBatch()
            for index in 0..<120 {
                let key = Array("big-\(index)".utf8)
                let value = value(3_000 + Int(random.next() % 17_000), &random, compressible: index % 10 != 0)
                batch.put(key, value)
                model[key] = value
            }
            try engine.commit(batch)
            try engine.close()
            (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(compression))
            let report = engine.verify()
            #expect(report.isValid, "\(report)")
            overflowPages[compression] = report.overflowPages
            try expectHolds(engine, model, "\(compression)")
            try engine.close()
        }
        let raw = try #require(overflowPages[.none])
        let compressed = try #require(overflowPages[.lz4])
        // Half of each value compresses away, but a run takes whole pages (a 3 KB value one either way).
        #expect(compressed * 10 < raw * 7, "\(compressed) overflow pages compressed, \(raw) raw")
    }

    /// A compressed chain (format 4) whose first page lost its mark, whose second page
    /// gained one, or whose last page links on into another chain is a corrupt page on
    /// read, in `verify` and when a checkpoint would free it; no read returns other bytes
    /// than were put.
    @Test(arguments: ["first unmarked", "second marked", "last links on"])
    func aForgedCompressedChainIsACorruptPage(damage: String) throws {
        let (fileSystem, opened, seeded) = try freshStore(seed: 0xC0_4007, .lz4, chains: true)
        var (engine, random) = (opened, seeded)
        var model: [[UInt8]: [UInt8]] = [:]
        var batch = WALBatch()
        for index in 0..<20 {
            let key = Array("big-\(index)".utf8)
            let value = value(20_000, &random)
            batch.put(key, value)
            model[key] = value
        }
        try engine.commit(batch)
        try engine.close()
        let pageBytes = 4_096
        let image = try #require(fileSystem.contents(of: "/db/data"))
        let first = try #require((2..<(image.count / pageBytes)).first { index in
            image[index * pageBytes + 4] == PageType.overflow.rawValue && image[index * pageBytes + 5] == PageCodec.compressedChain
        })
        func next(_ index: Int) -> Int { Int(image[index * pageBytes + 24]) | Int(image[index * pageBytes + 25]) << 8 }
        var target = damage == "first unmarked" ? first : next(first)
        if damage == "last links on" { while next(target) != 0 { target = next(target) } }
        try #require(target > 1)
        var page = Array(image[(target * pageBytes)..<((target + 1) * pageBytes)])
        switch damage {
        case "first unmarked": page[5] = 0
        case "second marked": page[5] = PageCodec.compressedChain
        default:
            // On into another value's chain: freeing this one must not free that one's pages.
            let other = try #require((2..<(image.count / pageBytes)).first { index in
                index != first && image[index * pageBytes + 4] == PageType.overflow.rawValue
                    && image[index * pageBytes + 5] == PageCodec.compressedChain
            })
            page.replaceSubrange(24..<32, with: withUnsafeBytes(of: UInt64(other).littleEndian) { Array($0) })
        }
        PageCodec.seal(&page)
        fileSystem.modify("/db/data") { $0.replaceSubrange((target * pageBytes)..<((target + 1) * pageBytes), with: page) }

        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(.lz4, chains: true))
        let snapshot = engine.snapshot()
        var corrupt = 0
        for (key, value) in model {
            do {
                #expect(try snapshot.get(key) == value)
            } catch EngineError.corruptPage(let path, _, _) where path == "/db/data" {
                corrupt += 1
            }
        }
        #expect(corrupt == 1)
        #expect(!engine.verify().isValid)
        // Replacing every value frees every chain: one that links on is refused, not
        // followed; the others are freed page for page, and the store verifies again.
        var overwrite = WALBatch()
        for key in model.keys { overwrite.put(key, [1]) }
        try engine.commit(overwrite)
        try engine.checkpointFreeingDamage(refused: damage == "last links on")
        try engine.close(checkpoint: false)
    }

    /// A relocation (a vacuuming close's move) by a writer that does not compress stops at
    /// a compressed leaf, which no page of its own holds, instead of splitting it; one that
    /// compresses moves it.
    @Test func aRelocationWithoutCompressionStopsAtACompressedLeaf() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/t")
        let pageFile = try PageFile(path: "/t/data", file: try fileSystem.open("/t/data", options: [.create, .write]),
                                    pageBytes: 4_096, cachePages: 64)
        var random = SplitMix64(seed: 0xC0_4008)
        print("seed \(0xC0_4008)")
        let memtable = Memtable()
        memtable.linkReplayed((0..<2_000).map { index in
            (Array(String(format: "key%010d", index).utf8), MemtableEntry(version: 1, value: value(100, &random)))
        })
        var iterator = memtable.entries(from: nil, reverse: false)
        var nodes: [MemtableNode] = []
        while let node = iterator.nextNode() { nodes.append(node) }
        var writer = TreeWriter(file: pageFile, generation: 1, purgeTombstonesThrough: 0,
                                allocator: PageAllocator(reusable: [], pageCount: 2), compressesLeaves: true)
        let tree = try withExtendedLifetime(memtable) { try writer.apply(nodes, to: .empty) }
        let pageCount = writer.allocator.pageCount
        for compresses in [false, true] {
            var mover = TreeWriter(file: pageFile, generation: 2, purgeTombstonesThrough: 0,
                                   allocator: PageAllocator(reusable: [], pageCount: pageCount), compressesLeaves: compresses)
            if compresses {
                #expect(try mover.relocate(tree.root, level: 1, height: tree.height, above: 2) != tree.root)
            } else {
                #expect(throws: RelocationStopped.self) { try mover.relocate(tree.root, level: 1, height: tree.height, above: 2) }
            }
        }
    }

    /// A vacuuming close moves compressed leaves to the front of the file and shrinks it;
    /// the store reopens whole.
    @Test func aVacuumingCloseMovesCompressedLeaves() throws {
        let (fileSystem, opened, seeded) = try freshStore(seed: 0xC0_4003, .lz4)
        var (engine, random) = (opened, seeded)
        var model: [[UInt8]: [UInt8]] = [:]
        for round in 0..<4 { model = try fill(engine, count: 5_000, size: 120, random: &random, checkpoint: round < 3) }
        let before = try fileSystem.open("/db/data", options: []).size()
        try engine.close()
        let after = try fileSystem.open("/db/data", options: []).size()
        #expect(after * 5 < before * 3, "the close gave pages back: \(before) → \(after) bytes")
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(.lz4))
        let report = engine.verify()
        #expect(report.isValid && report.compressedLeafPages > 0, "\(report)")
        try expectHolds(engine, model, "after the vacuum")
        try engine.close()
    }

    /// A compressed leaf whose lengths, block or cells were forged (its checksum made to
    /// match) is a corrupt page naming the data file and the page's offset, for a point
    /// read, a scan and `verify`, never a trap or a large allocation.
    @Test(arguments: ["cells length", "block length", "block bytes", "tail", "count", "flags", "key length 2^63",
                      "key length not shortest"])
    func aForgedCompressedLeafIsACorruptPageNamingItsOffset(damage: String) throws {
        let (fileSystem, engine, seeded) = try freshStore(seed: 0xC0_4004, .lz4)
        var random = seeded
        try fill(engine, count: 3_000, size: 100, random: &random)
        try engine.close()
        // The first compressed leaf of the file.
        let image = try #require(fileSystem.contents(of: "/db/data"))
        let pageBytes = 4_096
        let found = (2..<(image.count / pageBytes)).first { index in
            let page = Array(image[(index * pageBytes)..<((index + 1) * pageBytes)])
            guard let (type, _, _) = try? PageCodec.verify(page, id: PageID(UInt64(index)), expected: .tree) else { return false }
            return type == .leaf && page.withUnsafeBytes { PageCodec.isCompressedLeaf($0) }
        }
        let index = try #require(found)
        let offset = index * pageBytes
        // The leaf as one block, as format 4 wrote it (the pieces this build writes are
        // forged in the test after this one).
        let pieced = Array(image[offset..<(offset + pageBytes)])
        let entries = try pieced.withUnsafeBytes { try PageCodec.decodeLeaf(PageCodec.expandLeaf($0, pageBytes: pageBytes), count: Int($0[6]) | Int($0[7]) << 8) }
        var scratch: [UInt8] = []
        guard case .page(var page, _) = PageCodec.encodeLeafPage(cells: entries.map(CellToWrite.entry)[...], id: PageID(UInt64(index)),
                                                                  generation: pieced.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 16, as: UInt64.self) },
                                                                  pageBytes: pageBytes, compress: true, inPieces: false, scratch: &scratch),
              page[5] == PageCodec.compressedLeafFormat else {
            Issue.record("the leaf does not compress into one block")
            return
        }
        let blockBytes = Int(page[36]) | Int(page[37]) << 8
        switch damage {
        case "cells length": page.replaceSubrange(32..<36, with: [0xFF, 0xFF, 0xFF, 0x7F])
        case "block length": page.replaceSubrange(36..<40, with: [0xFF, 0x0F, 0, 0])
        case "block bytes": for at in 40..<(40 + blockBytes) where at % 3 == 0 { page[at] ^= 0x5A }
        case "tail": page[pageBytes - 1] = 1
        case "count": page[6] &+= 1
        default:
            // The last key's cell (the block's first) gets flags no cell has, and the cells
            // are compressed again: a block that expands to the right length.
            var expanded = try page.withUnsafeBytes { try PageCodec.expandLeaf($0, pageBytes: pageBytes) }
            let count = Int(page[6]) | Int(page[7]) << 8
            let cellsStart = PageCodec.hintedSlotsStart + PageCodec.hintedSlotBytes * count
            if damage == "flags" {
                var at = cellsStart + 1 + Int(expanded[cellsStart])
                while expanded[at] & 0x80 != 0 { at += 1 }
                expanded[at + 1] = 9
            } else {
                if damage == "key length not shortest" {
                    // The first cell's key length, in two bytes where one holds it.
                    expanded.replaceSubrange(cellsStart..<(cellsStart + 1), with: [expanded[cellsStart] | 0x80, 0x00])
                } else {
                    // The first cell's key length becomes 2^63, in ten bytes (a varint's most).
                    expanded.replaceSubrange(cellsStart..<(cellsStart + 1), with: [UInt8](repeating: 0x80, count: 9) + [0x01])
                }
                let cellBytes = UInt32(expanded.count - cellsStart)
                page.replaceSubrange(32..<36, with: withUnsafeBytes(of: cellBytes.littleEndian) { Array($0) })
            }
            var block = [UInt8](repeating: 0, count: pageBytes)
            let written = expanded.withUnsafeBytes { cells in
                block.withUnsafeMutableBytes { block in
                    LZ4Block.compress(UnsafeRawBufferPointer(rebasing: cells[cellsStart...]), into: block, acceleration: 1)
                }
            }
            let length = try #require(written)
            page.replaceSubrange(36..<40, with: [UInt8(length & 0xFF), UInt8(length >> 8), 0, 0])
            page.replaceSubrange(40..<pageBytes, with: block[..<length] + [UInt8](repeating: 0, count: pageBytes - 40 - length))
        }
        PageCodec.seal(&page)
        fileSystem.modify("/db/data") { $0.replaceSubrange(offset..<(offset + pageBytes), with: page) }

        let (reopened, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options(.lz4))
        func namesThePage(_ error: any Error) -> Bool {
            guard case let EngineError.corruptPage(path, at, _) = error else { return false }
            return path == "/db/data" && at == Int64(offset)
        }
        let snapshot = reopened.snapshot()
        #expect { try snapshot.forEach { _, _ in true } } throws: { namesThePage($0) }
        let report = reopened.verify()
        #expect(!report.isValid && report.problems.contains { $0.contains("offset \(offset)") }, "\(report)")
        try reopened.close(checkpoint: false)
    }

    /// A compressed leaf in pieces whose directory, first keys or blocks were forged (its
    /// checksum made to match) is a corrupt page naming the data file and the page's offset
    /// for a scan and `verify`; a point read, mapped or through the cache, gives each key's
    /// value or that error (never another answer for the keys of an intact piece, a trap or
    /// a large allocation), and the error wherever the damage lies on its path.
    @Test(arguments: ["pieces", "blocks start", "piece bytes", "piece block", "first key", "first key length", "tail"], [false, true])
    func aForgedPiecedLeafIsACorruptPageNamingItsOffset(damage: String, mapped: Bool) throws {
        let (path, fileSystem, model, _) = try filledCompressedStore(seed: 0xC0_4005, mapped: mapped)
        defer { if mapped { try? FileManager.default.removeItem(atPath: path) } }
        let file = path + "/data"
        let handle = try fileSystem.open(file, options: [.write])
        var image = try handle.read(count: Int(handle.size()), at: 0)
        let pageBytes = 4_096
        let found = (2..<(image.count / pageBytes)).first { index in
            let page = Array(image[(index * pageBytes)..<((index + 1) * pageBytes)])
            guard let (type, _, _) = try? PageCodec.verify(page, id: PageID(UInt64(index)), expected: .tree) else { return false }
            return type == .leaf && page.withUnsafeBytes { PageCodec.isPiecedLeaf($0) } && page[36] >= 3
        }
        let index = try #require(found, "a leaf of three pieces or more")
        let offset = index * pageBytes
        var page = Array(image[offset..<(offset + pageBytes)])
        let keys = try page.withUnsafeBytes { page in
            try PageCodec.decodeLeaf(PageCodec.expandLeaf(page, pageBytes: pageBytes), count: Int(page[6]) | Int(page[7]) << 8).map(\.key)
        }
        let pieces = Int(page[36])
        let blocksStart = Int(page[38]) | Int(page[39]) << 8
        let entriesEnd = 40 + 6 * pieces
        var blocks = 0
        for piece in 0..<pieces {
            let at = 40 + 6 * piece + 4
            blocks += Int(page[at]) | Int(page[at + 1]) << 8
        }
        // Whether every point read of the mapped leaf's keys meets the damage (the rest meet
        // it only in the piece it lies in, or not at all: the tail is the full check's).
        let everyRead: Bool
        switch damage {
        case "pieces":
            page[36] = 0
            everyRead = true
        case "blocks start":
            page.replaceSubrange(38..<40, with: [0xFF, 0xFF])
            everyRead = true
        case "piece bytes":
            page[40 + 2] &+= 1
            everyRead = false
        case "piece block":
            // The last piece's block ends one byte later, into the zeros after it.
            page[40 + 6 * (pieces - 1) + 4] &+= 1
            everyRead = false
        case "first key":
            // The second piece's stored first key (all of it stored: it shares 0 bytes), one
            // less in its last byte.
            let length = Int(page[entriesEnd + 1])
            page[entriesEnd + 1 + length] &-= 1
            everyRead = false
        case "first key length":
            // The second piece's key, the first stored, shares a byte with none before it:
            // every read walks the stored first keys from it.
            page[entriesEnd] = 1
            everyRead = true
        default:
            page[blocksStart + blocks] = 1
            everyRead = false
        }
        PageCodec.seal(&page)
        image.replaceSubrange(offset..<(offset + pageBytes), with: page)
        try handle.write(image, at: 0)
        try handle.close()

        let (reopened, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options(.lz4))
        #expect((reopened.pageFile.mappingBase != nil) == mapped)
        func namesThePage(_ error: any Error) -> Bool {
            guard case let EngineError.corruptPage(at, byte, _) = error else { return false }
            return at == file && byte == Int64(offset)
        }
        let snapshot = reopened.snapshot()
        var failed = 0
        for key in keys {
            do {
                #expect(try snapshot.get(key) == model[key], "\(damage): \(key)")
            } catch {
                #expect(namesThePage(error), "\(error)")
                failed += 1
            }
        }
        // Read through the cache, a leaf is expanded whole: every read meets every damage.
        let expected = everyRead || !mapped ? keys.count : damage == "tail" ? 0 : nil
        #expect(expected.map { failed == $0 } ?? (failed > 0 && failed < keys.count), "\(failed) of \(keys.count) reads failed")
        #expect { try snapshot.forEach { _, _ in true } } throws: { namesThePage($0) }
        let report = reopened.verify()
        #expect(!report.isValid && report.problems.contains { $0.contains("offset \(offset)") }, "\(report)")
        try reopened.close(checkpoint: false)
    }
}
