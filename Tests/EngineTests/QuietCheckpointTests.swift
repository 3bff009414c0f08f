import Foundation
import StrataFileIO
import StrataWAL
import Testing
@testable import StrataEngine

/// A store that stops writing folds its memtable into the tree once seeks keep paying for
/// it (`StorageEngine.checkpointIfQuiet`): the `quietSeekStreak`th seek in a row with no
/// commit between them starts a checkpoint when the memtable holds at least 1/16 of
/// `checkpointMemtableBytes`; a store that writes now and then, or whose memtable is
/// small, starts none that way.
@Suite struct QuietCheckpointTests {
    /// Checkpoints start at 256 KiB of memtable, so the quiet rule needs 16 KiB.
    private static var options: EngineOptions {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 256 << 10
        return options
    }

    private static func open() throws -> StorageEngine {
        try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options).0
    }

    private static func key(_ number: Int) -> [UInt8] { Array(String(format: "k%05d", number).utf8) }

    /// Commits keys `range`, each with a 100-byte value.
    private static func write(_ range: Range<Int>, to engine: StorageEngine) throws {
        var batch = WALBatch()
        for number in range { batch.put(key(number), [UInt8](repeating: UInt8(truncatingIfNeeded: number), count: 100)) }
        try engine.commit(batch)
    }

    /// A seek: the keys of a short range from key `number` on, read from a new snapshot.
    private static func seek(_ engine: StorageEngine, _ number: Int) throws -> Int {
        var found = 0
        try engine.snapshot().forEach(KeyRange(from: key(number), to: key(number + 3))) { _, _ in
            found += 1
            return true
        }
        return found
    }

    /// Waits for a background checkpoint to end (at most 30 s).
    private static func waitForCheckpoints(_ engine: StorageEngine) {
        let deadline = ContinuousClock.now + .seconds(30)
        while engine.checkpointRunning.load(ordering: .acquiring), ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.001) }
    }

    @Test func seeksThroughAQuietMemtableFoldItIntoTheTree() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try Self.write(0..<400, to: engine)
        let written = try engine.status()
        #expect(written.memtableKeys == 400 && written.memtableBytes >= 16 << 10 && written.checkpointVersion == 0)
        for number in 0..<(StorageEngine.quietSeekStreak - 1) { #expect(try Self.seek(engine, number % 397) == 3) }
        Self.waitForCheckpoints(engine)
        #expect(try engine.status().memtableKeys == 400, "a checkpoint started before the streak was full")
        #expect(try Self.seek(engine, 0) == 3)
        Self.waitForCheckpoints(engine)
        let folded = try engine.status()
        #expect(folded.memtableKeys == 0 && folded.checkpointVersion == written.version)
        // The tree answers what the memtable did.
        let pairs = try engine.snapshot().scan()
        #expect(pairs.map(\.key) == (0..<400).map(Self.key))
        #expect(pairs.allSatisfy { $0.value.count == 100 })
    }

    @Test func aStoreThatWritesBetweenItsSeeksStartsNoCheckpointThisWay() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try Self.write(0..<400, to: engine)
        // A commit after every 1,000 seeks: never a streak of `quietSeekStreak`.
        for round in 0..<3 {
            for number in 0..<1_000 { _ = try Self.seek(engine, number % 397) }
            try Self.write((400 + round)..<(401 + round), to: engine)
        }
        for number in 0..<1_000 { _ = try Self.seek(engine, number % 397) }
        Self.waitForCheckpoints(engine)
        let status = try engine.status()
        #expect(status.checkpointVersion == 0 && status.memtableKeys == 403)
    }

    @Test func aSmallQuietMemtableIsLeftAlone() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        // 100 keys of about 120 bytes each: under 16 KiB.
        try Self.write(0..<100, to: engine)
        #expect(try engine.status().memtableBytes < 16 << 10)
        for number in 0..<(3 * StorageEngine.quietSeekStreak) { _ = try Self.seek(engine, number % 97) }
        Self.waitForCheckpoints(engine)
        let status = try engine.status()
        #expect(status.checkpointVersion == 0 && status.memtableKeys == 100)
    }

    /// Seeks made while a checkpoint runs count toward the streak: the first seek after it
    /// ended starts the next, and a memtable starts one such checkpoint at most.
    @Test func seeksWhileACheckpointRunsCount() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try Self.write(0..<400, to: engine)
        // As if a checkpoint ran (of a memtable frozen before): no other starts meanwhile.
        engine.checkpointRunning.store(true, ordering: .releasing)
        let seeks = Result { for number in 0..<(2 * StorageEngine.quietSeekStreak) { _ = try Self.seek(engine, number % 397) } }
        engine.checkpointRunning.store(false, ordering: .releasing)
        try seeks.get()
        #expect(try engine.status().memtableKeys == 400)
        _ = try Self.seek(engine, 0)
        Self.waitForCheckpoints(engine)
        #expect(try engine.status().memtableKeys == 0)
        // The next memtable's own streak: it must be large enough and quiet in turn.
        try Self.write(400..<800, to: engine)
        for number in 0..<(StorageEngine.quietSeekStreak - 1) { _ = try Self.seek(engine, 400 + number % 397) }
        Self.waitForCheckpoints(engine)
        #expect(try engine.status().memtableKeys == 400)
        _ = try Self.seek(engine, 400)
        Self.waitForCheckpoints(engine)
        #expect(try engine.status().memtableKeys == 0)
    }

    /// An older snapshot's seeks count toward the memtable it reads, one a checkpoint froze
    /// since: they take its streak and start nothing, and leave the current memtable alone.
    @Test func anOlderSnapshotsSeeksLeaveTheCurrentMemtableAlone() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try Self.write(0..<400, to: engine)
        let older = engine.snapshot()
        try engine.checkpoint()
        try Self.write(400..<800, to: engine)
        for number in 0..<(2 * StorageEngine.quietSeekStreak) {
            var found = 0
            try older.forEach(KeyRange(from: Self.key(number % 397), to: Self.key(number % 397 + 3))) { _, _ in
                found += 1
                return true
            }
            #expect(found == 3)
        }
        Self.waitForCheckpoints(engine)
        let status = try engine.status()
        #expect(status.memtableKeys == 400 && status.checkpointVersion == older.version)
    }

    /// A read-only store (a reader beside a writer, or of a closed store) never checkpoints.
    @Test func aReadOnlyStoreStartsNoCheckpoint() throws {
        let fileSystem = SimulatedFileSystem()
        let (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        try Self.write(0..<400, to: writer)
        try writer.close(checkpoint: false)   // the keys are in the log only
        let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem, options: Self.options)
        defer { try? reader.close() }
        #expect(try reader.status().memtableKeys == 400)
        for number in 0..<(2 * StorageEngine.quietSeekStreak) { #expect(try Self.seek(reader, number % 397) == 3) }
        let running = reader.checkpointRunning.load(ordering: .acquiring)
        #expect(!running)
        #expect(try reader.status().memtableKeys == 400)
    }

    /// `Snapshot.count` of a range held only by the memtable is a seek too.
    @Test func countsAreSeeks() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try Self.write(0..<400, to: engine)
        for number in 0..<StorageEngine.quietSeekStreak {
            #expect(try engine.snapshot().count(KeyRange(from: Self.key(number % 397), to: Self.key(number % 397 + 3))) == 3)
        }
        Self.waitForCheckpoints(engine)
        #expect(try engine.status().memtableKeys == 0)
    }
}
