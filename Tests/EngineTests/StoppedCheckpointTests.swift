import Dispatch
import Foundation
import StrataFileIO
import StrataWAL
import Synchronization
import Testing
@testable import StrataEngine

/// A close that meets a background checkpoint stops it, when that writes less, and folds
/// its memtable and the one that took commits since in one pass: nothing either holds is
/// lost, the newer memtable's change of a key wins, and the store reopens with nothing to
/// replay.
@Suite struct StoppedCheckpointTests {
    static func key(_ number: Int) -> [UInt8] { BackgroundCheckpoints.key(number) }
    static func value(_ number: Int, _ round: Int) -> [UInt8] {
        [UInt8](repeating: UInt8(truncatingIfNeeded: number &* 7 &+ round), count: 100)
    }

    /// Keys in the store before the held checkpoint (a tree of a few dozen leaves).
    static let keyCount = 1_200

    static var options: EngineOptions {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 64 << 10
        // Only the commits' thresholds start checkpoints.
        options.idleCheckpointDelay = nil
        return options
    }

    /// What a held close did: the store's keys as committed, the last version, the
    /// background checkpoints stopped, what the close threw, and the file system's
    /// operations from the held checkpoint's release to the close's end.
    struct HeldClose {
        var model: [[UInt8]: [UInt8]]
        var lastVersion: UInt64
        var stopped: Int
        var closeError: String?
        var operations: Int
    }

    /// What the memtable after the held checkpoint's holds.
    enum Second: Sendable {
        /// Keys the first memtable rewrote or deleted, rewritten again or deleted; keys it
        /// deleted, put back; new keys.
        case over
        /// New keys only, past every key the first holds.
        case apart
        /// Two keys among the first's: the close's own pass after the running one would
        /// rewrite two leaves.
        case few

    }

    /// Fills a store, holds the next background checkpoint at its first write to the data
    /// file, commits a `second` memtable, and closes the store meanwhile; with `cut`, the
    /// power goes out at that operation after the hold is released.
    ///
    /// With `afterACheckpoint`, one checkpoint runs to its end first, so that the held one
    /// writes into the pages the fill's tree left (the fold then lands within the tree's
    /// size); without it, the held one writes past the fill's tree, and so would the fold.
    /// Without `filled`, the store starts empty, and its first checkpoint has no tree to
    /// rewrite.
    static func heldClose(_ fileSystem: SimulatedFileSystem, second: Second = .over, afterACheckpoint: Bool = true,
                          filled: Bool = true, cut: Int? = nil) throws -> HeldClose {
        var model: [[UInt8]: [UInt8]] = [:]
        // Every key checkpointed (by the close, in one pass).
        if filled {
            let filling = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
            var fill = WALBatch()
            for number in 0..<keyCount {
                fill.put(key(number), value(number, 0))
                model[key(number)] = value(number, 0)
            }
            try filling.commit(fill)
            try filling.close()
        }

        let engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options).engine
        func commit(_ changes: [(Int, [UInt8]?)]) throws {
            var batch = WALBatch()
            for (number, value) in changes {
                if let value { batch.put(key(number), value) } else { batch.delete(key(number)) }
                model[key(number)] = value
            }
            try engine.commit(batch)
        }
        let stopsBefore = engine.stoppedCheckpoints.load(ordering: .relaxed)

        // Keys rewritten, a quarter of them deleted, until a checkpoint starts.
        var round = 0
        func rewriteUntilACheckpointStarts() throws {
            repeat {
                round += 1
                try commit(stride(from: round, to: keyCount, by: 15).map { ($0 / 15) % 4 == 0 ? ($0, nil) : ($0, value($0, round)) })
                try #require(round < 1_000, "no checkpoint started")
            } while !engine.checkpointRunning.load(ordering: .acquiring)
        }
        // One checkpoint runs to its end: the pages it frees are reusable at the next.
        if afterACheckpoint {
            try rewriteUntilACheckpointStarts()
            _ = try BackgroundCheckpoints.settled(engine)
        }
        // The next is held at its first write to the data file, its memtable (the first
        // of the two the close folds) frozen.
        let hold = Hold()
        fileSystem.observeWrites { path in
            guard path.hasSuffix("/" + StorageEngine.dataFileName),
                  hold.armed.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged else { return }
            hold.entered.signal()
            hold.release.wait()
        }
        try rewriteUntilACheckpointStarts()
        hold.entered.wait()
        let frozen = try #require(engine.snapshots.current.frozen, "the running checkpoint froze no memtable")
        #expect(frozen.count > 0)
        // The second memtable, while the checkpoint is held.
        switch second {
        case .over:
            let rewritten = stride(from: 1, to: keyCount, by: 30).map { $0 }
            let both = rewritten.filter { number in
                key(number).withUnsafeBytes { frozen.firstNode(atLeast: $0)?.compare(with: $0) == 0 }
            }
            #expect(!both.isEmpty, "the two memtables share no key: the fold's order goes untested")
            try commit(rewritten.map { ($0 / 30) % 3 == 0 ? ($0, nil) : ($0, value($0, 1_000)) })
            try commit(stride(from: 2, to: keyCount, by: 60).map { ($0, value($0, 2_000)) })
            try commit((keyCount..<keyCount + 100).map { ($0, value($0, 3_000)) })
        case .apart:
            try commit((keyCount..<keyCount + 100).map { ($0, value($0, 3_000)) })
        case .few:
            try commit([(1, value(1, 4_000)), (keyCount - 1, value(keyCount - 1, 4_000))])
        }
        let lastVersion = engine.version
        #expect(engine.snapshots.current.active.count > 0)

        // The close asks the held checkpoint to stop, unless the memtables' keys lie
        // apart; once it goes on, it stops if the weighing says stopping writes less.
        Thread.detachNewThread {
            do { try engine.close() } catch { hold.closeError.withLock { $0 = "\(error)" } }
            hold.closed.signal()
        }
        let deadline = ContinuousClock.now + .seconds(30)
        func closeDecided() -> Bool {
            second == .apart ? engine.commitLock.withLock { $0.closed } : engine.checkpointStopRequested.load(ordering: .relaxed)
        }
        while !closeDecided(), ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.001) }
        // (Past `closed`, the close decides at once; a stop asked for would come before this.)
        if second == .apart { Thread.sleep(forTimeInterval: 0.05) }
        let stopRequested = engine.checkpointStopRequested.load(ordering: .relaxed)

        #expect(stopRequested == (second != .apart))
        let released = fileSystem.operationCount
        if let cut { fileSystem.cutPower(atOperation: released + cut) }
        hold.release.signal()
        hold.closed.wait()
        fileSystem.observeWrites(nil)
        return HeldClose(model: model, lastVersion: lastVersion,
                         stopped: engine.stoppedCheckpoints.load(ordering: .relaxed) - stopsBefore,
                         closeError: hold.closeError.withLock { $0 }, operations: fileSystem.operationCount - released)
    }

    /// Checks that the store at /db holds exactly `model`, and verifies.
    static func expectHolds(_ model: [[UInt8]: [UInt8]], _ engine: StorageEngine, _ comment: Comment? = nil) throws {
        let snapshot = engine.snapshot()
        for (key, value) in model {
            #expect(try snapshot.get(key) == value, "key \(String(decoding: key, as: UTF8.self)) \(comment.map { "\($0)" } ?? "")")
        }
        var stored = 0
        try snapshot.forEach { _, _ in
            stored += 1
            return true
        }
        #expect(stored == model.count, comment)
        let verification = engine.verify()
        #expect(verification.isValid, "\(verification) \(comment.map { "\($0)" } ?? "")")
    }

    /// After a checkpoint, whose old tree's pages the held one writes into; and the first
    /// checkpoint of an empty store, which replaces nothing: stopped, the fold writes the
    /// tree once.
    @Test(arguments: [true, false])
    func aCloseStopsARunningCheckpointAndFoldsBothMemtables(filled: Bool) throws {
        let fileSystem = SimulatedFileSystem()
        let held = try Self.heldClose(fileSystem, afterACheckpoint: filled, filled: filled)
        #expect(held.closeError == nil)
        #expect(held.stopped == 1)
        let reopened = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options).engine
        defer { try? reopened.close() }
        // The close's checkpoint folded everything: the log holds nothing to replay.
        #expect(reopened.checkpointLock.withLock { $0.meta.checkpointVersion } == held.lastVersion)
        #expect(reopened.snapshots.current.active.isEmpty)
        try Self.expectHolds(held.model, reopened)
    }

    /// A memtable whose keys all lie past the running checkpoint's (a fill in key order)
    /// lands in other leaves, and one of a few keys in a few. And with no checkpoint ended
    /// since the fill, whose tree has no free page within its size, the held checkpoint
    /// writes past that tree, and a fold would too, for the close's vacuum to move the
    /// whole tree back; let end, it frees the fill's pages, where the close's own pass
    /// lands. In each case the close lets that checkpoint end, then checkpoints the
    /// memtable after it.
    @Test(arguments: [(StoppedCheckpointTests.Second.apart, true), (.few, true), (.over, false)])
    func aCloseLetsTheCheckpointEndWhenStoppingWouldWriteMore(second: Second, afterACheckpoint: Bool) throws {
        let fileSystem = SimulatedFileSystem()
        let held = try Self.heldClose(fileSystem, second: second, afterACheckpoint: afterACheckpoint)
        #expect(held.closeError == nil)
        #expect(held.stopped == 0)
        let reopened = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options).engine
        defer { try? reopened.close() }
        #expect(reopened.checkpointLock.withLock { $0.meta.checkpointVersion } == held.lastVersion)
        try Self.expectHolds(held.model, reopened)
    }

    /// The close's weighing (`StorageEngine.StopCosts`) in the layouts it meets, with a
    /// tree of 29,000 pages and memtables of random keys.
    @Test func aStopIsWeighedByWhatItWritesAndWhereItLands() {
        typealias Costs = StorageEngine.StopCosts
        // An overwrite right after a load: the old tree fills the file, no page free. The
        // running pass writes past it, and so would a fold, for the vacuum to move back;
        // let end, the running pass frees the old tree's pages for the close's.
        let loaded = Costs(treePages: 29_000, pageCount: 29_010, free: [], frozenKeys: 500_000, activeKeys: 500_000)
        #expect(!loaded.stopPays(pagesWritten: 64, pagesReplaced: 64))
        #expect(!loaded.stopPays(pagesWritten: 20_000, pagesReplaced: 20_000))
        // An overwrite after another: the old tree past the free pages, which the fold
        // fills, where the close's pass after the running one would land past them.
        let freeFirst = (2..<29_002).map(UInt64.init)
        let overwritten = Costs(treePages: 29_000, pageCount: 58_010, free: freeFirst, frozenKeys: 500_000, activeKeys: 500_000)
        #expect(overwritten.stopPays(pagesWritten: 64, pagesReplaced: 64))
        #expect(overwritten.stopPays(pagesWritten: 28_000, pagesReplaced: 28_000))
        // A few keys taking commits since: the close's own pass writes a few pages.
        let few = Costs(treePages: 29_000, pageCount: 58_010, free: freeFirst, frozenKeys: 500_000, activeKeys: 2)
        #expect(!few.stopPays(pagesWritten: 64, pagesReplaced: 64))
        // A fill's second memtable doubling a tree of 14,500 pages that fills the file:
        // the grown tree needs the pages past it, where the running pass and the fold
        // both land. Stopping saves the rest of the running pass while most of it is ahead.
        let filling = Costs(treePages: 14_500, pageCount: 14_510, free: [], frozenKeys: 500_000, activeKeys: 40_000)
        #expect(filling.stopPays(pagesWritten: 128, pagesReplaced: 64))
        #expect(!filling.stopPays(pagesWritten: 28_000, pagesReplaced: 14_000))
        // Taken as an overwrite (as many pages written as replaced), the same layout lets
        // the running pass end.
        #expect(!filling.stopPays(pagesWritten: 64, pagesReplaced: 64))
        // A fill's first checkpoint, into an empty tree (taken as the 13,500 pages its
        // memtable's bytes fill; it replaces nothing): stopped, the fold writes the tree
        // once; let end, the close's pass rewrites the leaves its keys land in, past the
        // tree, for the vacuum to move back.
        let first = Costs(treePages: 13_500, pageCount: 2, free: [], frozenKeys: 480_000, activeKeys: 220_000)
        #expect(first.stopPays(pagesWritten: 64, pagesReplaced: 0))
        #expect(first.stopPays(pagesWritten: 12_000, pagesReplaced: 0))
        #expect(!Costs(treePages: 13_500, pageCount: 2, free: [], frozenKeys: 480_000, activeKeys: 2)
            .stopPays(pagesWritten: 64, pagesReplaced: 0))
        #expect(Costs.rewritten(0, of: 100) == 0)
        #expect(abs(Costs.rewritten(100, of: 100) - 63.2) < 0.1)
    }

    /// A crash at each operation after the held checkpoint's release loses no commit: each
    /// was acknowledged before the close. Stopped, the close's checkpoint folds both
    /// memtables (after a checkpoint); let end (no checkpoint ended since the fill, so a
    /// fold would land past the tree), the running checkpoint writes its rest and its
    /// meta page, then the close checkpoints the memtable after it. Then the vacuum and
    /// the log's shrinking.
    @Test(arguments: [true, false])
    func aCrashAtEveryOperationOfTheCloseLosesNothing(stopping: Bool) throws {
        let dry = SimulatedFileSystem()
        let dryRun = try Self.heldClose(dry, afterACheckpoint: stopping)
        let operations = dryRun.operations
        print("the close (\(stopping ? "stopping" : "letting end") the checkpoint) took \(operations) operations after the release")
        #expect(dryRun.stopped == (stopping ? 1 : 0))
        #expect(operations > 3)
        for cut in 0..<operations {
            let fileSystem = SimulatedFileSystem()
            let held = try Self.heldClose(fileSystem, afterACheckpoint: stopping, cut: cut)
            fileSystem.crash(.random(seed: 43 &* UInt64(cut) &+ 1))
            let reopened = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options).engine
            try Self.expectHolds(held.model, reopened, "cut at \(cut)")
            try reopened.close()
        }
    }
}

/// Where the test holds the checkpoint, and how its close ends.
private final class Hold: Sendable {
    let armed = Atomic(true)
    let entered = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let closed = DispatchSemaphore(value: 0)
    let closeError = Mutex<String?>(nil)
}
