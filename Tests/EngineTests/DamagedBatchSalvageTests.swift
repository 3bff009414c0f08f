// A batch whose frames verify but whose bytes break the format (a key over the limit, a
// value over it, an operation count it does not hold): a strict open refuses the store
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
    /// a batch of many frames, its last), and a declared count the bytes do not hold.
    static let shapes: [String] = ["long key", "empty key", "long value in a large batch", "count"]

    private static func hostile(_ shape: String) -> WALBatch {
        switch shape {
        case "long key": return WALBatch([.put(key: [UInt8](repeating: 0x61, count: 769), value: [1])])
        case "empty key": return WALBatch([.put(key: Array("fine".utf8), value: [1]), .delete(key: [])])
        case "long value in a large batch":
            // 3 MiB of fine puts, then one value one byte over the limit: refused at its length.
            var batch = WALBatch((0..<48).map { .put(key: Array("big\($0)".utf8), value: [UInt8](repeating: UInt8($0), count: 64 << 10)) })
            batch.put(Array("huge".utf8), [UInt8](repeating: 7, count: (64 << 20) + 1))
            return batch
        default:
            return WALBatch([.put(key: Array("fine".utf8), value: [1])])
        }
    }

    /// The hostile batch's LSN: after `before` commits.
    private let damagedLSN = LSN(7)

    /// `damagedStore` with the batch of `shape` at `damagedLSN`.
    private func damagedStore(_ shape: String) throws -> SimulatedFileSystem {
        let fileSystem = try damagedStore(hostile: [Self.hostile(shape)])
        if shape == "count" { try rewriteCount(of: damagedLSN, in: fileSystem) }
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
        guard case .skipped? = after.first?.outcome else {
            Issue.record("the damaged batch is not listed as skipped: \(after)")
            return
        }
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

    /// Rewrites the operation count of the one-frame batch at `lsn` to one more than it
    /// holds, resealing the frame's checksum (the payload is stored uncompressed: a batch
    /// this small does not shrink).
    private func rewriteCount(of lsn: LSN, in fileSystem: SimulatedFileSystem) throws {
        let names = try fileSystem.contentsOfDirectory("/db/wal").filter { $0.hasPrefix("wal-") && $0.hasSuffix(".seg") }.sorted()
        for name in names {
            let handle = try fileSystem.open("/db/wal/" + name, options: [.write])
            defer { try? handle.close() }
            var bytes = try handle.read(count: Int(try handle.size()), at: 0)
            var offset = 64
            while offset + 40 <= bytes.count {
                let frameLSN = bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)) }
                let stored = bytes.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset + 24, as: UInt32.self))) }
                guard frameLSN != 0, stored > 0 else { break }
                if frameLSN == lsn.rawValue {
                    #expect(bytes[offset + 36] == 0, "the batch is stored uncompressed")
                    bytes[offset + 40] += 1
                    let checksum = CRC32C.checksum(bytes[(offset + 4)..<(offset + 40 + stored)])
                    bytes.replaceSubrange(offset..<(offset + 4), with: withUnsafeBytes(of: checksum.littleEndian) { Array($0) })
                    try handle.write(bytes, at: 0)
                    return
                }
                offset += (40 + stored + 7) / 8 * 8
            }
        }
        Issue.record("no frame of \(lsn)")
    }
}
