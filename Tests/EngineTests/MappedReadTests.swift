import Foundation
import StrataFileIO
import StrataWAL
import Testing
@_spi(EngineInlinable) @testable import StrataEngine

/// Reads in place: the data file mapped on the real file system (and read through the page
/// cache on the simulated one), `withValue` and `forEach` handing out borrowed bytes. Every
/// read path agrees with a model, a damaged page is an error naming it, and pages written
/// after the store opened are read through a grown mapping.
@Suite struct MappedReadTests {
    private func temporaryStore() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("strata-mapped-\(UUID().uuidString)").path
    }

    /// Where a test of `kind` keeps its store: "mapped", the real file system read through a
    /// mapping; "unmapped", the real file system read with pread through the page cache
    /// (`EngineOptions.mapsDataFile` false); "cached", the simulated one, which maps nothing.
    private struct Place {
        let path: String
        let fileSystem: any FileSystem
        let maps: Bool

        func options(_ base: EngineOptions = EngineOptions()) -> EngineOptions {
            var options = base
            options.mapsDataFile = maps
            return options
        }

        func remove() {
            if fileSystem is POSIXFileSystem { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    private func place(_ kind: String) -> Place {
        kind == "cached" ? Place(path: "/db", fileSystem: SimulatedFileSystem(), maps: true)
            : Place(path: temporaryStore(), fileSystem: POSIXFileSystem(), maps: kind == "mapped")
    }

    /// Small checkpoints, so the tree, the frozen memtable and the active one all hold keys.
    private var smallCheckpoints: EngineOptions {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 64 << 10
        return options
    }

    /// `snapshot` holds exactly `model`: each key read alone, and every pair in order.
    /// A batch of `count` puts of `valueBytes` random bytes, each under `key(index, &random)`
    /// (drawn before its value), recorded in `model`.
    private func randomBatch(_ count: Int, valueBytes: Int, random: inout SplitMix64, model: inout [[UInt8]: [UInt8]],
                             key: (Int, inout SplitMix64) -> [UInt8]) -> WALBatch {
        var batch = WALBatch()
        for index in 0..<count {
            let key = key(index, &random)
            let value = (0..<valueBytes).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            batch.put(key, value)
            model[key] = value
        }
        return batch
    }

    private func expectHolds(_ snapshot: Snapshot, _ model: [[UInt8]: [UInt8]]) throws {
        for (key, value) in model { #expect(try snapshot.get(key) == value) }
        var count = 0
        try snapshot.forEach { key, value in
            count += 1
            return key.withUnsafeBytes { model[Array($0)] } == value.withUnsafeBytes { Array($0) }
        }
        #expect(count == model.count)
    }

    /// Every pair `forEach` hands out in `range`, copied.
    private func walk(_ snapshot: Snapshot, _ range: KeyRange = KeyRange(), reverse: Bool = false,
                      limit: Int = .max) throws -> [([UInt8], [UInt8])] {
        var pairs: [([UInt8], [UInt8])] = []
        try snapshot.forEach(range, reverse: reverse) { key, value in
            pairs.append((key.withUnsafeBytes { Array($0) }, value.withUnsafeBytes { Array($0) }))
            return pairs.count < limit
        }
        return pairs
    }

    private func cursorPairs(_ snapshot: Snapshot, _ range: KeyRange, reverse: Bool) throws -> [([UInt8], [UInt8])] {
        var cursor = try snapshot.cursor(range, reverse: reverse)
        var pairs: [([UInt8], [UInt8])] = []
        while let pair = try cursor.next() { pairs.append(pair) }
        return pairs
    }

    /// With `compressed`, leaves are stored LZ4-compressed and values are half one repeated
    /// byte, so leaves that outgrow a page are: every read path takes their expansions.
    @Test(arguments: ["mapped", "unmapped", "cached"], [false, true])
    func everyReadPathAgreesWithAModel(kind: String, compressed: Bool) throws {
        let seed: UInt64 = 0x3A9_0001
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let place = place(kind)
        defer { place.remove() }
        var options = place.options(smallCheckpoints)
        if compressed { options.leafCompression = .lz4 }
        let (engine, _) = try StorageEngine.open(path: place.path, fileSystem: place.fileSystem, options: options)
        #expect((engine.pageFile.mappingBase != nil) == (kind == "mapped"))
        var model: [[UInt8]: [UInt8]] = [:]
        for round in 0..<12 {
            var batch = WALBatch()
            for _ in 0..<300 {
                let key = Array("k\(random.next() % 2_000)".utf8)
                if random.next() % 5 == 0 {
                    batch.delete(key)
                    model[key] = nil
                } else {
                    // Mostly small values; now and then one past half a page (overflow pages).
                    let size = random.next() % 20 == 0 ? 3_000 : Int(random.next() % 120)
                    var value = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                    if compressed { value.replaceSubrange(size / 2..<size, with: repeatElement(value.first ?? 0, count: size - size / 2)) }
                    batch.put(key, value)
                    model[key] = value
                }
            }
            try engine.commit(batch)
            if round % 4 == 3 { try engine.checkpoint() }

            let snapshot = engine.snapshot()
            let sorted = model.sorted { compareKeys($0.key, $1.key) < 0 }.map { ($0.key, $0.value) }
            for index in 0..<2_000 {
                let key = Array("k\(index)".utf8)
                let expected = model[key]
                #expect(try snapshot.get(key) == expected, "round \(round) key \(index)")
                #expect(try snapshot.withValue(forKey: key) { $0.withUnsafeBytes { Array($0) } } == expected)
                #expect(try snapshot.contains(key) == (expected != nil))
            }
            // An ordered reader answers as `withValue` does, from its finger or a descent:
            // in key order, in a shuffled order, and for keys the store never held.
            var keys = (0..<2_000).map { Array("k\($0)".utf8) } + (0..<50).map { Array("k\($0)x".utf8) } + [[], [0xFF]]
            keys.sort { compareKeys($0, $1) < 0 }
            for order in [keys, keys.shuffled(using: &random)] {
                var reader = snapshot.orderedReader()
                for key in order {
                    let found = try reader.withValue(forKey: key.span.bytes) { $0.withUnsafeBytes { Array($0) } }
                    #expect(found == model[key], "round \(round) ordered read of \(key)")
                }
            }
            // Batched reads answer as `withValue` does, in the batch's order, in batches of
            // sizes around the number of keys looked up side by side; a stop is a stop.
            let shuffled = keys.shuffled(using: &random)
            for size in [1, 7, Snapshot.batchLanes, Snapshot.batchLanes + 1, 100] {
                var batch = KeyBatch()
                for start in stride(from: 0, to: shuffled.count, by: size) {
                    let chunk = Array(shuffled[start..<min(start + size, shuffled.count)])
                    batch.removeAll()
                    for key in chunk { batch.append(key.span.bytes) }
                    #expect((0..<batch.count).map { Array(batch[$0]) } == chunk)
                    var answered = 0
                    try snapshot.withValues(forKeys: batch) { index, key, value in
                        #expect(index == answered)
                        #expect(Array(key) == chunk[index])
                        #expect(value?.withUnsafeBytes { Array($0) } == model[chunk[index]], "round \(round) batched read of \(chunk[index])")
                        answered += 1
                        return true
                    }
                    #expect(answered == chunk.count)
                }
                var answered = 0
                try snapshot.withValues(forKeys: batch) { _, _, _ in
                    answered += 1
                    return answered < 3
                }
                #expect(answered == min(3, batch.count))
            }
            let forward = try walk(snapshot)
            #expect(forward.map(\.0) == sorted.map(\.0) && forward.map(\.1) == sorted.map(\.1), "round \(round)")
            let backward = try walk(snapshot, reverse: true)
            #expect(backward.map(\.0) == sorted.reversed().map(\.0), "round \(round)")
            // Bounded ranges agree with the copying cursor, both ways, and a stop is a stop.
            for _ in 0..<10 {
                let bounds = [random.next() % 2_000, random.next() % 2_000].sorted().map { Array("k\($0)".utf8) }
                let range = KeyRange(from: bounds[0], to: bounds[1])
                for reverse in [false, true] {
                    let borrowed = try walk(snapshot, range, reverse: reverse)
                    let copied = try cursorPairs(snapshot, range, reverse: reverse)
                    #expect(borrowed.map(\.0) == copied.map(\.0) && borrowed.map(\.1) == copied.map(\.1))
                    let inModel = sorted.filter { range.contains($0.0) }
                    #expect(borrowed.map(\.0) == (reverse ? inModel.reversed().map(\.0) : inModel.map(\.0)))
                }
            }
            #expect(try walk(snapshot, limit: 7).count == min(7, model.count))
        }
        let report = engine.verify()
        #expect(report.isValid, "\(report)")
        // (Leaves whose cells fit a page stay raw, so only some are compressed here.)
        #expect(compressed ? report.compressedLeafPages > 0 : report.compressedLeafPages == 0, "\(report)")
        try engine.close()
    }

    /// Batches of keys in key order, as a query reads the records an index names, start
    /// each key's search in a branch from the child the key before took there
    /// (`TreePage.childIndex(for:from:)`): through a tree of three levels and more, with
    /// keys close together and far apart, repeated, absent, with steps back and with keys
    /// the memtable answers among them, every batch answers as `withValue` does.
    @Test(arguments: ["mapped", "unmapped", "cached"])
    func batchesOfKeysInOrderAnswerAsSingleReads(kind: String) throws {
        let seed: UInt64 = 0x3A9_0002
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let place = place(kind)
        defer { place.remove() }
        let (engine, _) = try StorageEngine.open(path: place.path, fileSystem: place.fileSystem, options: place.options(smallCheckpoints))
        // Keys that share a long prefix, as record keys do, and take a byte of their own
        // only at the end: hints tie in the upper branches. Their lengths, 11 to 37
        // bytes, take every way a branch's bound is copied.
        func key(_ number: Int) -> [UInt8] {
            Array("entity/\(number / 1_000)/\(String(repeating: "x", count: number / 1_000 % 26))".utf8)
                + [UInt8(number / 100 % 10), UInt8(number % 100)]
        }
        var model: [[UInt8]: [UInt8]] = [:]
        for start in stride(from: 0, to: 60_000, by: 5_000) {
            var batch = WALBatch()
            for number in start..<(start + 5_000) where number % 7 != 3 {
                let value = Array(repeating: UInt8(truncatingIfNeeded: number), count: 20 + number % 30)
                batch.put(key(number), value)
                model[key(number)] = value
            }
            try engine.commit(batch)
        }
        try engine.checkpoint()
        // A few keys rewritten after the checkpoint: the memtable answers them.
        var late = WALBatch()
        for number in stride(from: 11, to: 60_000, by: 997) {
            late.put(key(number), [1, 2, 3])
            model[key(number)] = [1, 2, 3]
        }
        try engine.commit(late)
        let height = engine.verify().treeHeight
        #expect(height >= 3, "the tree is \(height) high")
        let snapshot = engine.snapshot()
        var batches: [[Int]] = []
        for stride in [1, 7, 70, 700, 7_000] {
            batches.append(Array(Swift.stride(from: Int(random.next() % 50), to: 60_000, by: stride).prefix(200)))
        }
        for _ in 0..<40 {
            // Sorted random numbers, some repeated, now and then a step back.
            var numbers = (0..<Int(random.next() % 100 + 1)).map { _ in Int(random.next() % 61_000) }.sorted()
            if numbers.count > 4 { numbers.insert(numbers[1], at: numbers.count / 2) }
            batches.append(numbers)
        }
        batches.append(Array((0..<100).map { 59_999 - $0 * 13 }))   // descending throughout
        for numbers in batches {
            var batch = KeyBatch()
            for number in numbers { batch.append(key(number).span.bytes) }
            var answered = 0
            try snapshot.withValues(forKeys: batch) { index, found, value in
                #expect(Array(found) == key(numbers[index]))
                #expect(value?.withUnsafeBytes { Array($0) } == model[key(numbers[index])], "batched read of \(numbers[index])")
                answered += 1
                return true
            }
            #expect(answered == numbers.count)
        }
        try engine.close()
    }

    /// A snapshot kept past `close()` reads no page: it throws `EngineError.closed`, not a
    /// corrupt page. While it pins an older tree the close moves no page and cuts nothing
    /// (every key is overwritten three times first, so without it the close would give
    /// pages back); the store reopens whole.
    @Test(arguments: ["mapped", "unmapped", "cached"])
    func aSnapshotKeptPastCloseThrowsClosedAndKeepsItsPages(kind: String) throws {
        let place = place(kind)
        defer { place.remove() }
        let (path, fileSystem) = (place.path, place.fileSystem)
        func round(_ number: Int) -> WALBatch {
            var batch = WALBatch()
            for index in 0..<3_000 { batch.put(Array("key\(index)".utf8), Array(repeating: UInt8(number), count: 60)) }
            return batch
        }
        var (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: place.options())
        for number in 0..<3 {
            try engine.commit(round(number))
            try engine.checkpoint()
        }
        let snapshot = engine.snapshot()
        // A reader that holds a leaf from before the close reads no more from it.
        var reader = snapshot.orderedReader()
        #expect(try reader.withValue(forKey: Array("key1".utf8).span.bytes) { $0.byteCount } == 60)
        try engine.commit(round(3))
        let dataPath = joinPath(path, StorageEngine.dataFileName)
        let sizeBefore = try fileSystem.open(dataPath, options: []).size()
        try engine.close()
        #expect(try fileSystem.open(dataPath, options: []).size() >= sizeBefore, "no page moved or cut under the snapshot")
        func isClosed(_ error: any Error) -> Bool {
            if case EngineError.closed = error { return true }
            return false
        }
        #expect { try snapshot.get(Array("key7".utf8)) } throws: { isClosed($0) }
        #expect { try snapshot.forEach { _, _ in true } } throws: { isClosed($0) }
        #expect { _ = try snapshot.cursor() } throws: { isClosed($0) }
        #expect { try reader.withValue(forKey: Array("key10".utf8).span.bytes) { $0.byteCount } } throws: { isClosed($0) }
        var batch = KeyBatch()
        for index in [5, 2_000, 17] { batch.append(Array("key\(index)".utf8).span.bytes) }
        #expect { try snapshot.withValues(forKeys: batch) { _, _, _ in true } } throws: { isClosed($0) }

        (engine, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: place.options())
        #expect(engine.verify().isValid)
        var count = 0
        try engine.snapshot().forEach { _, value in
            count += 1
            return value.withUnsafeBytes { Array($0) } == Array(repeating: 3, count: 60)
        }
        #expect(count == 3_000)
        try engine.close()
    }

    /// Opens a store of 2,000 keys in a two-level tree, closed and checkpointed, and
    /// returns the data file's path with the leaf that holds `key`.
    private func closedStore(at path: String, holding key: [UInt8]) throws -> (data: String, leaf: PageID) {
        let (engine, _) = try StorageEngine.open(path: path)
        var batch = WALBatch()
        for index in 0..<2_000 { batch.put(Array("key\(index)".utf8), Array(repeating: UInt8(index % 251), count: 40)) }
        try engine.commit(batch)
        try engine.checkpoint()
        let tree = engine.snapshot().state.tree
        #expect(tree.height == 2)
        let leaf = try key.withUnsafeBytes { key in try engine.pageFile.withPage(tree.root) { try $0.child(for: key) } }
        try engine.close()
        return (joinPath(path, StorageEngine.dataFileName), leaf)
    }

    /// Flips one bit of the byte at `offset` of the file at `path`, on disk.
    private func flipByte(in path: String, at offset: Int64) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: [byte ^ 0x40])
    }

    /// Read through the mapping and with pread (`mapsDataFile` false).
    @Test(arguments: [true, false])
    func aDamagedLeafOnDiskIsACorruptPageErrorNamingItsOffset(maps: Bool) throws {
        let path = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let key = Array("key1234".utf8)
        let (data, leaf) = try closedStore(at: path, holding: key)
        let offset = Int64(leaf.rawValue) * 4_096
        try flipByte(in: data, at: offset + 200)

        var options = EngineOptions()
        options.mapsDataFile = maps
        let (engine, _) = try StorageEngine.open(path: path, options: options)
        #expect((engine.pageFile.mappingBase != nil) == maps)
        let snapshot = engine.snapshot()
        #expect { try snapshot.get(key) } throws: { error in
            guard case let EngineError.corruptPage(errorPath, errorOffset, reason) = error else { return false }
            return errorPath == data && errorOffset == offset && reason.contains("checksum")
        }
        // The same error through the borrowed paths; other leaves still read.
        #expect(throws: EngineError.self) { try snapshot.withValue(forKey: key) { _ in 0 } }
        #expect(throws: EngineError.self) { try snapshot.forEach { _, _ in true } }
        var batch = KeyBatch()
        batch.append(Array("key0".utf8).span.bytes)
        batch.append(key.span.bytes)
        #expect { try snapshot.withValues(forKeys: batch) { _, _, _ in true } } throws: { error in
            guard case let EngineError.corruptPage(errorPath, errorOffset, _) = error else { return false }
            return errorPath == data && errorOffset == offset
        }
        let others = try (0..<2_000).filter { index in
            let other = Array("key\(index)".utf8)
            let inLeaf = try other.withUnsafeBytes { other in
                try engine.pageFile.withPage(snapshot.state.tree.root) { try $0.child(for: other) } == leaf
            }
            return !inLeaf
        }
        #expect(others.count > 1_000)
        for index in others { #expect(try snapshot.get(Array("key\(index)".utf8)) == Array(repeating: UInt8(index % 251), count: 40)) }
        try engine.close(checkpoint: false)
    }

    /// Pages a reader verified once through the mapping are read again from the disk by
    /// `verify`: a page damaged after it was read is reported, with its offset.
    @Test func verifyReadsAgainThePagesReadersVerifiedBefore() throws {
        let path = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let key = Array("key1234".utf8)
        let (data, leaf) = try closedStore(at: path, holding: key)
        let (engine, _) = try StorageEngine.open(path: path)
        let snapshot = engine.snapshot()
        for index in 0..<2_000 { #expect(try snapshot.get(Array("key\(index)".utf8)) != nil) }
        #expect(engine.verify().isValid)

        let offset = Int64(leaf.rawValue) * 4_096
        try flipByte(in: data, at: offset + 200)

        let report = engine.verify()
        #expect(!report.isValid)
        #expect(report.problems.contains { $0.contains("offset \(offset)") && $0.contains("checksum") }, "\(report.problems)")
        try engine.close(checkpoint: false)
    }

    @Test func aDataFileCutShortIsACorruptPageErrorNeverAFault() throws {
        let path = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let key = Array("key1999".utf8)
        let (data, leaf) = try closedStore(at: path, holding: key)
        // Cut the file inside the leaf that holds the key: a mapped read past the end of the
        // file would fault (SIGBUS) and end this test process.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: data))
        try handle.truncate(atOffset: UInt64(leaf.rawValue) * 4_096 + 100)
        try handle.close()
        func isCutShort(_ error: any Error) -> Bool {
            guard case let EngineError.corruptPage(errorPath, _, reason) = error else { return false }
            return errorPath == data && (reason.contains("ends inside") || reason.contains("outside"))
        }
        do {
            let (engine, _) = try StorageEngine.open(path: path)
            #expect { try engine.snapshot().get(key) } throws: { isCutShort($0) }
            #expect { try engine.snapshot().forEach { _, _ in true } } throws: { isCutShort($0) }
            try engine.close(checkpoint: false)
        } catch {
            // Open may meet the cut first (the free list may lie past it): the same error.
            #expect(isCutShort(error), "\(error)")
        }
    }

    /// The leaves of a two-level tree, by page.
    private func leaves(_ engine: StorageEngine) throws -> Set<PageID> {
        let tree = engine.snapshot().state.tree
        #expect(tree.height == 2)
        return try engine.pageFile.withPage(tree.root) { page in
            Set(try (0...page.count).map { try page.child(at: $0) })
        }
    }

    /// Puts 2,000 keys of 40 bytes `byte` in one commit, then checkpoints (a tree of height 2).
    private func overwriteAll(_ engine: StorageEngine, with byte: UInt8) throws {
        var batch = WALBatch()
        for index in 0..<2_000 { batch.put(Array("key\(index)".utf8), Array(repeating: byte, count: 40)) }
        try engine.commit(batch)
        try engine.checkpoint()
    }

    /// A mapped page is verified again after a checkpoint rewrites it: damage that lands on
    /// a reused page after its rewrite is caught, though the same page number passed its
    /// check while it held an older leaf.
    @Test func aRewrittenPageIsVerifiedAgainBeforeItsNextUse() throws {
        let path = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (engine, _) = try StorageEngine.open(path: path)
        try overwriteAll(engine, with: 1)
        // Every leaf read once: each passes its check and is marked verified.
        try engine.snapshot().forEach { _, _ in true }
        let verifiedOnce = try leaves(engine)
        // Two more rewrites: the second reuses the pages the first freed.
        try overwriteAll(engine, with: 2)
        try overwriteAll(engine, with: 3)
        let reused = try leaves(engine).intersection(verifiedOnce)
        let page = try #require(reused.min())
        // Damage the rewritten page on disk, beside the open store (the mapping is shared).
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: joinPath(path, StorageEngine.dataFileName)))
        try handle.seek(toOffset: page.rawValue * 4_096 + 300)
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: page.rawValue * 4_096 + 300)
        try handle.write(contentsOf: [byte ^ 0x10])
        try handle.close()
        #expect { try engine.snapshot().forEach { _, _ in true } } throws: { error in
            guard case let EngineError.corruptPage(_, offset, reason) = error else { return false }
            return offset == Int64(page.rawValue) * 4_096 && reason.contains("checksum")
        }
        try engine.close(checkpoint: false)
    }

    /// The pages a checkpoint frees leave the process's resident set: the checkpoint read
    /// every old leaf through the mapping, and without the release each stayed mapped
    /// (and counted in the resident set) until the store closed. A snapshot of the old
    /// tree still reads them, faulting them in again.
    @Test(.enabled(if: FileManager.default.isReadableFile(atPath: "/proc/self/pagemap"), "reads the page tables from /proc/self/pagemap"))
    func pagesACheckpointFreesLeaveTheResidentSet() throws {
        let path = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (engine, _) = try StorageEngine.open(path: path)
        try overwriteAll(engine, with: 1)
        let oldTree = engine.snapshot()
        try oldTree.forEach { _, _ in true }
        let base = try #require(engine.pageFile.mappingBase)
        let oldLeaves = try leaves(engine)
        let pagemap = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/pagemap"))
        defer { try? pagemap.close() }
        /// Whether the process maps page `id` of the file now (bit 63 of its pagemap entry).
        func resident(_ id: PageID) throws -> Bool {
            let systemPage = UInt64(getpagesize())
            try pagemap.seek(toOffset: (UInt64(UInt(bitPattern: base)) + id.rawValue * 4_096) / systemPage * 8)
            let entry = try #require(try pagemap.read(upToCount: 8))
            return entry.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } >> 63 == 1
        }
        #expect(try oldLeaves.allSatisfy(resident))
        try overwriteAll(engine, with: 2)
        // Checked before anything reads the data file again: a read's fault maps the
        // pages beside it too (the kernel's fault-around), old leaves among them.
        #expect(try !oldLeaves.contains(where: resident))
        #expect(try leaves(engine).isDisjoint(with: oldLeaves))
        // The old tree's snapshot reads its leaves again, unchanged.
        var count = 0
        try oldTree.forEach { _, value in
            count += 1
            return value.withUnsafeBytes { $0.allSatisfy { $0 == 1 } }
        }
        #expect(count == 2_000)
        try engine.close()
    }

    @Test func pagesWrittenAfterOpeningAreReadThroughAGrownMapping() throws {
        let seed: UInt64 = 0x3A9_0002
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let path = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (engine, _) = try StorageEngine.open(path: path, options: smallCheckpoints)
        let pagesAtOpen = try engine.pageFile.file.size() / 4_096
        var model: [[UInt8]: [UInt8]] = [:]
        var round = 0
        // Until the file holds several times the smallest mapping (each growth maps more).
        while try engine.pageFile.file.size() / 4_096 < 4 * Int64(PageFile.smallestMappingPages) {
            try engine.commit(randomBatch(500, valueBytes: 200, random: &random, model: &model) { index, _ in
                Array("r\(round)-\(index)".utf8)
            })
            try engine.checkpoint()
            round += 1
        }
        #expect(pagesAtOpen < Int64(PageFile.smallestMappingPages))
        // One mapping, grown in place more than once (a new mapping per growth counted
        // every page read again in the resident set).
        let mappings = engine.pageFile.mappings
        #expect(mappings.count == 1 && mappings.regions >= 3)
        try expectHolds(engine.snapshot(), model)
        try engine.close()
    }

    /// `EngineOptions.smallFootprint` on the real file system: no mapping is made, however
    /// far the file grows; a store several times its page cache and its memtable reads
    /// back whole, point by point and in order, across a reopen, while the cache holds no
    /// more than its budget.
    @Test func aSmallFootprintReadsThroughItsBoundedCache() throws {
        let seed: UInt64 = 0x3A9_0003
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let path = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = EngineOptions.smallFootprint
        var (engine, _) = try StorageEngine.open(path: path, options: options)
        var model: [[UInt8]: [UInt8]] = [:]
        for round in 0..<60 {
            var batch = randomBatch(500, valueBytes: 300, random: &random, model: &model) { _, random in
                Array("k\(random.next() % 100_000)".utf8)
            }
            if round % 7 == 6, let gone = model.keys.first {
                batch.delete(gone)
                model[gone] = nil
            }
            try engine.commit(batch)
        }
        for reopen in [false, true] {
            if reopen {
                try engine.close()
                (engine, _) = try StorageEngine.open(path: path, options: options)
            } else {
                let returns = engine.freedMemoryReturns.load(ordering: .relaxed)
                try engine.checkpoint()
                // One more at least: a checkpoint the commits started may have ended meanwhile.
                #expect(engine.freedMemoryReturns.load(ordering: .relaxed) > returns,
                        "a checkpoint of a small footprint gives freed memory back")
            }
            let fileBytes = try engine.pageFile.file.size()
            #expect(fileBytes > 2 * Int64(options.cacheBytes), "the file (\(fileBytes) bytes) outgrew the cache")
            #expect(engine.pageFile.mappingBase == nil && engine.pageFile.mappings.count == 0)
            try expectHolds(engine.snapshot(), model)
            #expect(engine.pageFile.cache.count * engine.pageFile.pageBytes <= options.cacheBytes)
            #expect(engine.verify().isValid)
        }
        try engine.close()

        // Without the option a checkpoint leaves malloc's memory alone.
        var keeping = options
        keeping.returnsFreedMemory = false
        let other = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: other) }
        let (plain, _) = try StorageEngine.open(path: other, options: keeping)
        var batch = WALBatch()
        batch.put(Array("key".utf8), Array("value".utf8))
        try plain.commit(batch)
        try plain.checkpoint()
        #expect(plain.freedMemoryReturns.load(ordering: .relaxed) == 0)
        try plain.close()
    }
}
