import Foundation
import StrataFileIO
import StrataWAL
import Synchronization
import Testing
@testable import StrataEngine

/// A store that stops writing folds its memtable into the tree once seeks keep paying for
/// it (`StorageEngine.checkpointIfQuiet`): the `quietSeekStreak`th seek in a row with no
/// commit between them starts a checkpoint when the memtable holds at least 1/16 of
/// `checkpointMemtableBytes`; a store that writes now and then, or whose memtable is
/// small, starts none that way.
@Suite struct QuietCheckpointTests {
    /// Checkpoints start at 256 KiB of memtable, so the quiet rule needs 16 KiB. No idle
    /// checkpoints (IdleCheckpointTests): a test slowed past the idle delay would fold
    /// memtables these tests expect to stay.
    private static var options: EngineOptions {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 256 << 10
        options.idleCheckpointDelay = nil
        return options
    }

    private static func open() throws -> StorageEngine {
        try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options).0
    }

    /// `count` seeks, each a walk of three keys from one of the keys `first ..< first +
    /// keys`, read from `snapshot` or a new snapshot of `engine`; each must find its three.
    private static func seek(_ count: Int, _ engine: StorageEngine, through snapshot: Snapshot? = nil,
                             first: Int = 0, keys: Int = 400) throws {
        for seek in 0..<count {
            let number = first + seek % (keys - 3)
            var found = 0
            try (snapshot ?? engine.snapshot()).forEach(KeyRange(from: BackgroundCheckpoints.key(number), to: BackgroundCheckpoints.key(number + 3))) { _, _ in
                found += 1
                return true
            }
            #expect(found == 3, "the seek from key \(number)")
        }
    }

    private static let streak = StorageEngine.quietSeekStreak

    @Test func seeksThroughAQuietMemtableFoldItIntoTheTree() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        let written = try engine.status()
        #expect(written.memtableKeys == 400 && written.memtableBytes >= 16 << 10 && written.checkpointVersion == 0)
        try Self.seek(Self.streak - 1, engine)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 400, "a checkpoint started before the streak was full")
        try Self.seek(1, engine)
        let folded = try BackgroundCheckpoints.settled(engine)
        #expect(folded.memtableKeys == 0 && folded.checkpointVersion == written.version)
        // The tree answers what the memtable did.
        let pairs = try engine.snapshot().scan()
        #expect(pairs.map(\.key) == (0..<400).map(BackgroundCheckpoints.key))
        #expect(pairs.allSatisfy { $0.value.count == 100 })
    }

    @Test func aStoreThatWritesBetweenItsSeeksStartsNoCheckpointThisWay() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        // A commit after every 1,000 seeks: never a streak of `quietSeekStreak`.
        for round in 0..<3 {
            try Self.seek(1_000, engine)
            try BackgroundCheckpoints.write((400 + round)..<(401 + round), to: engine)
        }
        try Self.seek(1_000, engine)
        let status = try BackgroundCheckpoints.settled(engine)
        #expect(status.checkpointVersion == 0 && status.memtableKeys == 403)
    }

    @Test func aSmallQuietMemtableIsLeftAlone() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        // 100 keys of about 120 bytes each: under 16 KiB.
        try BackgroundCheckpoints.write(0..<100, to: engine)
        #expect(try engine.status().memtableBytes < 16 << 10)
        try Self.seek(3 * Self.streak, engine, keys: 100)
        let status = try BackgroundCheckpoints.settled(engine)
        #expect(status.checkpointVersion == 0 && status.memtableKeys == 100)
    }

    /// Seeks made while a checkpoint runs count toward the streak: the first seek after it
    /// ended starts the next, and a memtable starts one such checkpoint at most.
    @Test func seeksWhileACheckpointRunsCount() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        // As if a checkpoint ran (of a memtable frozen before): no other starts meanwhile.
        engine.checkpointRunning.store(true, ordering: .releasing)
        let seeks = Result { try Self.seek(2 * Self.streak, engine) }
        engine.checkpointRunning.store(false, ordering: .releasing)
        try seeks.get()
        #expect(try engine.status().memtableKeys == 400)
        try Self.seek(1, engine)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 0)
        // The next memtable's own streak: it must be large enough and quiet in turn.
        try BackgroundCheckpoints.write(400..<800, to: engine)
        try Self.seek(Self.streak - 1, engine, first: 400)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 400)
        try Self.seek(1, engine, first: 400)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 0)
    }

    /// A checkpoint seeks started yields its thread's priority to the readers from its
    /// start (`CheckpointPacer`); `checkpoint()`, run on the caller's thread, leaves the
    /// caller's alone (CheckpointPacer.C1).
    @Test func aQuietCheckpointYieldsToTheReaders() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        let nice = CheckpointPacer.currentThreadNice
        try engine.checkpoint()
        #expect(engine.yieldedCheckpoints.load(ordering: .relaxed) == 0 && CheckpointPacer.currentThreadNice == nice)
        try BackgroundCheckpoints.write(400..<800, to: engine)
        try Self.seek(Self.streak, engine, first: 400)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 0)
        #if os(Linux)
        #expect(engine.yieldedCheckpoints.load(ordering: .relaxed) == 1)
        #endif
        #expect(CheckpointPacer.currentThreadNice == nice)
        // Only the writes' thread was lowered: the tree was published, under the locks
        // commits and readers wait for, by a thread at the priority of the one that
        // started the checkpoint, this one (CheckpointPacer.C1).
        #expect(engine.publishingThreadNice.load(ordering: .relaxed) == nice)
    }

    /// What a checkpoint's pacer watches to tell whether commits still come: the version of
    /// the last commit enqueued, set by every commit before it is durable (CheckpointPacer.C2).
    @Test func thePacersSignalFollowsEveryCommit() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        #expect(engine.lastEnqueuedVersion.load(ordering: .relaxed) == 0)
        for round in 0..<3 {
            try BackgroundCheckpoints.write((round * 10)..<(round * 10 + 10), to: engine)
            #expect(engine.lastEnqueuedVersion.load(ordering: .relaxed) == (try engine.status().version))
        }
        #expect(engine.lastEnqueuedVersion.load(ordering: .relaxed) > 0)
    }

    /// Where commits may wait for a checkpoint (`EngineOptions.maxMemtableBytes`), no
    /// checkpoint yields: a commit stalled behind one would wait as long as readers kept
    /// the CPUs.
    @Test func aStoreWhoseCommitsMayWaitForACheckpointNeverYields() throws {
        var options = Self.options
        options.maxMemtableBytes = 1 << 20
        let engine = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options).0
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        try Self.seek(Self.streak, engine)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 0)
        #expect(engine.yieldedCheckpoints.load(ordering: .relaxed) == 0)
    }

    /// An older snapshot's seeks count toward the memtable it reads, one a checkpoint froze
    /// since: they take its streak and start nothing, and leave the current memtable alone.
    @Test func anOlderSnapshotsSeeksLeaveTheCurrentMemtableAlone() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        let older = engine.snapshot()
        try engine.checkpoint()
        try BackgroundCheckpoints.write(400..<800, to: engine)
        try Self.seek(2 * Self.streak, engine, through: older)
        let status = try BackgroundCheckpoints.settled(engine)
        #expect(status.memtableKeys == 400 && status.checkpointVersion == older.version)
    }

    /// A read-only store (a reader beside a writer, or of a closed store) never checkpoints.
    @Test func aReadOnlyStoreStartsNoCheckpoint() throws {
        let fileSystem = SimulatedFileSystem()
        let (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        try BackgroundCheckpoints.write(0..<400, to: writer)
        try writer.close(checkpoint: false)   // the keys are in the log only
        let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem, options: Self.options)
        defer { try? reader.close() }
        #expect(try reader.status().memtableKeys == 400)
        try Self.seek(2 * Self.streak, reader)
        let running = reader.checkpointRunning.load(ordering: .acquiring)
        #expect(!running)
        #expect(try reader.status().memtableKeys == 400)
    }

    /// `Snapshot.count` of a range held only by the memtable is a seek too.
    @Test func countsAreSeeks() throws {
        let engine = try Self.open()
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        for number in 0..<Self.streak {
            #expect(try engine.snapshot().count(KeyRange(from: BackgroundCheckpoints.key(number % 397), to: BackgroundCheckpoints.key(number % 397 + 3))) == 3)
        }
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 0)
    }

    /// `close()` waits for a background checkpoint to end before it closes the files that
    /// checkpoint writes, even a close that checkpoints nothing itself; the checkpoint
    /// completes, and the store reopens with it.
    @Test func closeWaitsForABackgroundCheckpoint() throws {
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        try BackgroundCheckpoints.write(0..<400, to: engine)
        let version = engine.version
        // The quiet checkpoint held at its first sync of the data file, until released.
        let blocked = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), closed = DispatchSemaphore(value: 0)
        let gated = Atomic(true)
        fileSystem.observeSyncs { path in
            guard path.hasSuffix("/" + StorageEngine.dataFileName), gated.exchange(false, ordering: .acquiringAndReleasing) else { return }
            blocked.signal()
            release.wait()
        }
        try Self.seek(Self.streak, engine)
        #expect(blocked.wait(timeout: .now() + 30) == .success, "the streak started no checkpoint")
        let closeResult = Mutex<Result<Void, any Error>?>(nil)
        Thread.detachNewThread {
            let result = Result { try engine.close(checkpoint: false) }
            closeResult.withLock { $0 = result }
            closed.signal()
        }
        let closedEarly = closed.wait(timeout: .now() + 0.2) == .success
        #expect(!closedEarly, "close returned while a checkpoint ran")
        release.signal()
        if !closedEarly { closed.wait() }
        try closeResult.withLock { try $0?.get() }
        let stillRunning = engine.checkpointRunning.load(ordering: .acquiring)
        #expect(!stillRunning)
        fileSystem.observeSyncs(nil)
        let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        defer { try? reopened.close() }
        #expect(report.checkpointVersion == version && report.batchesReplayed == 0)
        #expect(try reopened.snapshot().scan().map(\.key) == (0..<400).map(BackgroundCheckpoints.key))
    }
}
