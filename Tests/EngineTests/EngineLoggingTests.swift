// Logging: silent unless asked (the default logger drops everything), and with a logger
// the application passes, opening, checkpoints, released segments and a failed fdatasync
// are each logged at their level.
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
        try engine.close()
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        fileSystem.failNext(.syncData)
        #expect(throws: EngineError.self) { try engine.commit(WALBatch([.put(key: [1], value: [2])])) }
        try? engine.close(checkpoint: false)

        let entries = handler.entries
        let opened = entries.filter { $0.level == .info && "\($0.message)" == "opened store" }
        #expect(opened.count == 2)
        #expect(opened.last?.metadata["checkpoint_version"] == "20")
        #expect(entries.contains { $0.level == .debug && "\($0.message)" == "checkpoint done" })
        #expect(entries.contains { $0.level == .debug && "\($0.message)".hasPrefix("released ") })
        #expect(entries.contains { $0.level == .error && "\($0.message)".contains("fdatasync failed") })
    }
}
