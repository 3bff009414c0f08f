import StrataFileIO
import StrataLocks
import Foundation
import Testing
@testable import StrataWAL

/// Runs `body(thread)` on `threads` threads at once and waits for all of them.
func runConcurrently(threads: Int, _ body: @escaping @Sendable (Int) -> Void) {
    _ = runConcurrently(threads: threads, within: .distantFuture, body)
}

/// Runs `body(thread)` on `threads` threads at once and waits for all of them until
/// `deadline`; returns whether they all finished (a thread still running is left to run).
func runConcurrently(threads: Int, within deadline: DispatchTime, _ body: @escaping @Sendable (Int) -> Void) -> Bool {
    let group = DispatchGroup()
    for thread in 0..<threads {
        group.enter()
        Thread.detachNewThread {
            body(thread)
            group.leave()
        }
    }
    return group.wait(timeout: deadline) == .success
}

/// The batch thread `thread` appends as its `index`-th: its key says whose it is.
func workloadBatch(thread: Int, index: Int, generator: inout BatchGenerator) -> WALBatch {
    WALBatch([.put(key: [UInt8(thread), UInt8(index)], value: generator.value(Int(generator.random.next() % 300)))])
}

@Suite struct GroupCommitTests {
    @Test func concurrentAppendersShareWritesAndFdatasyncs() throws {
        let simulated = SimulatedFileSystem()
        simulated.setSyncLatency(.milliseconds(2))
        let (log, _) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: simulated,
                                              options: WALOptions(segmentBytes: 1 << 20))
        let syncsBefore = simulated.count(of: .syncData)
        let acknowledged = Locked<[LSN: WALBatch]>([:])
        runConcurrently(threads: 8) { thread in
            var generator = BatchGenerator(seed: UInt64(thread))
            for index in 0..<25 {
                let batch = workloadBatch(thread: thread, index: index, generator: &generator)
                do {
                    let lsn = try log.append(batch)
                    acknowledged.withLock { $0[lsn] = batch }
                } catch {
                    Issue.record("append failed: \(error)")
                }
            }
        }
        let statistics = log.statistics
        let syncs = simulated.count(of: .syncData) - syncsBefore
        print("200 appends from 8 threads: \(statistics.groupCount) groups, \(syncs) fdatasyncs, largest group \(statistics.largestGroup)")
        #expect(statistics.appendCount == 200)
        #expect(syncs == statistics.groupCount, "exactly one fdatasync per group")
        #expect(statistics.groupCount < 200, "appenders waiting behind a sync must share the next one")
        #expect(statistics.largestGroup > 1)
        try log.close()
        let (records, _) = try readLog(simulated)
        let acked = acknowledged.withLock { $0 }
        #expect(records.count == 200)
        for record in records { #expect(acked[record.lsn] == record.batch) }
    }

    /// Each waiter sleeps alone and is woken by whoever made it ready. Seven committers
    /// queue their batches while a first group's fdatasync runs, and its leader commits
    /// nothing more: the sleeper waiting for the oldest queued batch must be woken to lead
    /// them. Then groups cut to one batch each (`maxGroupBytes`) leave batches queued after
    /// every group, and a failed fdatasync must wake every sleeper with an error. A lost
    /// wake leaves a thread asleep past the deadline.
    @Test func everySleepingCommitterIsWokenToLeadOrToReturn() throws {
        let simulated = SimulatedFileSystem()
        var options = WALOptions(segmentBytes: 1 << 20)
        options.maxGroupBytes = 1
        let (log, _) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: simulated, options: options)
        simulated.setSyncLatency(.milliseconds(250))
        let syncing = DispatchSemaphore(value: 0)
        simulated.observeSyncs { _ in for _ in 1..<8 { syncing.signal() } }
        let queuedBehind = runConcurrently(threads: 8, within: .now() + 30) { thread in
            var generator = BatchGenerator(seed: UInt64(thread))
            if thread > 0 { syncing.wait() }
            do { try log.append(workloadBatch(thread: thread, index: 0, generator: &generator)) } catch {
                Issue.record("append failed: \(error)")
            }
        }
        simulated.observeSyncs(nil)
        try #require(queuedBehind, "no committer was woken to lead the batches queued behind a group")
        #expect(log.statistics.appendCount == 8)

        simulated.setSyncLatency(.microseconds(300))
        let finished = runConcurrently(threads: 8, within: .now() + 30) { thread in
            var generator = BatchGenerator(seed: UInt64(thread))
            for index in 1...40 {
                do { try log.append(workloadBatch(thread: thread, index: index, generator: &generator)) } catch {
                    Issue.record("append failed: \(error)")
                }
            }
        }
        try #require(finished, "a committer slept through its wake (8 threads, groups of one batch)")
        #expect(log.statistics.appendCount == 328)

        let failed = Locked(0)
        simulated.failNext(.syncData, persistent: true)
        let ended = runConcurrently(threads: 8, within: .now() + 30) { thread in
            var generator = BatchGenerator(seed: UInt64(100 + thread))
            for index in 0..<5 {
                do { try log.append(workloadBatch(thread: thread, index: index, generator: &generator)) } catch {
                    failed.withLock { $0 += 1 }
                }
            }
        }
        try #require(ended, "a committer slept through the failed fdatasync")
        #expect(failed.withLock { $0 } == 40, "every append after the failed fdatasync fails")
        #expect(log.failure != nil)
        try? log.close()
    }

    /// A leader whose own batch is not in the group it wrote (groups of one batch here)
    /// leads the next group too; the committer whose batch the first group made durable is
    /// woken before that next group's fdatasync, not after it.
    @Test func aCommitterIsWokenOnceItsGroupIsDurableThoughItsLeaderLeadsOn() throws {
        let simulated = SimulatedFileSystem()
        var options = WALOptions(segmentBytes: 1 << 20)
        options.maxGroupBytes = 1
        let (log, _) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: simulated, options: options)
        var generator = BatchGenerator(seed: 9)
        let first = try log.submit(workloadBatch(thread: 0, index: 0, generator: &generator))
        let second = try log.submit(workloadBatch(thread: 0, index: 1, generator: &generator))
        let syncs = Locked(0)
        let asleep = DispatchSemaphore(value: 0), returned = DispatchSemaphore(value: 0)
        let wokenInTime = Locked<Bool?>(nil)
        simulated.observeSyncs { _ in
            let sync = syncs.withLock { count in
                count += 1
                return count
            }
            // The first group's fdatasync: the other committer goes to sleep for its batch
            // (and is asleep before this fdatasync ends).
            if sync == 1 {
                asleep.signal()
                let deadline = ContinuousClock.now + .seconds(10)
                while ContinuousClock.now < deadline {
                    log.monitor.lock()
                    let sleeping = log.state.sleepers.count
                    log.monitor.unlock()
                    if sleeping == 1 { break }
                    usleep(1_000)
                }
            }
            // The second's: the committer of the first group's batch must be on its way.
            if sync == 2 { wokenInTime.withLock { $0 = returned.wait(timeout: .now() + 10) == .success } }
        }
        let done = runConcurrently(threads: 2, within: .now() + 60) { thread in
            do {
                if thread == 0 {
                    try log.waitUntilDone(second)
                } else {
                    asleep.wait()
                    try log.waitUntilDone(first)
                    returned.signal()
                }
            } catch {
                Issue.record("wait failed: \(error)")
            }
        }
        simulated.observeSyncs(nil)
        try #require(done)
        #expect(syncs.withLock { $0 } == 2)
        #expect(wokenInTime.withLock { $0 } == true, "the committer of the first group slept through the second group's fdatasync")
        try log.close()
    }

    @Test func eachDurableAppendOnItsOwnCostsExactlyOneFdatasync() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        var generator = BatchGenerator(seed: 4)
        for _ in 0..<20 {
            let before = fileSystem.count(of: .syncData)
            let operations = fileSystem.operationCount
            try log.append(generator.batch())
            #expect(fileSystem.count(of: .syncData) - before == 1)
            #expect(fileSystem.operationCount - operations == 2, "one write and one fdatasync")
        }
    }

    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6, 7, 8])
    func aCrashAtAnyOperationKeepsEveryAcknowledgedBatchAsAPrefix(seed: UInt64) throws {
        print("seed \(seed)")
        let dryRun = try runCrashWorkload(seed: seed, cutAt: nil).operations
        #expect(dryRun > 60, "the workload should perform its appends, rotations and releases")
        var lostUnacknowledged = 0
        for cut in 0...dryRun {
            let outcome = try runCrashWorkload(seed: seed &* 1_000_003 &+ UInt64(cut), cutAt: cut)
            lostUnacknowledged += outcome.recovered < outcome.attempted ? 1 : 0
        }
        print("seed \(seed): crashed at each of \(dryRun + 1) operations; \(lostUnacknowledged) crashes lost unacknowledged batches")
    }

    /// The group-commit suite at its CI size: 1,000 seeds, each a crash at a
    /// seeded operation of the concurrent workload below (I1, I2, I4), and for every tenth
    /// seed an uncrashed run whose fdatasyncs are counted: exactly one per group commit.
    @Test func thousandSeededInterleavingsKeepAcknowledgedBatchesAndOneFdatasyncPerGroup() throws {
        var groupedRuns = 0
        for seed in UInt64(1)...1_000 {
            var random = SplitMix64(seed: seed)
            _ = try runCrashWorkload(seed: seed, cutAt: Int(random.next() % 120))
            guard seed % 10 == 0 else { continue }
            let fileSystem = SimulatedFileSystem()
            let (log, _) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: fileSystem,
                                                  options: WALOptions(segmentBytes: 1 << 20))
            let syncsAfterOpen = fileSystem.count(of: .syncData)
            runConcurrently(threads: 4) { thread in
                var generator = BatchGenerator(seed: seed &+ UInt64(thread))
                for index in 0..<8 { _ = try? log.append(workloadBatch(thread: thread, index: index, generator: &generator)) }
            }
            let statistics = log.statistics
            #expect(statistics.appendCount == 32 && statistics.groupCount <= 32, "seed \(seed)")
            #expect(fileSystem.count(of: .syncData) - syncsAfterOpen == statistics.groupCount, "seed \(seed)")
            if statistics.groupCount < 32 { groupedRuns += 1 }
            try log.close()
        }
        print("1,000 seeded crashes of concurrent appenders; \(groupedRuns) of 100 uncrashed runs shared an fdatasync")
    }

    /// A checkpoint's release of old segments (a rename or removal and a directory sync
    /// each) does not hold up group commits: an append made while a long release runs is
    /// durable before the release ends.
    @Test func appendsGoOnWhileSegmentsAreReleased() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem, options: WALOptions(segmentBytes: 4096))
        var generator = BatchGenerator(seed: 8)
        while log.segmentPaths.count < 10 { try log.append(generator.batch(maxValueBytes: 300)) }
        let through = log.durableLSN
        try log.append(WALBatch([.put(key: [1], value: [1])]))
        fileSystem.setSyncLatency(.milliseconds(100))
        defer { fileSystem.setSyncLatency(.zero) }
        let releaseStarted = DispatchSemaphore(value: 0)
        fileSystem.observeSyncs { path in if path == "/db/wal" { releaseStarted.signal() } }
        let events = Locked<[String]>([])
        let released = Locked(0)
        let releaser = Thread {
            released.withLock { $0 = (try? log.releaseSegments(through: through)) ?? -1 }
            events.withLock { $0.append("released") }
        }
        releaser.start()
        releaseStarted.wait()
        fileSystem.observeSyncs(nil)
        try log.append(WALBatch([.put(key: [2], value: [2])]))
        events.withLock { $0.append("appended") }
        while events.withLock({ $0.count }) < 2 { Thread.sleep(forTimeInterval: 0.01) }
        #expect(released.withLock { $0 } >= 8)
        #expect(events.withLock { $0 } == ["appended", "released"], "the append waited for the release")
        try log.close()
    }

    /// Four threads append eight batches each to a log with small segments while the main
    /// thread releases segments; power is cut at operation `cutAt`, then the log is
    /// recovered and checked (I1, I2, I4). Returns the operations the run performed and the
    /// batches it attempted and recovered.
    private func runCrashWorkload(seed: UInt64, cutAt: Int?) throws -> (operations: Int, attempted: Int, recovered: Int) {
        let fileSystem = SimulatedFileSystem()
        if let cutAt { fileSystem.cutPower(atOperation: cutAt) }
        let options = WALOptions(segmentBytes: 4096)
        let acknowledged = Locked<[LSN: WALBatch]>([:])
        let released = Locked(LSN.none)
        let attempted = Locked(0)
        if let (log, _) = try? WriteAheadLog.open(directory: "/db/wal", fileSystem: fileSystem, options: options) {
            runConcurrently(threads: 5) { thread in
                guard thread < 4 else {
                    for _ in 0..<6 {
                        // A release that fails may still have taken effect, like any write
                        // whose outcome is unknown: count it as soon as it is attempted.
                        let durable = log.durableLSN
                        released.withLock { $0 = max($0, durable) }
                        _ = try? log.releaseSegments(through: durable)
                    }
                    return
                }
                var generator = BatchGenerator(seed: seed &+ UInt64(thread))
                for index in 0..<8 {
                    let batch = workloadBatch(thread: thread, index: index, generator: &generator)
                    attempted.withLock { $0 += 1 }
                    guard let lsn = try? log.append(batch) else { return }
                    acknowledged.withLock { $0[lsn] = batch }
                }
            }
            try? log.close()
        }
        let operations = fileSystem.operationCount
        fileSystem.crash(.random(seed: seed))

        let (log, records, report) = try openLog(fileSystem, options: options)
        let acked = acknowledged.withLock { $0 }
        let releasedThrough = released.withLock { $0 }
        // I2: the recovered batches are consecutive LSNs, each one a batch some thread appended, once.
        var seen = Set<[UInt8]>()
        for (index, record) in records.enumerated() {
            #expect(index == 0 || record.lsn == records[index - 1].lsn.next)
            let key = record.batch.operations.first?.key ?? []
            #expect(key.count == 2 && key[0] < 4 && key[1] < 8, "a batch nobody appended came back")
            #expect(seen.insert(key).inserted, "a batch came back twice")
        }
        // I1: every acknowledged batch is there with its LSN, unless a release covered it.
        let first = records.first?.lsn ?? report.lastLSN.next
        for (lsn, batch) in acked {
            if lsn >= first {
                #expect(records.first { $0.lsn == lsn }?.batch == batch, "acknowledged \(lsn) lost (cut at \(String(describing: cutAt)))")
            } else {
                #expect(lsn <= releasedThrough, "acknowledged \(lsn) lost before the log's start (cut at \(String(describing: cutAt)))")
            }
        }
        // I4: the recovered log takes appends and reopens.
        let next = try log.append(WALBatch([.delete(key: [9, 9])]))
        #expect(next == (records.last?.lsn.next ?? next))
        try log.close()
        let (reopened, again, _) = try openLog(fileSystem, options: options)
        #expect(again.last?.lsn == next)
        try reopened.close()
        let releasedCount = records.first.map { Int($0.lsn.rawValue) - 1 } ?? Int(report.lastLSN.rawValue)
        return (operations, attempted.withLock { $0 }, records.count + releasedCount)
    }

    @Test func rotationAndReleaseSyncTheDirectoryAndReuseSpareSegments() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem, options: WALOptions(segmentBytes: 4096))
        #expect(fileSystem.isDirectorySynced("/db/wal"))
        var generator = BatchGenerator(seed: 6)
        for _ in 0..<80 {
            try log.append(generator.batch(maxValueBytes: 300))
            #expect(fileSystem.isDirectorySynced("/db/wal"))
        }
        let segmentsBefore = log.segmentPaths.count
        #expect(segmentsBefore >= 4)
        #expect(try log.releaseSegments(through: log.durableLSN) == segmentsBefore - 1)
        #expect(fileSystem.isDirectorySynced("/db/wal"))
        let spares = try fileSystem.contentsOfDirectory("/db/wal").filter { $0.contains("spare") }
        #expect(spares.count == 2, "two released segments are kept as spares, the rest removed")
        let allocationsBefore = fileSystem.count(of: .allocate)
        let startedBefore = log.statistics.segmentsStarted
        while log.statistics.segmentsStarted < startedBefore + 2 { try log.append(generator.batch(maxValueBytes: 300)) }
        #expect(fileSystem.count(of: .allocate) == allocationsBefore, "spares are reused without allocating")
        #expect(try fileSystem.contentsOfDirectory("/db/wal").filter { $0.contains("spare") }.isEmpty)
        let last = log.durableLSN
        try log.close()
        let (records, report) = try readLog(fileSystem)
        #expect(records.last?.lsn == last)
        #expect(report.firstLSN > LSN(1))
    }
}

/// Recovery must be idempotent: a crash at any operation of a recovery (which may cut a
/// torn tail and start a new segment) leaves a log that recovers to the same batches.
@Suite struct RecoveryCrashTests {
    @Test(arguments: [UInt64(11), 12, 13, 14])
    func aCrashDuringRecoveryRecoversTheSameBatches(seed: UInt64) throws {
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        let options = WALOptions(segmentBytes: 4096)
        // A crash state with a torn tail: the last group's write is cut short.
        let original = SimulatedFileSystem()
        let (log, _, _) = try openLog(original, options: options)
        let batches = (0..<12).map { _ in generator.batch(maxValueBytes: 120) }
        for batch in batches { try log.append(batch) }
        original.failNext(.syncData, errno: EIO)
        _ = try? log.append(generator.batch(maxValueBytes: 2000))
        original.crash(.random(seed: seed))
        let expected = try readLog(original).0.map(\.batch)
        #expect(expected == batches || expected.count == batches.count + 1)

        // Count the operations of a clean recovery, then crash at each of them.
        let probe = try copy(original)
        let before = probe.operationCount
        let (recovered, _, _) = try openLog(probe, options: options)
        try recovered.close()
        let recoveryOperations = probe.operationCount - before
        for cut in 0..<recoveryOperations {
            let fileSystem = try copy(original)
            fileSystem.cutPower(atOperation: fileSystem.operationCount + cut)
            if let (interrupted, _, _) = try? openLog(fileSystem, options: options) { try? interrupted.close() }
            fileSystem.crash(.random(seed: seed &+ UInt64(cut)))
            let (again, records, _) = try openLog(fileSystem, options: options)
            #expect(records.map(\.batch) == expected, "crash at operation \(cut) of recovery")
            try again.append(WALBatch())
            try again.close()
        }
    }

    /// A copy of every durable file of `/db/wal`, as a fresh file system would see it.
    private func copy(_ source: SimulatedFileSystem) throws -> SimulatedFileSystem {
        let target = SimulatedFileSystem()
        try target.createDirectoryDurably("/db/wal")
        for name in try source.contentsOfDirectory("/db/wal") {
            let file = try target.open("/db/wal/" + name, options: [.create, .write])
            try file.write(try #require(source.contents(of: "/db/wal/" + name)), at: 0)
            try file.sync()
        }
        try target.syncDirectory("/db/wal")
        return target
    }
}
