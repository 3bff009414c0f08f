import Foundation
import StrataFileIO
import StrataWAL
import Testing
@testable import StrataEngine

/// A store that stops writing folds its memtable into the tree once it took no commit for
/// `EngineOptions.idleCheckpointDelay` (`StorageEngine.idleTick`, `checkpointIfIdle`),
/// when the memtable holds at least 1/16 of `checkpointMemtableBytes`; a store that
/// commits between two ticks, or whose memtable is small, starts none that way.
@Suite struct IdleCheckpointTests {
    /// Checkpoints start at 256 KiB of memtable, so the idle rule needs 16 KiB.
    private static func options(idleDelay: Duration?) -> EngineOptions {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 256 << 10
        options.idleCheckpointDelay = idleDelay
        return options
    }

    /// Ticks driven by the test: a delay no timer reaches while the test runs.
    private static let never = Duration.seconds(3_600)

    /// Through the timer: the memtable is folded once the store took no commit for the
    /// delay and is freed (no snapshot reads it), the store replays nothing when it
    /// crashes after it, and the tree holds every pair.
    @Test func anIdleMemtableIsFoldedAfterTheDelay() throws {
        let fileSystem = SimulatedFileSystem()
        let options = Self.options(idleDelay: .milliseconds(50))
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        try BackgroundCheckpoints.write(0..<400, to: engine)
        let version = engine.version
        weak let written = engine.snapshots.current.active
        let deadline = ContinuousClock.now + .seconds(30)
        while try engine.status().checkpointVersion < version, ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        let folded = try BackgroundCheckpoints.settled(engine)
        #expect(folded.checkpointVersion == version && folded.memtableKeys == 0)
        // Freed once the last reference goes: the idle tick that started the checkpoint
        // holds the state it looked at until it returns, and the checkpoint's thread the
        // memtable until it exits, which under load came after the checkpoint was seen
        // to end (in fourteen runs of twenty-five beside three busy loops).
        while written != nil, ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        #expect(written == nil, "the folded memtable is still held")
        // The ticks stop once the store is idle.
        while engine.idleTimerArmed.load(ordering: .acquiring), ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        let armed = engine.idleTimerArmed.load(ordering: .acquiring)
        #expect(!armed)
        // Power lost now (nothing more reaches the disk, and what was not synced is lost):
        // the store replays no batch.
        fileSystem.cutPower(atOperation: fileSystem.operationCount)
        try? engine.close(checkpoint: false)
        fileSystem.crash(.dropAll)
        let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        defer { try? reopened.close() }
        #expect(report.checkpointVersion == version && report.batchesReplayed == 0)
        let pairs = try reopened.snapshot().scan()
        #expect(pairs.map(\.key) == (0..<400).map(BackgroundCheckpoints.key))
        #expect(pairs.allSatisfy { $0.value.count == 100 })
    }

    /// A tick that finds a commit since the last one starts nothing; the next tick with
    /// none between them folds the memtable.
    @Test func aTickAfterACommitWaitsForTheNext() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: Self.options(idleDelay: nil))
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        let seen = engine.version
        try BackgroundCheckpoints.write(400..<401, to: engine)
        engine.idleTick(after: Self.never, seen: seen)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 401, "a tick after a commit started a checkpoint")
        engine.idleTick(after: Self.never, seen: engine.version)
        let folded = try BackgroundCheckpoints.settled(engine)
        #expect(folded.memtableKeys == 0 && folded.checkpointVersion == engine.version)
    }

    @Test func aSmallIdleMemtableIsLeftAlone() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: Self.options(idleDelay: nil))
        defer { try? engine.close() }
        // 100 keys of about 120 bytes each: under 16 KiB.
        try BackgroundCheckpoints.write(0..<100, to: engine)
        #expect(try engine.status().memtableBytes < 16 << 10)
        engine.idleTick(after: Self.never, seen: engine.version)
        let status = try BackgroundCheckpoints.settled(engine)
        #expect(status.checkpointVersion == 0 && status.memtableKeys == 100)
    }

    /// A tick while a checkpoint runs starts none and keeps the ticks going; the memtable
    /// taking commits is folded by a tick after that checkpoint ends.
    @Test func aTickWhileACheckpointRunsWaits() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: Self.options(idleDelay: nil))
        defer { try? engine.close() }
        try BackgroundCheckpoints.write(0..<400, to: engine)
        engine.idleTimerArmed.store(true, ordering: .releasing)   // as a commit arms it
        engine.checkpointRunning.store(true, ordering: .releasing)
        engine.idleTick(after: Self.never, seen: engine.version)
        engine.checkpointRunning.store(false, ordering: .releasing)
        let stillArmed = engine.idleTimerArmed.load(ordering: .acquiring)
        #expect(stillArmed, "a tick during a checkpoint stopped the ticks")
        #expect(try engine.status().memtableKeys == 400)
        engine.idleTick(after: Self.never, seen: engine.version)
        #expect(try BackgroundCheckpoints.settled(engine).memtableKeys == 0)
        let armed = engine.idleTimerArmed.load(ordering: .acquiring)
        #expect(!armed)
    }

    /// A tick after `close()` starts nothing and stops the ticks, even one that finds a
    /// commit since the tick before.
    @Test func aClosedStoreTicksNoMore() throws {
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options(idleDelay: nil))
        try BackgroundCheckpoints.write(0..<400, to: engine)
        try engine.close(checkpoint: false)
        for seen in [engine.version - 1, engine.version] {
            engine.idleTimerArmed.store(true, ordering: .releasing)
            engine.idleTick(after: Self.never, seen: seen)
            let armed = engine.idleTimerArmed.load(ordering: .acquiring)
            #expect(!armed, "a tick of a closed store went on (it saw version \(seen))")
        }
        _ = try BackgroundCheckpoints.settled(engine)
        let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options(idleDelay: nil))
        defer { try? reopened.close() }
        #expect(report.checkpointVersion == 0 && report.batchesReplayed == 1)
    }

    /// A delay under 10 ms (a timer that would tick without pause while commits come) is
    /// refused.
    @Test func aDelayUnderTenMillisecondsIsRefused() throws {
        for delay in [Duration.zero, .milliseconds(9)] {
            #expect(throws: EngineError.self) {
                _ = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: Self.options(idleDelay: delay))
            }
        }
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(),
                                                 options: Self.options(idleDelay: .milliseconds(10)))
        try engine.close()
    }
}
