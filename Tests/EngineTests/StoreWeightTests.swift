import Foundation
import StrataFileIO
import Testing
import StrataWAL
@testable import StrataEngine

@Suite struct StoreWeightTests {
    /// Keys `key<round>-0` … of `keys` random values of `valueBytes` each.
    private func randomBatch(round: Int, keys: Int, valueBytes: Int, random: inout SplitMix64) -> WALBatch {
        var batch = WALBatch()
        for index in 0..<keys {
            batch.put(Array("key\(round)-\(index)".utf8), (0..<valueBytes).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        }
        return batch
    }

    /// Every file of the store with its bytes.
    private func files(_ fileSystem: SimulatedFileSystem) throws -> [String: [UInt8]] {
        var result: [String: [UInt8]] = [:]
        for name in try fileSystem.contentsOfDirectory("/db") where name != "wal" {
            result["/db/" + name] = fileSystem.contents(of: "/db/" + name)
        }
        for name in try fileSystem.contentsOfDirectory("/db/wal") {
            result["/db/wal/" + name] = fileSystem.contents(of: "/db/wal/" + name)
        }
        return result
    }

    /// After a checkpoint the log holds no batch the checkpoint covers: with no commit
    /// after it, the active segment is replaced by a fresh one at once (and kept as a spare
    /// for reuse), so a store killed now replays only newer batches when it reopens.
    @Test func aCheckpointReleasesEverySegmentItCoversTheActiveOneToo() throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.checkpointMemtableBytes = .max
        options.checkpointLogBytes = .max
        var (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        func commitRound(_ round: Int) throws {
            var batch = WALBatch()
            for index in 0..<50 { batch.put(Array("key\(round)-\(index)".utf8), [UInt8](repeating: UInt8(round & 0xFF), count: 200)) }
            try engine.commit(batch)
        }
        for round in 0..<40 { try commitRound(round) }
        try engine.checkpoint()
        let extent = engine.logExtent
        #expect(extent.segmentPaths.count == 1 && extent.activeBytes == WALFormat.segmentHeaderBytes,
                "\(extent.segmentPaths) \(extent.activeBytes)")
        #expect(extent.oldestLSN == LSN(41))
        #expect(try fileSystem.contentsOfDirectory("/db/wal").contains { $0.hasPrefix("wal-spare-") })

        for round in 40..<60 { try commitRound(round) }
        try engine.close(checkpoint: false)  // as a killed process leaves it
        let report: RecoveryReport
        (engine, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        #expect(report.batchesReplayed == 20 && report.log.batchCount == 20, "\(report)")
        #expect(try engine.snapshot().get(Array("key59-7".utf8)) != nil && engine.snapshot().get(Array("key3-7".utf8)) != nil)
        try engine.close()
    }

    /// A store whose checkpoints replaced most of its tree (random overwrites), closed.
    private func overwrittenStore(_ fileSystem: SimulatedFileSystem, seed: UInt64) throws -> [[UInt8]: [UInt8]] {
        var options = EngineOptions()
        options.checkpointMemtableBytes = .max
        options.checkpointLogBytes = .max
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        var random = SplitMix64(seed: seed)
        for round in 0..<6 {
            var batch = WALBatch()
            for _ in 0..<400 {
                let key = Array("key\(random.next() % 1500)".utf8)
                batch.put(key, [UInt8](repeating: UInt8(truncatingIfNeeded: round), count: Int(random.next() % 300)))
            }
            try engine.commit(batch)
            try engine.checkpoint()
        }
        let expected = Dictionary(uniqueKeysWithValues: try engine.snapshot().scan().map { ($0.key, $0.value) })
        try engine.close(checkpoint: false)
        return expected
    }

    /// A close after a checkpoint that left a fifth of the data file free moves the tree's
    /// pages out of the file's tail and truncates it; the store reads the same, verifies,
    /// and takes commits and checkpoints after.
    @Test func aCloseGivesFreePagesBackAndTheStoreReadsTheSame() throws {
        print("seed 21")
        let fileSystem = SimulatedFileSystem()
        let expected = try overwrittenStore(fileSystem, seed: 21)
        var (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        let before = try #require(fileSystem.contents(of: "/db/data")).count
        let freeBefore = engine.verify().freePages
        #expect(freeBefore * 5 >= before / 4096, "the workload must leave a fifth free: \(freeBefore) of \(before / 4096)")
        try engine.commit(WALBatch([.put(key: Array("key7".utf8), value: [9])]))
        try engine.close()
        let after = try #require(fileSystem.contents(of: "/db/data")).count
        print("data file: \(before) bytes before the close, \(after) after")
        #expect(after * 10 < before * 9)
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        var wanted = expected
        wanted[Array("key7".utf8)] = [9]
        #expect(Dictionary(uniqueKeysWithValues: try engine.snapshot().scan().map { ($0.key, $0.value) }) == wanted)
        let report = engine.verify()
        #expect(report.isValid && UInt64(after / 4096) == report.pageCount, "\(report)")
        for round in 0..<3 {
            try engine.commit(WALBatch([.put(key: Array("later\(round)".utf8), value: [UInt8](repeating: 1, count: 200))]))
            try engine.checkpoint()
        }
        #expect(engine.verify().isValid)
        try engine.close()
    }

    /// A close with nothing left to checkpoint, after a background checkpoint (one the
    /// thresholds, a quiet memtable or an idle store started), still gives free pages back.
    @Test func aCloseAfterABackgroundCheckpointGivesFreePagesBack() throws {
        print("seed 21")
        let fileSystem = SimulatedFileSystem()
        _ = try overwrittenStore(fileSystem, seed: 21)
        var options = EngineOptions()
        options.checkpointMemtableBytes = 1   // every commit starts a background checkpoint
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        let before = try #require(fileSystem.contents(of: "/db/data")).count
        try engine.commit(WALBatch([.put(key: Array("key7".utf8), value: [9])]))
        let deadline = ContinuousClock.now + .seconds(30)
        while engine.checkpointLock.withLock({ $0.meta.checkpointVersion }) < engine.version, ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.001)
        }
        #expect(engine.checkpointLock.withLock { $0.meta.checkpointVersion } == engine.version)
        try engine.close()
        let after = try #require(fileSystem.contents(of: "/db/data")).count
        print("data file: \(before) bytes before the close, \(after) after")
        #expect(after * 10 < before * 9)
        let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        defer { try? reopened.close() }
        #expect(report.batchesReplayed == 0 && reopened.verify().isValid)
        #expect(try reopened.snapshot().get(Array("key7".utf8)) == [9])
    }

    /// With less than a fifth free, a close still cuts off the free pages at the end of
    /// the file (moving nothing): the last page of a closed store is never a free one.
    @Test func aCloseCutsOffFreePagesAtTheEndOfTheFile() throws {
        let fileSystem = SimulatedFileSystem()
        var (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        for round in 0..<5 {
            var batch = WALBatch()
            for index in 0..<300 { batch.put(Array("key\(round * 300 + index + 100_000)".utf8), [UInt8](repeating: 3, count: 100)) }
            try engine.commit(batch)
            try engine.checkpoint()
        }
        let pagesBefore = engine.checkpointLock.withLock { $0.meta.pageCount }
        let freeBefore = engine.checkpointLock.withLock { $0.reusable + $0.pending.flatMap(\.pages) + $0.freeListPages }
        #expect(freeBefore.contains(PageID(pagesBefore - 1)), "the workload must leave the last page free")
        #expect(UInt64(freeBefore.count) * 5 < pagesBefore, "and less than a fifth of the file free")
        try engine.commit(WALBatch([.put(key: Array("key100000".utf8), value: [4])]))
        try engine.close()
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        let (pages, free) = engine.checkpointLock.withLock { ($0.meta.pageCount, $0.reusable + $0.freeListPages) }
        #expect(!free.contains(PageID(pages - 1)) && pages < pagesBefore, "\(pages) pages, \(pagesBefore) before")
        #expect(try #require(fileSystem.contents(of: "/db/data")).count == Int(pages) * 4096)
        #expect(try engine.verify().isValid && engine.snapshot().get(Array("key100000".utf8)) == [4])
        try engine.close()
    }

    /// A store emptied of every key closes to its two meta pages: every other page of the
    /// data file is free, so none is moved and the file is cut to them. A power cut at
    /// every operation of that close loses nothing, and the store takes keys again.
    @Test func aStoreEmptiedOfEveryKeyClosesToItsMetaPages() throws {
        let base = SimulatedFileSystem()
        let filling = try StorageEngine.open(path: "/db", fileSystem: base).engine
        var deletes = WALBatch()
        for round in 0..<4 {
            var batch = WALBatch()
            for index in 0..<500 {
                batch.put(Array("key\(round)-\(index)".utf8), [UInt8](repeating: UInt8(round), count: 300))
                deletes.delete(Array("key\(round)-\(index)".utf8))
            }
            // One value in a run of overflow pages, freed with its key.
            batch.put(Array("large\(round)".utf8), [UInt8](repeating: 7, count: 20_000))
            deletes.delete(Array("large\(round)".utf8))
            try filling.commit(batch)
            try filling.checkpoint()
        }
        try filling.close()
        let filled = try #require(base.contents(of: "/db/data")).count

        let dry = base.clone()
        var engine = try StorageEngine.open(path: "/db", fileSystem: dry).engine
        try engine.commit(deletes)
        let start = dry.operationCount
        try engine.close()
        let closeOperations = dry.operationCount - start
        let emptied = try #require(dry.contents(of: "/db/data")).count
        print("data file: \(filled) bytes filled, \(emptied) emptied and closed")
        #expect(emptied == 2 * 4096)
        engine = try StorageEngine.open(path: "/db", fileSystem: dry).engine
        #expect(try engine.snapshot().scan().isEmpty)
        #expect(engine.verify().isValid, "\(engine.verify())")
        try engine.commit(WALBatch([.put(key: Array("again".utf8), value: [1])]))
        try engine.close()
        engine = try StorageEngine.open(path: "/db", fileSystem: dry).engine
        #expect(try engine.snapshot().get(Array("again".utf8)) == [1] && engine.verify().isValid)
        try engine.close()

        for cut in 0..<closeOperations {
            let fileSystem = base.clone()
            let emptying = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
            try emptying.commit(deletes)
            fileSystem.cutPower(atOperation: fileSystem.operationCount + cut)
            try? emptying.close()
            fileSystem.crash(.random(seed: 23 &+ UInt64(cut)))
            let reopened = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
            #expect(try reopened.snapshot().scan().isEmpty, "power cut at operation \(cut) of the close")
            #expect(reopened.verify().isValid, "power cut at operation \(cut) of the close")
            try reopened.close()
        }
        print("power cut at each of the \(closeOperations) operations of an emptied store's close")
    }

    /// A power cut at every operation of a close that moves pages and truncates: the
    /// reopened store holds every acknowledged commit and verifies.
    @Test func aPowerCutAnywhereInAVacuumingCloseLosesNothing() throws {
        print("seed 22")
        let base = SimulatedFileSystem()
        var expected = try overwrittenStore(base, seed: 22)
        expected[Array("key7".utf8)] = [9]
        // The dry run counts the close's operations.
        let dry = base.clone()
        let (dryEngine, _) = try StorageEngine.open(path: "/db", fileSystem: dry)
        try dryEngine.commit(WALBatch([.put(key: Array("key7".utf8), value: [9])]))
        let start = dry.operationCount
        try dryEngine.close()
        let closeOperations = dry.operationCount - start
        #expect(try #require(dry.contents(of: "/db/data")).count < #require(base.contents(of: "/db/data")).count)
        for cut in 0..<closeOperations {
            let fileSystem = base.clone()
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
            try engine.commit(WALBatch([.put(key: Array("key7".utf8), value: [9])]))
            fileSystem.cutPower(atOperation: fileSystem.operationCount + cut)
            try? engine.close()
            fileSystem.crash(.random(seed: 22 &+ UInt64(cut)))
            let (reopened, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
            let contents = Dictionary(uniqueKeysWithValues: try reopened.snapshot().scan().map { ($0.key, $0.value) })
            #expect(contents == expected, "power cut at operation \(cut) of the close")
            #expect(reopened.verify().isValid, "power cut at operation \(cut) of the close")
            try reopened.close()
        }
        print("power cut at each of the \(closeOperations) operations of a vacuuming close")
    }

    /// A closed store is its data file plus one small log segment, whatever its log held
    /// while open; closing a store with nothing new writes nothing.
    @Test func aClosedStoreIsItsDataAndOneSmallSegment() throws {
        let fileSystem = SimulatedFileSystem()
        var (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        try engine.commit(WALBatch([.put(key: Array("a".utf8), value: Array("1".utf8))]))
        try engine.close()
        var stored = try files(fileSystem)
        let segments = stored.keys.filter { $0.hasSuffix(".seg") }
        #expect(segments.count == 1 && !segments[0].contains("spare"), "\(segments)")
        let total = stored.values.reduce(0) { $0 + $1.count }
        print("a store holding one key: \(total) bytes on disk")
        #expect(total <= 64 << 10, "\(stored.mapValues(\.count))")

        // Much more than a segment's worth, with checkpoints releasing segments meanwhile.
        var options = EngineOptions()
        options.checkpointLogBytes = 256 << 10
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        var random = SplitMix64(seed: 8)
        for round in 0..<400 { try engine.commit(randomBatch(round: round, keys: 20, valueBytes: 100, random: &random)) }
        #expect(engine.logStatistics.segmentsStarted >= 3)
        let expected = try engine.snapshot().scan()
        try engine.close()
        stored = try files(fileSystem)
        let logFiles = stored.filter { $0.key.hasPrefix("/db/wal/") && $0.key.hasSuffix(".seg") }
        #expect(logFiles.count == 1 && logFiles.values.first?.count == WALFormat.smallestSegmentBytes, "\(logFiles.mapValues(\.count))")

        // Reopened and closed with nothing committed: not a byte changes.
        (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        #expect(try engine.snapshot().scan().elementsEqual(expected) { $0.key == $1.key && $0.value == $1.value })
        let writesBefore = fileSystem.count(of: .write)
        try engine.close()
        #expect(fileSystem.count(of: .write) == writesBefore)
        #expect(try files(fileSystem) == stored)
    }

    /// FORMAT.md: a power cut anywhere in a checkpointed close (its checkpoint, the new
    /// segment, the removal of older segments and spares) loses nothing, and the store
    /// shrinks back at its next close.
    @Test func aPowerCutAnywhereInAShrinkingCloseLosesNothing() throws {
        var options = EngineOptions()
        options.log.segmentBytes = 16 << 10
        options.log.firstSegmentBytes = 4096
        // No background checkpoints: every run does the same operations in the same order.
        options.checkpointLogBytes = .max
        options.checkpointMemtableBytes = .max
        func prepare(_ fileSystem: SimulatedFileSystem) throws -> StorageEngine {
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            var random = SplitMix64(seed: 4)
            for round in 0..<60 {
                try engine.commit(randomBatch(round: round, keys: 10, valueBytes: 60, random: &random))
                // A checkpoint halfway releases the first segments as spares.
                if round == 30 { try engine.checkpoint() }
            }
            return engine
        }
        let dry = SimulatedFileSystem()
        let engine = try prepare(dry)
        let expected = try engine.snapshot().scan()
        let before = dry.operationCount
        try engine.close()
        let closeOperations = dry.operationCount - before
        #expect(closeOperations > 10)
        for cut in 0..<closeOperations {
            let fileSystem = SimulatedFileSystem()
            let engine = try prepare(fileSystem)
            fileSystem.cutPower(atOperation: fileSystem.operationCount + cut)
            try? engine.close()
            fileSystem.crash(.random(seed: UInt64(cut)))
            let (reopened, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            let recovered = try reopened.snapshot().scan()
            #expect(recovered.elementsEqual(expected) { $0.key == $1.key && $0.value == $1.value }, "power cut at close operation \(cut)")
            try reopened.commit(WALBatch([.put(key: Array("after".utf8), value: [1])]))
            try reopened.close()
            let names = try fileSystem.contentsOfDirectory("/db/wal").filter { $0.hasSuffix(".seg") }
            #expect(names.count == 1 && !names[0].contains("spare"), "power cut at close operation \(cut): \(names)")
        }
    }
}
