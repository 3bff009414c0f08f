// Stores whose files were damaged, replaced or crafted: each gives a typed error naming
// what is wrong, never a hang, a trap, a silently emptier store or a page no reader accepts.
// Each test failed before its fix (the cases of the reliability review).
@testable import StrataEngine
import StrataCodec
import StrataFileIO
import StrataWAL
import Testing

@Suite struct HostileStoreTests {
    /// A store at /db with `keys` committed one per version, closed.
    private func makeStore(_ fileSystem: SimulatedFileSystem, keys: Int, options: EngineOptions = EngineOptions()) throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        for index in 0..<keys {
            try engine.commit(WALBatch([.put(key: Array("key\(index)".utf8), value: Array("value\(index)".utf8))]))
        }
        try engine.close()
    }

    /// Appends `batch` to the store's log as the next batch, with a valid frame and checksum:
    /// what a hostile writer (or a bug elsewhere) could leave.
    private func appendRaw(_ batch: WALBatch, _ fileSystem: SimulatedFileSystem) throws {
        var options = WALOptions()
        options.segmentBytes = 1 << 20
        let (log, _) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: fileSystem, options: options)
        _ = try log.append(batch)
        try log.close()
    }

    @Test(arguments: [0, 2_000])
    func aLoggedKeyOutsideTheLimitsIsACorruptBatchNotAHang(keyBytes: Int) throws {
        let fileSystem = SimulatedFileSystem()
        try makeStore(fileSystem, keys: 3)
        try appendRaw(WALBatch([.put(key: [UInt8](repeating: 0x61, count: keyBytes), value: [1])]), fileSystem)
        #expect {
            try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        } throws: { error in
            guard case let EngineError.log(.corruptBatch(path, offset, lsn, reason)) = error else { return false }
            // Refused by the log's reader as it reads the key's length, before the key.
            return path.hasPrefix("/db/wal/wal-") && offset > 0 && lsn == LSN(4)
                && reason.contains(keyBytes == 0 ? "key length at offset 5 is 0" : "length \(keyBytes) at offset 5 is above the limit of 768")
        }
    }

    @Test func theTreeWriterRefusesACellNoPageHoldsBeforeWritingAnything() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/t")
        let file = try fileSystem.open("/t/data", options: [.create, .write])
        let pageFile = try PageFile(path: "/t/data", file: file, pageBytes: 4096, cachePages: 8)
        var writer = TreeWriter(file: pageFile, generation: 1, purgeTombstonesThrough: 0,
                                allocator: PageAllocator(reusable: [], pageCount: 2))
        let huge = [UInt8](repeating: 0x62, count: 5_000)
        let memtable = Memtable()
        memtable.apply(WALBatch([.put(key: huge, value: [1])]), version: 1)
        var iterator = memtable.entries(from: nil, reverse: false)
        let first = iterator.nextNode()
        let node = try #require(first)
        #expect(throws: EngineError.self) {
            _ = try writer.apply([node], to: BTree.empty)
        }
        withExtendedLifetime(memtable) {}  // the writer reads the node in place
        #expect(writer.allocator.allocated.isEmpty)
        #expect(try file.size() == 0)
    }

    /// A free list that names a page twice, names one of its own pages, names a page past
    /// the end or loops: each is a corrupt page naming the data file and the list page's
    /// offset, for a writer and a read-only open alike (a damaged list reused would hand
    /// one page to two owners).
    @Test(arguments: ["twice", "itself", "out of range", "loop"])
    func aDamagedFreeListIsACorruptPageNamingItsOffset(damage: String) throws {
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        for round in 0..<4 {
            var batch = WALBatch()
            for index in 0..<200 { batch.put(Array("key\(index)".utf8), Array("value\(round)-\(index)".utf8)) }
            try engine.commit(batch)
            try engine.checkpoint()
        }
        let meta = engine.checkpointLock.withLock { $0.meta }
        let listPage = meta.freeListHead
        try engine.close(checkpoint: false)
        try #require(listPage != .none)
        let offset = Int(listPage.rawValue) * 4096
        let image = try #require(fileSystem.contents(of: "/db/data"))
        let page = Array(image[offset..<(offset + 4096)])
        let (_, count, _) = try PageCodec.verify(page, id: listPage, expected: [.freeList])
        var ids = try PageCodec.decodeFreeList(page, count: count)
        try #require(ids.count >= 2)
        var next = PageID.none
        switch damage {
        case "twice": ids[1] = ids[0]
        case "itself": ids[0] = listPage
        case "out of range": ids[0] = PageID(meta.pageCount + 5)
        default: next = listPage
        }
        let forged = PageCodec.encodeFreeList(ids[...], next: next, id: listPage, generation: meta.generation, pageBytes: 4096)
        fileSystem.modify("/db/data") { $0.replaceSubrange(offset..<(offset + 4096), with: forged) }
        for mode in [AccessMode.readWrite, .readOnly] {
            #expect {
                try StorageEngine.open(path: "/db", mode: mode, fileSystem: fileSystem)
            } throws: { error in
                guard case let EngineError.corruptPage(path, at, reason) = error else { return false }
                let named = damage == "loop" ? reason.contains("loops") : reason.contains(damage == "out of range" ? "out of range" : "twice")
                return path == "/db/data" && at == Int64(offset) && named
            }
        }
    }

    @Test func aMissingDataFileIsRefusedNotRecreatedEmpty() throws {
        let fileSystem = SimulatedFileSystem()
        try makeStore(fileSystem, keys: 5)
        try fileSystem.removeFile("/db/data")
        #expect {
            try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        } throws: { error in
            guard case let EngineError.missingData(path, reason) = error else { return false }
            return path == "/db/data" && reason.contains("data file is missing")
        }
        #expect(!fileSystem.fileExists("/db/data"), "nothing was created")
    }

    @Test func anOlderDataFileUnderANewerLogIsRefused() throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.log.segmentBytes = 4096
        options.log.maxSpareSegments = 0
        try makeStore(fileSystem, keys: 2, options: options)
        let old = try fileSystem.open("/db/data", options: [])
        let oldBytes = try old.read(count: Int(try old.size()), at: 0)
        try old.close()
        // Enough commits and a checkpoint that the log releases the segments before them.
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        for index in 0..<200 {
            try engine.commit(WALBatch([.put(key: Array("more\(index)".utf8), value: [UInt8](repeating: 7, count: 64))]))
        }
        try engine.checkpoint()
        try engine.close()
        let replaced = try fileSystem.open("/db/data", options: [.write, .truncate])
        try replaced.write(oldBytes, at: 0)
        try replaced.close()
        #expect {
            try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        } throws: { error in
            guard case let EngineError.missingData(path, reason) = error else { return false }
            return path.hasPrefix("/db/wal/") && reason.contains("must hold every batch from LSN 3 on")
        }
    }

    @Test func aSegmentSequenceAtTheTopOfItsRangeIsCorruptionNotATrap() throws {
        let fileSystem = SimulatedFileSystem()
        try makeStore(fileSystem, keys: 3)
        let names = try fileSystem.contentsOfDirectory("/db/wal").filter { $0.hasPrefix("wal-0") }
        #expect(names.count == 1)
        let path = "/db/wal/" + names[0]
        // Rewrite the header's sequence number (offset 16) and reseal it, under the matching name.
        let handle = try fileSystem.open(path, options: [.write])
        var header = try handle.read(count: 64, at: 0)
        header.replaceSubrange(16..<24, with: [UInt8](repeating: 0xFF, count: 8))
        let checksum = CRC32C.checksum(header[0..<60])
        header.replaceSubrange(60..<64, with: withUnsafeBytes(of: checksum.littleEndian) { Array($0) })
        try handle.write(header, at: 0)
        try handle.close()
        let crafted = "/db/wal/wal-ffffffffffffffff.seg"
        try fileSystem.rename(path, to: crafted)
        #expect {
            try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        } throws: { error in
            guard case let EngineError.log(.corruptSegmentHeader(errorPath, reason)) = error else { return false }
            return errorPath == crafted && reason.contains("past the largest")
        }
    }

    /// A meta page whose reserved bytes are not zero (checksum resealed) is invalid, named
    /// for them; so is a page whose overflow count or leaf word is not zero.
    @Test(arguments: [5, 7, 18, 19, 80, 4095])
    func aMetaPageWithNonZeroReservedBytesIsInvalid(offset: Int) throws {
        var meta = MetaPage(pageBytes: 4096, generation: 3, root: .none, freeListHead: .none, checkpointVersion: 9,
                            pageCount: 2, keyCount: 0, height: 0).encoded()
        #expect((try? MetaPage.decode(meta)) != nil)
        meta[offset] = 1
        let checksum = CRC32C.checksum(meta[4...])
        meta.replaceSubrange(0..<4, with: withUnsafeBytes(of: checksum.littleEndian) { Array($0) })
        #expect {
            try MetaPage.decode(meta)
        } throws: { error in
            "\(error)".contains("reserved bytes (5–7, 18–19, 80 on) are not zero")
        }
    }

    @Test func anOverflowPageWithACountAndALeafWithAWordAreCorrupt() throws {
        var overflow = PageCodec.encodeOverflow([UInt8]([1, 2, 3]), next: .none, id: PageID(5), generation: 1, pageBytes: 4096)
        overflow[6] = 1
        overflow.replaceSubrange(0..<4, with: withUnsafeBytes(of: CRC32C.checksum(overflow[4...]).littleEndian) { Array($0) })
        #expect { try PageCodec.verify(overflow, id: PageID(5), expected: [.overflow]) } throws: { "\($0)".contains("not zero as an overflow page's") }
        var leaf = PageCodec.encodeLeaf([LeafEntry]()[...], id: PageID(6), generation: 1, pageBytes: 4096)
        leaf[24] = 9
        leaf.replaceSubrange(0..<4, with: withUnsafeBytes(of: CRC32C.checksum(leaf[4...]).littleEndian) { Array($0) })
        #expect { try PageCodec.verify(leaf, id: PageID(6), expected: [.leaf]) } throws: { "\($0)".contains("not zero as a leaf's") }
    }

    @Test func aMetaPageWithABadChecksumIsReportedAsSuch() throws {
        let fileSystem = SimulatedFileSystem()
        // Two checkpoints, so both meta pages are valid; then flip a byte inside the newer one.
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        for round in 0..<2 {
            try engine.commit(WALBatch([.put(key: Array("k\(round)".utf8), value: [1])]))
            try engine.checkpoint()
        }
        try engine.close(checkpoint: false)
        let file = try fileSystem.open("/db/data", options: [.write])
        var meta = try file.read(count: 4096, at: 0)
        meta[40] ^= 0x01
        try file.write(meta, at: 0)
        try file.close()
        // The older meta page's checkpoint needs the batch the newer checkpoint released:
        // opening refuses, and says both what it rejected and what is missing.
        #expect {
            try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        } throws: { error in
            guard case let EngineError.missingData(_, reason) = error else { return false }
            return reason.contains("meta page 0: its checksum does not match") && reason.contains("batches 2 to 2 are missing")
        }
        // With the log still holding that batch (as while the newer meta page is written,
        // before any segment is released), it falls back and names the rejected page.
        let other = SimulatedFileSystem()
        let (writer, _) = try StorageEngine.open(path: "/db", fileSystem: other)
        try writer.commit(WALBatch([.put(key: Array("k0".utf8), value: [1])]))
        try writer.checkpoint()
        try writer.commit(WALBatch([.put(key: Array("k1".utf8), value: [1])]))
        let log = try #require(other.contentsOfDirectory("/db/wal").first { $0.hasPrefix("wal-0") })
        let logBytes = try #require(other.contents(of: "/db/wal/" + log))
        try writer.checkpoint()
        try writer.close(checkpoint: false)
        for name in try other.contentsOfDirectory("/db/wal") where name.hasPrefix("wal-") { try other.removeFile("/db/wal/" + name) }
        let restored = try other.open("/db/wal/" + log, options: [.create, .write])
        try restored.write(logBytes, at: 0)
        try restored.close()
        let data = try other.open("/db/data", options: [.write])
        var page = try data.read(count: 4096, at: 0)
        page[40] ^= 0x01
        try data.write(page, at: 0)
        try data.close()
        let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: other)
        #expect(report.rejectedMeta == "meta page 0: its checksum does not match")
        #expect(try reopened.snapshot().get(Array("k1".utf8)) == [1])
        try reopened.close(checkpoint: false)
    }
}
