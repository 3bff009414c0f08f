import Foundation
import StrataCodec
import StrataFileIO
import StrataWAL
import Testing
@testable import StrataEngine

/// Values too large for a leaf, stored in runs of consecutive pages (format 5,
/// OverflowRun.swift): read where they lie in the mapping, freed and reused whole, read
/// beside the chains an older build wrote, and a damaged run is a corrupt page naming it.
@Suite struct OverflowRunTests {
    private let pageBytes = 4_096

    private func temporaryStore() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("strata-runs-\(UUID().uuidString)").path
    }

    /// A store's directory and file system: a temporary directory on the real one ("mapped"
    /// and "unmapped", whose options read the data file with pread: `options(kind)`), or
    /// /db on a simulated one (read with pread).
    private func place(_ kind: String) -> (path: String, fileSystem: any FileSystem) {
        kind == "cached" ? ("/db", SimulatedFileSystem()) : (temporaryStore(), POSIXFileSystem())
    }

    private func options(_ kind: String) -> EngineOptions {
        var options = EngineOptions()
        options.mapsDataFile = kind != "unmapped"
        return options
    }

    /// `place(kind)`, and a generator seeded with `seed` (printed).
    private func start(_ kind: String, seed: UInt64) -> (path: String, fileSystem: any FileSystem, random: SplitMix64) {
        print("seed \(seed)")
        let (path, fileSystem) = place(kind)
        return (path, fileSystem, SplitMix64(seed: seed))
    }

    private func remove(_ path: String, _ kind: String) {
        if kind != "cached" { try? FileManager.default.removeItem(atPath: path) }
    }

    private func randomValue(_ size: Int, _ random: inout SplitMix64) -> [UInt8] {
        (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    /// Commits `values` random values of `bytes` bytes under the keys big-0, big-1, …,
    /// closes `engine`, and returns them.
    private func commitAndClose(_ engine: StorageEngine, values: Int, bytes: Int,
                                _ random: inout SplitMix64) throws -> [[UInt8]: [UInt8]] {
        var model: [[UInt8]: [UInt8]] = [:]
        var batch = WALBatch()
        for index in 0..<values {
            let key = Array("big-\(index)".utf8)
            model[key] = randomValue(bytes, &random)
            batch.put(key, model[key]!)
        }
        try engine.commit(batch)
        try engine.close()
        return model
    }

    /// The data file's bytes, changed by `body` when given.
    @discardableResult
    private func dataFile(_ path: String, _ fileSystem: any FileSystem, _ body: ((inout [UInt8]) -> Void)? = nil) throws -> [UInt8] {
        if let simulated = fileSystem as? SimulatedFileSystem {
            if let body { _ = simulated.modify(path + "/data", body) }
            return try #require(simulated.contents(of: path + "/data"))
        }
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/data")))
        if let body {
            body(&bytes)
            try Data(bytes).write(to: URL(fileURLWithPath: path + "/data"))
        }
        return bytes
    }

    /// The page where `value`'s run starts in a data file's image (its bytes begin a page).
    private func runStart(of value: [UInt8], in image: [UInt8]) -> Int? {
        (2..<(image.count / pageBytes)).first { index in
            image[(index * pageBytes)..<(index * pageBytes + 64)].elementsEqual(value.prefix(64))
        }
    }

    /// The data file's leaf holding `key`, rewritten with `change` applied to its entries
    /// (checksummed anew, as a crafted file would be).
    private func forgeLeaf(_ image: inout [UInt8], holding key: [UInt8], _ change: (inout LeafEntry) -> Void) throws {
        for index in 2..<(image.count / pageBytes) where image[index * pageBytes + 4] == PageType.leaf.rawValue {
            let page = Array(image[(index * pageBytes)..<((index + 1) * pageBytes)])
            let count = Int(page[6]) | Int(page[7]) << 8
            var entries = try PageCodec.decodeLeaf(page, count: count)
            guard let position = entries.firstIndex(where: { $0.key == key }) else { continue }
            change(&entries[position])
            let generation = page[16..<24].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let forged = PageCodec.encodeLeaf(entries[...], id: PageID(UInt64(index)), generation: generation, pageBytes: pageBytes)
            image.replaceSubrange((index * pageBytes)..<((index + 1) * pageBytes), with: forged)
            return
        }
        Issue.record("no leaf holds the key")
    }

    /// Values from past what a leaf holds to a mebibyte are stored in runs of the pages
    /// their bytes take (a value of 4,096 bytes in one page of 4 KiB), read through the
    /// mapping without a copy (where the file is mapped), after a reopen too, and `verify`
    /// counts every page of every run.
    @Test(arguments: ["mapped", "unmapped", "cached"])
    func largeValuesAreReadWhereTheyLie(kind: String) throws {
        var (path, fileSystem, random) = start(kind, seed: 0x0E_5001)
        defer { remove(path, kind) }
        let sizes = [2_100, 4_096, 4_097, 20_000, 65_536, 1 << 20]
        var model: [[UInt8]: [UInt8]] = [:]
        var (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options(kind))
        var batch = WALBatch()
        for size in sizes {
            let key = Array("value-\(size)".utf8)
            model[key] = randomValue(size, &random)
            batch.put(key, model[key]!)
        }
        try engine.commit(batch)
        try engine.checkpoint()
        for reopen in [false, true] {
            if reopen {
                try engine.close()
                (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options(kind))
            }
            let snapshot = engine.snapshot()
            for (key, value) in model {
                let (equal, mapped) = try #require(try snapshot.withValue(forKey: key) { span in
                    span.withUnsafeBytes { bytes in (bytes.elementsEqual(value), engine.pageFile.maps(bytes.baseAddress!)) }
                })
                #expect(equal, "\(key.count)")
                #expect(mapped == (kind == "mapped"), "value of \(value.count) bytes read \(mapped ? "in place" : "from a copy")")
            }
            let report = engine.verify()
            #expect(report.isValid, "\(report)")
            #expect(report.overflowPages == sizes.reduce(0) { $0 + PageCodec.runPages(storing: $1, pageBytes: pageBytes) }, "\(report)")
        }
        try engine.close()
    }

    /// A run with a changed byte (in its value or in the zeros after it), whose cell names
    /// pages past the end of the file, or whose cell says it stores fewer bytes than the
    /// value (so an LZ4 block, which its bytes are not) is a corrupt page at the run's first
    /// page, on a read through the mapping or pread and in `verify`; every other value
    /// still reads.
    @Test(arguments: ["mapped", "cached"], ["value byte", "byte past the value", "past the end", "stored bytes"])
    func aDamagedRunIsACorruptPageNamingIt(kind: String, damage: String) throws {
        var (path, fileSystem, random) = start(kind, seed: 0x0E_5002)
        defer { remove(path, kind) }
        var (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem)
        let model = try commitAndClose(engine, values: 4, bytes: 20_000, &random)

        let damaged = Array("big-2".utf8)
        let image = try dataFile(path, fileSystem)
        let first = try #require(runStart(of: model[damaged]!, in: image))
        var offset = Int64(first * pageBytes)
        try dataFile(path, fileSystem) { image in
            switch damage {
            case "value byte": image[first * pageBytes + 2 * pageBytes + 100] ^= 0x40
            case "byte past the value": image[first * pageBytes + 20_000] = 1
            case "past the end":
                let pages = image.count / pageBytes
                offset = Int64((pages - 2) * pageBytes)
                try? forgeLeaf(&image, holding: damaged) { entry in
                    guard case var .overflow(value) = entry.payload else { return }
                    value.first = PageID(UInt64(pages - 2))
                    entry.payload = .overflow(value)
                }
            default:
                try? forgeLeaf(&image, holding: damaged) { entry in
                    guard case var .overflow(value) = entry.payload else { return }
                    value.run?.stored = 19_999
                    entry.payload = .overflow(value)
                }
            }
        }
        let reason = switch damage {
        case "past the end": "its overflow run of 5 pages runs past the end of the file"
        case "stored bytes": "its overflow run's LZ4 block does not expand to its 20000 bytes"
        default: "its overflow run's checksum does not match"
        }

        (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem)
        let snapshot = engine.snapshot()
        for (key, value) in model where key != damaged { #expect(try snapshot.get(key) == value) }
        #expect {
            _ = try snapshot.get(damaged)
        } throws: { error in
            guard case let EngineError.corruptPage(file, at, why) = error else { return false }
            return file == path + "/data" && at == offset && why.contains(reason)
        }
        let report = engine.verify()
        #expect(!report.isValid && report.problems.contains { $0.contains(reason) }, "\(report)")
        // Replacing the value frees its run from what its cell says, reading none of its
        // pages: a damaged run goes, and the store verifies again; a cell naming pages past
        // the end of the file is refused, not freed.
        try engine.commit(WALBatch([.put(key: damaged, value: [1])]))
        try engine.checkpointFreeingDamage(refused: damage == "past the end")
        if damage != "past the end" { #expect(try engine.snapshot().get(damaged) == [1]) }
        try engine.close(checkpoint: false)
    }

    /// A run cell that stores no byte, more bytes than its value has, or names a meta page
    /// as its first is a corrupt cell, before any page of the run is read.
    @Test(arguments: [(UInt32(0), UInt64(5)), (UInt32(5_001), UInt64(5)), (UInt32(5_000), UInt64(1))])
    func anImpossibleRunCellIsCorrupt(stored: UInt32, first: UInt64) throws {
        #expect(throws: PageDefect.self) {
            _ = try PageCodec.largeValue(PageCodec.runFlag, byteCount: 5_000, first: first, stored: stored, checksum: 0, cell: 0)
        }
        let valid = try PageCodec.largeValue(PageCodec.runFlag, byteCount: 5_000, first: 5, stored: 4_000, checksum: 7, cell: 0)
        #expect(valid.isCompressed && valid.runPages(pageBytes: pageBytes) == 1)
    }

    /// A store whose large values an older build wrote as chains (format 4) reads them
    /// through the mapping and pread alike; values rewritten since are runs, the chains
    /// they replaced are freed, and the store verifies.
    @Test(arguments: ["mapped", "cached"])
    func chainsAnOlderBuildWroteAreReadAndReplacedByRuns(kind: String) throws {
        var (path, fileSystem, random) = start(kind, seed: 0x0E_5003)
        defer { remove(path, kind) }
        var older = EngineOptions()
        older.writesOverflowChains = true
        var (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: older)
        var model = try commitAndClose(engine, values: 30, bytes: 4_096, &random)
        // Its meta pages say format 4, as that build's would.
        try dataFile(path, fileSystem) { image in
            for meta in [0, pageBytes] where image[(meta + 8)..<(meta + 16)].elementsEqual("STRATADB".utf8) {
                image.replaceSubrange((meta + 16)..<(meta + 18), with: [4, 0])
                let checksum = CRC32C.checksum(image[(meta + 4)..<(meta + pageBytes)])
                image.replaceSubrange(meta..<(meta + 4), with: withUnsafeBytes(of: checksum.littleEndian) { Array($0) })
            }
        }

        (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem)
        for (key, value) in model { #expect(try engine.snapshot().get(key) == value) }
        // A chain's pages carry 4,060 bytes each: two for each value.
        #expect(engine.verify().overflowPages == 60)
        var rewrite = WALBatch()
        for index in stride(from: 0, to: 30, by: 2) {
            let key = Array("big-\(index)".utf8)
            model[key] = randomValue(4_096, &random)
            rewrite.put(key, model[key]!)
        }
        try engine.commit(rewrite)
        try engine.checkpoint()
        for (key, value) in model { #expect(try engine.snapshot().get(key) == value) }
        let report = engine.verify()
        #expect(report.isValid, "\(report)")
        // 15 chains of two pages, 15 runs of one.
        #expect(report.overflowPages == 45, "\(report)")
        try engine.close()
    }

    /// Runs freed by overwrites are reused by the runs written after them: eight rounds
    /// that overwrite every value of 64 KiB leave the file within three times the pages
    /// the live values take (it would hold eight times that if no run were reused).
    @Test func runsFreedByOverwritesAreReused() throws {
        let seed: UInt64 = 0x0E_5004
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        for _ in 0..<8 {
            var batch = WALBatch()
            for index in 0..<20 { batch.put(Array("big-\(index)".utf8), randomValue(65_536, &random)) }
            try engine.commit(batch)
            try engine.checkpoint()
        }
        let report = engine.verify()
        #expect(report.isValid, "\(report)")
        let live = 20 * PageCodec.runPages(storing: 65_536, pageBytes: pageBytes)
        #expect(report.overflowPages == live)
        #expect(report.pageCount <= UInt64(3 * live), "\(report)")
        try engine.close()
    }

    /// Single pages come from the lowest free stretch; a run of several from the first free
    /// stretch long enough, else from the end of the file; what is left goes back highest
    /// first, each page once.
    @Test func theAllocatorTakesRunsFromTheFirstStretchLongEnough() throws {
        var allocator = PageAllocator(reusable: [14, 5, 6, 7, 10, 11, 12, 13, 20, 6].map { PageID($0) }, pageCount: 30)
        #expect(try allocator.allocate() == PageID(5))
        #expect(try allocator.allocateRun(4) == PageID(10))
        #expect(try allocator.allocateRun(2) == PageID(6))
        // A second run of four finds no stretch long enough before the end of the file.
        #expect(try allocator.allocateRun(4) == PageID(30))
        #expect(try allocator.allocateRun(3) == PageID(34))
        #expect(allocator.pageCount == 37)
        #expect(try allocator.allocate() == PageID(14))
        #expect(allocator.takeReusable() == [PageID(20)])
        #expect(try allocator.allocate() == PageID(37))
        #expect(allocator.allocated == [5, 10, 11, 12, 13, 6, 7, 30, 31, 32, 33, 34, 35, 36, 14, 37].map { PageID($0) })

        var left = PageAllocator(reusable: [9, 3, 4, 4].map { PageID($0) }, pageCount: 10)
        #expect(left.takeReusable() == [9, 4, 3].map { PageID($0) })
    }
}
