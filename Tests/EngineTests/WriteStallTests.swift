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
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.checkpointMemtableBytes = 64 << 10
        let bound = 128 << 10
        options.maxMemtableBytes = bound
        let engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options).engine
        // The checkpoint's first sync of the data file waits until the gate opens.
        let gate = DispatchSemaphore(value: 0)
        let checkpointBlocked = DispatchSemaphore(value: 0)
        let gated = Atomic(true)
        fileSystem.observeSyncs { path in
            guard path.hasSuffix("/" + StorageEngine.dataFileName), gated.load(ordering: .acquiring) else { return }
            checkpointBlocked.signal()
            gate.wait()
        }
        let batches = 100, valueBytes = 4_000
        let committed = Atomic(0)
        let committerDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            for index in 0..<batches {
                let value = [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: valueBytes)
                guard (try? engine.commit(WALBatch([.put(key: Array("key\(index)".utf8), value: value)]))) != nil else { break }
                committed.add(1, ordering: .releasing)
            }
            committerDone.signal()
        }
        checkpointBlocked.wait()
        // Without the bound, the committer would go through all 400 KB while the
        // checkpoint stands still; with it, it stops once the memtable holds 128 KiB.
        var stalledAt = -1
        for _ in 0..<500 {   // up to 10 s, for a loaded machine; a stall shows within tens of ms
            let before = committed.load(ordering: .acquiring)
            Thread.sleep(forTimeInterval: 0.02)
            if before == committed.load(ordering: .acquiring), before > 0, engine.snapshots.current.active.byteCount >= bound {
                stalledAt = before
                break
            }
        }
        #expect(stalledAt > 0 && stalledAt < batches, "the committer did not stall (\(committed.load(ordering: .acquiring)) commits)")
        Thread.sleep(forTimeInterval: 0.2)
        #expect(committed.load(ordering: .acquiring) == stalledAt, "a commit returned while the memtable was full")
        #expect(engine.snapshots.current.active.byteCount < bound + 2 * valueBytes)
        // The stalled commit is durable and visible already; only its return waits.
        #expect(try engine.snapshot().get(Array("key\(stalledAt)".utf8)) == [UInt8](repeating: UInt8(stalledAt), count: valueBytes))
        gated.store(false, ordering: .releasing)
        gate.signal()
        committerDone.wait()
        fileSystem.observeSyncs(nil)
        #expect(committed.load(ordering: .acquiring) == batches)
        let snapshot = engine.snapshot()
        for index in 0..<batches {
            #expect(try snapshot.get(Array("key\(index)".utf8))?.first == UInt8(truncatingIfNeeded: index))
        }
        #expect(engine.verify().isValid)
        try engine.close()
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
