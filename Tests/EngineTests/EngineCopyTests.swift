import StrataFileIO
import Testing
import StrataWAL
@testable import StrataEngine

@Suite struct EngineCopyTests {
    /// Every committed state, by version, from a writer that commits `key-(n % 50) = n`.
    private static func commitRange(_ engine: StorageEngine, _ range: Range<Int>) throws {
        for n in range {
            try engine.commit(WALBatch([.put(key: Array("key-\(n % 50)".utf8), value: Array("\(n)".utf8)),
                                        .put(key: Array("last".utf8), value: Array("\(n)".utf8))]))
            if n % 97 == 0 { try engine.checkpoint() }
        }
    }

    @Test func backupWhileCommitsRunOpensToAConsistentVersion() async throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.log.segmentBytes = 16 << 10
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        try Self.commitRange(engine, 0..<300)
        let writer = Task.detached { try Self.commitRange(engine, 300..<900) }
        let report = try engine.backup(to: "/copy")
        try await writer.value
        try engine.close()
        let (copy, _) = try StorageEngine.open(path: "/copy", fileSystem: fileSystem, options: options)
        let snapshot = copy.snapshot()
        #expect(copy.verify().isValid)
        #expect(snapshot.version == report.version && report.version >= 300)
        // The copy holds exactly the state after commit `last`: every key's latest value.
        let last = Int(String(decoding: try snapshot.get(Array("last".utf8))!, as: UTF8.self))!
        #expect(UInt64(last + 1) == report.version)
        for key in 0..<50 {
            let expected = stride(from: last, through: 0, by: -1).first { $0 % 50 == key }!
            #expect(try snapshot.get(Array("key-\(key)".utf8)) == Array("\(expected)".utf8))
        }
    }

    @Test func backupRefusesADestinationThatHoldsAStore() throws {
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        #expect(throws: EngineError.self) { try engine.backup(to: "/db") }
    }

    @Test func compactKeepsLiveKeysAndDropsHistory() throws {
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        try Self.commitRange(engine, 0..<500)
        try engine.commit(WALBatch([.delete(key: Array("key-7".utf8))]))
        var progressCalls = 0
        let report = try engine.compact(to: "/compact") { _ in progressCalls += 1 }
        let expected = try engine.snapshot().scan()
        try engine.close()
        let (copy, _) = try StorageEngine.open(path: "/compact", fileSystem: fileSystem)
        let actual = try copy.snapshot().scan()
        #expect(actual.map(\.key) == expected.map(\.key) && actual.map(\.value) == expected.map(\.value))
        #expect(report.keyCount == 50 && progressCalls >= 1)
        #expect(copy.verify().isValid && copy.verify().tombstones == 0)
    }
}
