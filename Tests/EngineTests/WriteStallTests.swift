import Foundation
import StrataFileIO
import StrataWAL
import Synchronization
import Testing
@testable import StrataEngine

/// `EngineOptions.maxMemtableBytes`: while a checkpoint runs, commits fill the next
/// memtable up to the bound and then wait for that checkpoint (a write stall), so memory
/// stays bounded however slow the checkpoint is; once it ends they go on, and nothing
/// committed is lost. No bound by default.
@Suite struct WriteStallTests {
    @Test func commitsWaitForARunningCheckpointOnceTheMemtableIsFull() throws {
        let store = try GatedStore()
        store.startCommitter()
        store.checkpointBlocked.wait()
        // Without the bound, the committer would go through all 400 KB while the
        // checkpoint stands still; with it, it stops once the memtable holds 128 KiB.
        let stalledAt = try #require(store.stall(after: 0), "the committer did not stall (\(store.committedCount) commits)")
        #expect(stalledAt < GatedStore.batches)
        Thread.sleep(forTimeInterval: 0.2)
        #expect(store.committedCount == stalledAt, "a commit returned while the memtable was full")
        #expect(store.engine.snapshots.current.active.byteCount < GatedStore.bound + 2 * GatedStore.valueBytes)
        // The stalled commit is durable and visible already; only its return waits.
        #expect(try store.engine.snapshot().get(GatedStore.key(stalledAt)) == GatedStore.value(stalledAt))
        try store.finish()
    }

    /// A commit can fill the memtable before the checkpoint it started has frozen it: it
    /// waits for that freeze alone, then goes on into the next memtable up to the bound.
    @Test func aStallOnAMemtableNotFrozenYetEndsWhenItIsFrozen() throws {
        let store = try GatedStore()
        // Holding the checkpoint lock keeps the checkpoint the commits start from freezing.
        let held = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let engine = store.engine
        Thread.detachNewThread {
            engine.checkpointLock.withLock { _ in
                held.signal()
                release.wait()
            }
        }
        held.wait()
        store.startCommitter()
        let first = try #require(store.stall(after: 0), "the committer did not stall (\(store.committedCount) commits)")
        let checkpointRunning = engine.checkpointRunning.load(ordering: .acquiring)
        #expect(checkpointRunning)
        #expect(engine.snapshots.current.frozen == nil, "the checkpoint froze the memtable through the lock")
        release.signal()
        // The checkpoint froze the full memtable and now waits on its first sync of the data file.
        store.checkpointBlocked.wait()
        let second = try #require(store.stall(after: first), "the commits did not go on once the memtable was frozen (\(store.committedCount) commits, stalled at \(first))")
        let state = engine.snapshots.current
        #expect((state.frozen?.byteCount ?? 0) >= GatedStore.bound)
        #expect(state.active.byteCount >= GatedStore.bound)
        // The most the two memtables hold together (EngineOptions.smallFootprint's
        // documentation): twice the bound, and a commit's overshoot each.
        #expect((state.frozen?.byteCount ?? 0) + state.active.byteCount < 2 * (GatedStore.bound + 2 * GatedStore.valueBytes))
        #expect(second < GatedStore.batches)
        try store.finish()
    }

    @Test func aBoundBelowTheCheckpointThresholdIsRefused() {
        var options = EngineOptions()
        options.maxMemtableBytes = options.checkpointMemtableBytes - 1
        #expect(EngineOptions().maxMemtableBytes == nil)
        #expect { try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options) } throws: { error in
            guard case let EngineError.invalidOptions(message) = error else { return false }
            return message.contains("maxMemtableBytes")
        }
    }
}

/// A store whose memtable bound is 128 KiB and whose checkpoints start at 64 KiB, with a
/// committer writing 100 values of 4,000 bytes on a thread of its own, and every checkpoint's
/// first sync of the data file held until `finish()`.
private final class GatedStore: Sendable {
    static let bound = 128 << 10, batches = 100, valueBytes = 4_000

    static func key(_ index: Int) -> [UInt8] { Array("key\(index)".utf8) }
    static func value(_ index: Int) -> [UInt8] { [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: valueBytes) }

    let fileSystem = SimulatedFileSystem()
    let engine: StorageEngine
    /// Signalled when a checkpoint reaches its first sync of the data file, where it waits.
    let checkpointBlocked = DispatchSemaphore(value: 0)
    private let gate = DispatchSemaphore(value: 0)
    private let gated = Atomic(true)
    private let committed = Atomic(0)
    private let committerDone = DispatchSemaphore(value: 0)

    init() throws {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 64 << 10
        options.maxMemtableBytes = Self.bound
        // Only the thresholds start checkpoints: an idle one, started while the committer
        // waits on a gated checkpoint, would take the gate.
        options.idleCheckpointDelay = nil
        engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options).engine
        fileSystem.observeSyncs { [weak self] path in
            guard let self, path.hasSuffix("/" + StorageEngine.dataFileName), gated.load(ordering: .acquiring) else { return }
            checkpointBlocked.signal()
            gate.wait()
        }
    }

    var committedCount: Int { committed.load(ordering: .acquiring) }

    func startCommitter() {
        Thread.detachNewThread { [self] in
            for index in 0..<Self.batches {
                guard (try? engine.commit(WALBatch([.put(key: Self.key(index), value: Self.value(index))]))) != nil else { break }
                committed.add(1, ordering: .releasing)
            }
            committerDone.signal()
        }
    }

    /// The count of commits returned once the committer stands still, past `previous`,
    /// with the memtable taking commits at the bound; nil if it does not within 10 s (a
    /// loaded machine; a stall shows within tens of milliseconds).
    func stall(after previous: Int) -> Int? {
        for _ in 0..<500 {
            let before = committedCount
            Thread.sleep(forTimeInterval: 0.02)
            if before == committedCount, before > previous, engine.snapshots.current.active.byteCount >= Self.bound {
                return before
            }
        }
        return nil
    }

    /// Lets the checkpoints go on, waits for every commit, checks each is there and the
    /// file is sound, and closes the store.
    func finish() throws {
        gated.store(false, ordering: .releasing)
        gate.signal()
        committerDone.wait()
        fileSystem.observeSyncs(nil)
        #expect(committedCount == Self.batches)
        let snapshot = engine.snapshot()
        for index in 0..<Self.batches {
            #expect(try snapshot.get(Self.key(index))?.first == UInt8(truncatingIfNeeded: index))
        }
        #expect(engine.verify().isValid)
        try engine.close()
    }
}
