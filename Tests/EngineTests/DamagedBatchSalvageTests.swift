// A batch whose frames verify but whose bytes break the format (a key over the limit, a
// value over it, an operation count it does not hold, an LZ4 block that does not
// decompress): a strict open refuses the store
// naming file, offset and LSN, and the salvage modes step over the batch — point-in-time
// keeps every batch before it, skip-corrupted every batch that decodes, listing what it
// applied and left out after the damage.
@testable import StrataEngine
import StrataCodec
import StrataFileIO
import StrataWAL
import Testing

@Suite struct DamagedBatchSalvageTests {
    /// A store at /db holding `before` keys (one commit each, the first `checkpointed` of
    /// them in the data file), then the batches `hostile` appended raw with valid frames,
    /// then `after` more keys appended raw.
    private func damagedStore(before: Int = 6, checkpointed: Int = 2, hostile: [WALBatch], after: Int = 4,
                              segmentBytes: Int = 1 << 20) throws -> SimulatedFileSystem {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.log.segmentBytes = segmentBytes
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        for index in 0..<before {
            try engine.commit(WALBatch([.put(key: Array("before\(index)".utf8), value: Array("v\(index)".utf8))]))
            if index + 1 == checkpointed { try engine.checkpoint() }
        }
        try engine.close(checkpoint: false)
        var logOptions = WALOptions()
        logOptions.segmentBytes = segmentBytes
        let (log, _) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: fileSystem, options: logOptions)
        for batch in hostile { _ = try log.append(batch) }
        for index in 0..<after {
            _ = try log.append(WALBatch([.put(key: Array("after\(index)".utf8), value: Array("w\(index)".utf8))]))
        }
        try log.close()
        return fileSystem
    }

    private func open(_ fileSystem: SimulatedFileSystem, _ mode: RecoveryMode,
                      access: AccessMode = .readOnly) throws -> (StorageEngine, RecoveryReport) {
        var options = EngineOptions()
        options.log.recoveryMode = mode
        options.log.segmentBytes = 1 << 20
        return try StorageEngine.open(path: "/db", mode: access, fileSystem: fileSystem, options: options)
    }

    private func keys(_ engine: StorageEngine, _ prefix: String, _ count: Int) throws -> [Bool] {
        let snapshot = engine.snapshot()
        return try (0..<count).map { try snapshot.get(Array("\(prefix)\($0)".utf8)) != nil }
    }

    /// The hostile shapes: a key over the limit, an empty key, a value over the limit (in
    /// a batch of many frames, its last), a declared count the bytes do not hold, and a
    /// compressed frame whose LZ4 block does not decompress.
    static let shapes: [String] = ["long key", "empty key", "long value in a large batch", "count", "bad LZ4 block"]

    private static func hostile(_ shape: String) -> WALBatch {
        switch shape {
        case "long key": return WALBatch([.put(key: [UInt8](repeating: 0x61, count: 769), value: [1])])
        case "empty key": return WALBatch([.put(key: Array("fine".utf8), value: [1]), .delete(key: [])])
        case "long value in a large batch":
            // 3 MiB of fine puts, then one value one byte over the limit: refused at its length.
            var batch = WALBatch((0..<48).map { .put(key: Array("big\($0)".utf8), value: [UInt8](repeating: UInt8($0), count: 64 << 10)) })
            batch.put(Array("huge".utf8), [UInt8](repeating: 7, count: (64 << 20) + 1))
            return batch
        case "bad LZ4 block":
            // 268 encoded bytes, 256 of them alike: the log stores the batch as an LZ4 block.
            return WALBatch([.put(key: Array("fine".utf8), value: [UInt8](repeating: 1, count: 256))])
        default:
            return WALBatch([.put(key: Array("fine".utf8), value: [1])])
        }
    }

    /// The hostile batch's LSN: after `before` commits.
    private let damagedLSN = LSN(7)

    /// `damagedStore` with the batch of `shape` at `damagedLSN`.
    private func damagedStore(_ shape: String) throws -> SimulatedFileSystem {
        let fileSystem = try damagedStore(hostile: [Self.hostile(shape)])
        switch shape {
        case "count":
            // One operation more than the batch holds (a batch this small is stored raw).
            try reseal(damagedLSN, in: fileSystem) { bytes, frame in
                #expect(frame.flags == 0, "the batch is stored uncompressed")
                bytes[frame.payload.lowerBound] += 1
            }
        case "bad LZ4 block":
            // Every byte of the block 0xFF: a literal length that runs past the block's end.
            try reseal(damagedLSN, in: fileSystem) { bytes, frame in
                #expect(frame.flags == 1, "the batch is stored as an LZ4 block")
                bytes.replaceSubrange(frame.payload, with: repeatElement(0xFF, count: frame.payload.count))
            }
        default:
            break
        }
        return fileSystem
    }

    @Test(arguments: shapes)
    func aStrictOpenRefusesTheBatchNamingFileOffsetAndLSN(shape: String) throws {
        let fileSystem = try damagedStore(shape)
        #expect {
            try open(fileSystem, .strict)
        } throws: { error in
            guard case let EngineError.log(.corruptBatch(path, offset, lsn, _)) = error else { return false }
            return path.hasPrefix("/db/wal/wal-") && offset >= 64 && lsn == damagedLSN
        }
    }

    @Test(arguments: shapes)
    func pointInTimeKeepsEveryBatchBeforeTheDamagedOne(shape: String) throws {
        let fileSystem = try damagedStore(shape)
        let (engine, report) = try open(fileSystem, .pointInTime)
        defer { try? engine.close(checkpoint: false) }
        #expect(try keys(engine, "before", 6) == Array(repeating: true, count: 6))
        #expect(try keys(engine, "after", 4) == Array(repeating: false, count: 4))
        #expect(report.lastDurableVersion == 6)
        #expect(report.log.damage.count == 1 && report.log.damage[0].expectedLSN == damagedLSN)
        #expect(report.log.damage[0].reason.contains("does not decode"), "\(report.log.damage)")
    }

    @Test(arguments: shapes)
    func skipCorruptedKeepsTheLaterBatchesAndListsWhatItSteppedOver(shape: String) throws {
        let fileSystem = try damagedStore(shape)
        let (engine, report) = try open(fileSystem, .skipCorrupted)
        defer { try? engine.close(checkpoint: false) }
        #expect(try keys(engine, "before", 6) == Array(repeating: true, count: 6))
        #expect(try keys(engine, "after", 4) == Array(repeating: true, count: 4))
        #expect(try engine.snapshot().get(Array("fine".utf8)) == nil, "nothing of the damaged batch is applied")
        let after = report.log.batchesAfterDamage
        #expect(after.map(\.lsn) == (7...11).map { LSN(UInt64($0)) })
        let expectedStarts = try batchStarts(of: 7...11, in: fileSystem)
        #expect(after.map { "\($0.path)@\($0.offset)" } == expectedStarts, "each batch at its first frame's offset")
        guard case let .skipped(reason)? = after.first?.outcome else {
            Issue.record("the damaged batch is not listed as skipped: \(after)")
            return
        }
        #expect(shape != "bad LZ4 block" || reason.contains("LZ4"), "\(reason)")
        #expect(after.dropFirst().allSatisfy { batch in
            batch.outcome == .applied && batch.operationCount == 1 && (batch.path, batch.offset) > (after[0].path, after[0].offset)
        })
    }

    /// After a point-in-time salvage in place, the log continues from the batch before the
    /// damage: new commits get the damaged batch's LSN, and a strict open reads them.
    @Test func aPointInTimeSalvageInPlaceLeavesAStoreThatOpensStrictly() throws {
        let fileSystem = try damagedStore(hostile: [Self.hostile("long key")])
        do {
            let (engine, _) = try open(fileSystem, .pointInTime, access: .readWrite)
            let result = try engine.commit(WALBatch([.put(key: Array("new".utf8), value: [9])]))
            #expect(result.version == damagedLSN.rawValue)
            try engine.close(checkpoint: false)
        }
        let (engine, report) = try open(fileSystem, .strict)
        defer { try? engine.close(checkpoint: false) }
        #expect(try engine.snapshot().get(Array("new".utf8)) == [9])
        #expect(try keys(engine, "before", 6) == Array(repeating: true, count: 6))
        #expect(try keys(engine, "after", 4) == Array(repeating: false, count: 4))
        #expect(report.log.damage.isEmpty)
    }

    /// A skip-corrupted open whose last batch is the damaged one: the log goes on after
    /// its LSN, and so does the store's version, so a new commit is published and read.
    @Test func aSkipCorruptedOpenWhoseLastBatchIsDamagedPublishesNewCommits() throws {
        let fileSystem = try damagedStore(hostile: [Self.hostile("long key")], after: 0)
        do {
            let (engine, report) = try open(fileSystem, .skipCorrupted, access: .readWrite)
            #expect(report.log.batchesAfterDamage.map(\.lsn) == [damagedLSN])
            let result = try engine.commit(WALBatch([.put(key: Array("new".utf8), value: [9])]))
            #expect(result.version == damagedLSN.rawValue + 1)
            #expect(try engine.snapshot().get(Array("new".utf8)) == [9])
            try engine.close()
        }
        let (engine, _) = try open(fileSystem, .strict)
        defer { try? engine.close(checkpoint: false) }
        #expect(try engine.snapshot().get(Array("new".utf8)) == [9])
        #expect(try keys(engine, "before", 6) == Array(repeating: true, count: 6))
    }

    /// A log directory older than the data file (put back from a copy made before the last
    /// checkpoint): its batches all precede the checkpoint, and new commits take the
    /// versions after the checkpoint's, are read, and survive a reopen. (The commits in
    /// flight are kept by version from the store's version on, which a commit whose LSN
    /// fell behind it would break.)
    @Test func aLogOlderThanTheCheckpointGivesNewCommitsTheVersionsAfterIt() throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.idleCheckpointDelay = nil
        var older: [(name: String, bytes: [UInt8])] = []
        do {
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            for index in 0..<5 { try engine.commit(WALBatch([.put(key: Array("k\(index)".utf8), value: [1])])) }
            try engine.close(checkpoint: false)
            for name in try fileSystem.contentsOfDirectory("/db/wal") {
                older.append((name, try #require(fileSystem.contents(of: "/db/wal/" + name))))
            }
        }
        do {
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            for index in 5..<15 { try engine.commit(WALBatch([.put(key: Array("k\(index)".utf8), value: [1])])) }
            try engine.close()
        }
        for name in try fileSystem.contentsOfDirectory("/db/wal") { try fileSystem.removeFile("/db/wal/" + name) }
        for (name, bytes) in older {
            let file = try fileSystem.open("/db/wal/" + name, options: [.create, .write])
            try file.write(bytes, at: 0)
            try file.sync()
            try file.close()
        }
        do {
            let (engine, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            #expect(report.checkpointVersion == 15 && report.lastDurableVersion == 15)
            let result = try engine.commit(WALBatch([.put(key: Array("new".utf8), value: [9])]))
            #expect(result.version == 16)
            #expect(try engine.snapshot().get(Array("new".utf8)) == [9])
            try engine.close(checkpoint: false)
        }
        let (engine, _) = try open(fileSystem, .strict)
        defer { try? engine.close(checkpoint: false) }
        #expect(try engine.snapshot().get(Array("new".utf8)) == [9])
        #expect(try keys(engine, "k", 15) == Array(repeating: true, count: 15))
    }

    /// Checksum damage at LSN 7 (ordinary corruption: later frames vouch for it), then a
    /// frame at LSN 9 forged with a valid checksum (its value changed). A strict open names
    /// the damaged frame; skip-corrupted reports the damage where its frame starts and
    /// lists every batch after it, the forged one included, at the offset its frame has in
    /// the segment. The frame that fails its checksum is no batch read: it is in `damage`
    /// (with the LSN expected there), not in `batchesAfterDamage`.
    @Test func skipCorruptedListsEveryBatchAfterChecksumDamageAtItsFrame() throws {
        let fileSystem = try damagedStore(hostile: [])
        let frames = try logFrames(fileSystem)
        let damaged = try #require(frames.first(where: { $0.lsn == LSN(7) }))
        let next = try #require(frames.first(where: { $0.lsn == LSN(8) }))
        fileSystem.modify(damaged.path) { $0[damaged.payload.lowerBound] ^= 0xFF }
        try reseal(LSN(9), in: fileSystem) { bytes, frame in
            let last = bytes[frame.payload.upperBound - 1]
            #expect(frame.flags == 0 && last == UInt8(ascii: "2"), "after2's value, stored raw, ends the payload")
            bytes[frame.payload.upperBound - 1] = UInt8(ascii: "X")
        }
        #expect {
            try open(fileSystem, .strict)
        } throws: { error in
            guard case let EngineError.log(.corruptFrame(path, offset, lsn, _)) = error else { return false }
            return path == damaged.path && offset == Int64(damaged.offset) && lsn == LSN(7)
        }
        let (engine, report) = try open(fileSystem, .skipCorrupted)
        defer { try? engine.close(checkpoint: false) }
        #expect(try keys(engine, "before", 6) == Array(repeating: true, count: 6))
        #expect(try keys(engine, "after", 4) == [false, true, true, true])
        #expect(try engine.snapshot().get(Array("after2".utf8)) == Array("wX".utf8), "the forged batch is applied")
        let damage = try #require(report.log.damage.first)
        #expect(report.log.damage.count == 1 && damage.kind == .corruption && damage.expectedLSN == LSN(7), "\(damage)")
        #expect(damage.path == damaged.path && damage.offset == Int64(damaged.offset), "\(damage)")
        #expect(next.path == damaged.path && damage.byteCount == next.offset - damaged.offset, "\(damage)")
        #expect(damage.reason.contains("checksum"), "\(damage)")
        let after = report.log.batchesAfterDamage
        #expect(after.map(\.lsn) == [LSN(8), LSN(9), LSN(10)], "\(after)")
        let expectedStarts = try batchStarts(of: 8...10, in: fileSystem)
        #expect(after.map { "\($0.path)@\($0.offset)" } == expectedStarts)
        #expect(after.allSatisfy { $0.outcome == .applied && $0.operationCount == 1 }, "\(after)")
    }

    /// One frame of the log, as the segment file's bytes say.
    private struct Frame {
        var path: String
        var offset: Int
        var lsn: LSN
        var flags: UInt8
        var kind: UInt8
        /// Where its stored payload lies in the segment.
        var payload: Range<Int>
        var startsBatch: Bool { kind == 1 || kind == 2 }
    }

    /// Every frame of the log at /db/wal, segment by segment, read from the files' bytes
    /// (FORMAT.md, "Frame"): each segment's frames from offset 64 until a header that does
    /// not carry the segment's salt or carries no LSN.
    private func logFrames(_ fileSystem: SimulatedFileSystem) throws -> [Frame] {
        let names = try fileSystem.contentsOfDirectory("/db/wal")
            .filter { $0.hasPrefix("wal-") && !$0.hasPrefix("wal-spare-") && $0.hasSuffix(".seg") }.sorted()
        var frames: [Frame] = []
        for name in names {
            let path = "/db/wal/" + name
            let bytes = try #require(fileSystem.contents(of: path))
            func load<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T {
                bytes.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: at, as: T.self)) }
            }
            let salt = load(12, UInt32.self)
            var offset = 64
            while offset + 40 <= bytes.count, load(offset + 4, UInt32.self) == salt, load(offset + 8, UInt64.self) != 0 {
                let stored = Int(load(offset + 24, UInt32.self))
                guard offset + 40 + stored <= bytes.count else { break }
                frames.append(Frame(path: path, offset: offset, lsn: LSN(load(offset + 8, UInt64.self)), flags: bytes[offset + 36],
                                    kind: bytes[offset + 37], payload: (offset + 40)..<(offset + 40 + stored)))
                offset += (40 + stored + 7) / 8 * 8
            }
        }
        return frames
    }

    /// Where each batch of `lsns` starts ("path@offset" of its first frame), from the files.
    private func batchStarts(of lsns: ClosedRange<UInt64>, in fileSystem: SimulatedFileSystem) throws -> [String] {
        let starts = try logFrames(fileSystem).filter(\.startsBatch)
        return lsns.map { lsn in
            starts.first(where: { $0.lsn == LSN(lsn) }).map { "\($0.path)@\($0.offset)" } ?? "no frame of \(LSN(lsn))"
        }
    }

    /// Changes the first frame of `lsn` with `edit` and recomputes its checksum, so that the
    /// frame verifies and its bytes reach the checks behind the checksum.
    private func reseal(_ lsn: LSN, in fileSystem: SimulatedFileSystem, _ edit: (inout [UInt8], Frame) -> Void) throws {
        let found = try logFrames(fileSystem).first(where: { $0.lsn == lsn })
        let frame = try #require(found, "no frame of \(lsn)")
        fileSystem.modify(frame.path) { bytes in
            edit(&bytes, frame)
            let checksum = CRC32C.checksum(bytes[(frame.offset + 4)..<frame.payload.upperBound])
            bytes.replaceSubrange(frame.offset..<(frame.offset + 4), with: withUnsafeBytes(of: checksum.littleEndian) { Array($0) })
        }
    }
}
