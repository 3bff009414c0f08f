// Logging: silent unless asked (the default logger drops everything), and with a logger
// the application passes, every event docs/Contexts.md ("Logging") names is logged at its level: opening,
// a cut log tail, checkpoints and their failure, released segments, a failed fdatasync.
import InMemoryLogging
import Logging
import StrataEngine
import StrataFileIO
import StrataWAL
import Testing

@Suite struct EngineLoggingTests {
    @Test func theDefaultLoggerIsSilent() {
        #expect(EngineOptions().logger.handler is SwiftLogNoOpLogHandler)
        #expect(WALOptions().logger.handler is SwiftLogNoOpLogHandler)
        #expect(EngineOptions().logger.label == "strata")
    }

    @Test func openCheckpointReleaseAndFailedSyncAreLogged() throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "strata", factory: { _ in handler })
        logger.logLevel = .debug
        var options = EngineOptions()
        options.logger = logger
        options.log.segmentBytes = 4096
        let fileSystem = SimulatedFileSystem()
        var (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        // Values that do not compress, so the log moves through several 4 KiB segments.
        var random = SplitMix64(seed: 5)
        for round in 0..<20 {
            let value = (0..<500).map { _ in UInt8.random(in: 0...255, using: &random) }
            try engine.commit(WALBatch([.put(key: Array("key\(round)".utf8), value: value)]))
        }
        try engine.checkpoint()
        // The checkpoint released every segment; one more batch after it, then a close
        // without a checkpoint, so the log keeps that frame.
        try engine.commit(WALBatch([.put(key: Array("after".utf8), value: [1])]))
        try engine.close(checkpoint: false)
        // A damaged last frame (its last byte that is not padding): the next open cuts it as
        // a torn tail, since no later frame vouches that it was ever durable.
        let segment = "/db/wal/" + (try #require(try fileSystem.contentsOfDirectory("/db/wal").filter { $0.hasPrefix("wal-0") }.max()))
        let handle = try fileSystem.open(segment, options: [.write])
        let contents = try handle.read(count: Int(try handle.size()), at: 0)
        let last = try #require(contents.lastIndex { $0 != 0 })
        try handle.write([contents[last] ^ 0x01], at: Int64(last))
        try handle.close()
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        // A checkpoint whose data-file sync fails, then a commit whose log sync fails.
        try engine.commit(WALBatch([.put(key: [3], value: [4])]))
        fileSystem.failNext(.syncData)
        #expect(throws: EngineError.self) { try engine.checkpoint() }
        try? engine.close(checkpoint: false)
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        fileSystem.failNext(.syncData)
        #expect(throws: EngineError.self) { try engine.commit(WALBatch([.put(key: [1], value: [2])])) }
        try? engine.close(checkpoint: false)

        let entries = handler.entries
        let opened = entries.filter { $0.level == .info && "\($0.message)" == "opened store" }
        #expect(opened.count == 3)
        #expect(opened.dropFirst().first?.metadata["checkpoint_version"] == "20")
        #expect(entries.contains { $0.level == .debug && "\($0.message)" == "checkpoint done" })
        #expect(entries.contains { $0.level == .debug && "\($0.message)".hasPrefix("released ") })
        #expect(entries.contains { $0.level == .warning && "\($0.message)" == "recovery cut the log" })
        #expect(entries.contains { $0.level == .error && "\($0.message)".hasPrefix("checkpoint failed") })
        #expect(entries.contains { $0.level == .error && "\($0.message)".contains("fdatasync failed") })
    }
}
