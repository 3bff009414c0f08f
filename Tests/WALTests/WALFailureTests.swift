import StrataFileIO
import StrataLocks
import Foundation
import Testing
@testable import StrataWAL
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed write or fdatasync stops the log (WriteAheadLog.W6): waiters learn that their outcome is
/// unknown, nothing is written or synced again, and a reopen recovers a prefix.
@Suite struct WALFailureTests {
    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6])
    func aFailedFdatasyncFailsTheCommitStopsTheLogAndReopenRecoversAPrefix(seed: UInt64) throws {
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        let acknowledged = (0..<3).map { _ in generator.batch() }
        for batch in acknowledged { try log.append(batch) }

        fileSystem.failNext(.syncData, errno: EIO)
        let failed = generator.batch()
        #expect {
            try log.append(failed)
        } throws: { error in
            guard case let WALError.commitOutcomeUnknown(lsn, cause) = error else { return false }
            return lsn == LSN(4) && cause == .ioError(operation: .syncData, path: cause.path)
        }
        let syncs = fileSystem.count(of: .syncData)
        let writes = fileSystem.count(of: .write)
        #expect(throws: WALError.self) { try log.append(generator.batch()) }
        #expect(throws: WALError.self) { try log.sync() }
        #expect(fileSystem.count(of: .syncData) == syncs, "an fdatasync is never retried")
        #expect(fileSystem.count(of: .write) == writes, "nothing is written after the failure")
        #expect(log.failure != nil)
        try log.close()

        fileSystem.crash(.random(seed: seed))
        let (_, records, _) = try openLog(fileSystem)
        let recovered = records.map(\.batch)
        #expect(recovered == acknowledged || recovered == acknowledged + [failed])
    }

    @Test func everyWaiterOfTheFailedGroupIsToldTheOutcomeIsUnknownAndNobodyHangs() throws {
        let simulated = SimulatedFileSystem()
        simulated.setSyncLatency(.milliseconds(2))
        let (log, _) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: simulated,
                                              options: WALOptions(segmentBytes: 1 << 20))
        let outcomes = Locked<[String: Int]>([:])
        let acknowledged = Locked<[LSN: WALBatch]>([:])
        runConcurrently(threads: 6) { thread in
            var generator = BatchGenerator(seed: UInt64(thread))
            for index in 0..<20 {
                if thread == 0 && index == 5 { simulated.failNext(.syncData, errno: EIO) }
                let batch = workloadBatch(thread: thread, index: index, generator: &generator)
                do {
                    let lsn = try log.append(batch)
                    acknowledged.withLock { $0[lsn] = batch }
                    outcomes.withLock { $0["acknowledged", default: 0] += 1 }
                } catch WALError.commitOutcomeUnknown {
                    outcomes.withLock { $0["unknown", default: 0] += 1 }
                } catch WALError.logFailed {
                    outcomes.withLock { $0["refused", default: 0] += 1 }
                } catch {
                    Issue.record("unexpected \(error)")
                }
            }
        }
        let counts = outcomes.withLock { $0 }
        print("outcomes: \(counts)")
        #expect(counts["unknown", default: 0] >= 1)
        #expect(counts.values.reduce(0, +) == 120)
        try log.close()
        simulated.crash(.dropAll)
        let (records, _) = try readLog(simulated)
        let acked = acknowledged.withLock { $0 }
        for (lsn, batch) in acked { #expect(records.first { $0.lsn == lsn }?.batch == batch) }
        #expect(records.count <= acked.count + counts["unknown", default: 0])
    }

    @Test func aFailedWriteIsAlsoFinal() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        try log.append(WALBatch([.put(key: [1], value: [1])]))
        fileSystem.failNext(.write, errno: ENOSPC)
        #expect {
            try log.append(WALBatch([.put(key: [2], value: [2])]))
        } throws: { error in
            guard case let WALError.commitOutcomeUnknown(_, cause) = error, case .noSpace = cause else { return false }
            return true
        }
        #expect(throws: WALError.self) { try log.append(WALBatch()) }
        try log.close()
        let (_, records, _) = try openLog(fileSystem)
        #expect(records.count == 1)
    }

    @Test func aFailureWhileStartingASegmentWritesNothingAndSaysSo() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem, options: WALOptions(segmentBytes: 4096))
        var generator = BatchGenerator(seed: 12)
        // Fail the rename that would give the next segment its name.
        fileSystem.failNext(.rename, errno: EIO)
        while log.statistics.segmentsStarted == 1 {
            do {
                try log.append(generator.batch(maxValueBytes: 300))
            } catch let error as WALError {
                guard case .logFailed = error else {
                    Issue.record("a failure before any frame was written must say nothing was written, got \(error)")
                    return
                }
                break
            }
        }
        #expect(log.failure != nil)
    }

    @Test func relaxedModeReturnsBeforeSyncingAndSyncMakesItDurable() throws {
        let fileSystem = SimulatedFileSystem()
        var options = WALOptions(durability: .relaxed, segmentBytes: 64 << 10)
        options.maxSpareSegments = 1
        let (log, _, _) = try openLog(fileSystem, options: options)
        var generator = BatchGenerator(seed: 9)
        let syncs = fileSystem.count(of: .syncData)
        let synced = (0..<10).map { _ in generator.batch() }
        for batch in synced { try log.append(batch) }
        #expect(fileSystem.count(of: .syncData) == syncs)
        #expect(log.writtenLSN == LSN(10) && log.durableLSN == LSN.none)
        try log.sync()
        #expect(log.durableLSN == LSN(10))
        let unsynced = (0..<5).map { _ in generator.batch() }
        for batch in unsynced { try log.append(batch) }

        // A process kill keeps what was written; a power loss keeps at least what was synced.
        let killed = SimulatedFileSystem()
        for name in try fileSystem.contentsOfDirectory("/db/wal") where name.hasSuffix(".seg") {
            try killed.createDirectoryDurably("/db/wal")
            let file = try killed.open("/db/wal/" + name, options: [.create, .write])
            try file.write(fileSystem.contents(of: "/db/wal/" + name)!, at: 0)
        }
        killed.crash(.keepAll)
        #expect(try readLog(killed).0.map(\.batch) == synced + unsynced)
        fileSystem.crash(.dropAll)
        #expect(try readLog(fileSystem).0.map(\.batch) == synced)
    }
}

extension WALFailureTests {
    /// FORMAT.md: recovery syncs the last segment and the directory before the log takes
    /// appends, so what it replayed after a process kill survives a later power loss.
    @Test func whatRecoveryReplayedSurvivesALaterPowerLoss() throws {
        let fileSystem = SimulatedFileSystem()
        let options = WALOptions(durability: .relaxed, segmentBytes: 4096)
        let (log, _, _) = try openLog(fileSystem, options: options)
        var generator = BatchGenerator(seed: 17)
        let batches = (0..<30).map { _ in generator.batch(maxValueBytes: 200) }
        for batch in batches { try log.append(batch) }
        #expect(log.durableLSN < LSN(30), "relaxed appends stay unsynced until a rotation or sync")
        fileSystem.crash(.keepAll)
        let (reopened, replayed, _) = try openLog(fileSystem, options: options)
        #expect(replayed.map(\.batch) == batches)
        try reopened.close()
        fileSystem.crash(.dropAll)
        #expect(try readLog(fileSystem).0.map(\.batch) == batches)
    }
}
