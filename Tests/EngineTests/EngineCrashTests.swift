import StrataFileIO
import Testing
import StrataWAL
@testable import StrataEngine

/// Crashes on the simulated file system, checked against the invariants of docs/Durability.md:
/// I1 (acknowledged commits survive), I2 (the state is that of a prefix of the commits),
/// I3 (the data file verifies) and I4 (the store takes commits and reopens).
@Suite struct EngineCrashTests {
    private static let keys = (0..<40).map { Array("key-\($0)".utf8) }

    /// The workload: 200 commits of one to three puts or deletes, a checkpoint every 20;
    /// one value in sixteen too large for a leaf (an overflow run of one to three pages).
    /// Returns the model state after each acknowledged commit (index 0: empty).
    @discardableResult
    private func runWorkload(_ fileSystem: SimulatedFileSystem, seed: UInt64, options: EngineOptions) -> [[[UInt8]: [UInt8]]] {
        var states: [[[UInt8]: [UInt8]]] = [[:]]
        guard let (engine, _) = try? StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options) else { return states }
        var random = SplitMix64(seed: seed)
        var model: [[UInt8]: [UInt8]] = [:]
        for commit in 1...200 {
            var batch = WALBatch()
            var next = model
            for _ in 0..<(random.next() % 3 + 1) {
                let key = Self.keys[Int(random.next() % UInt64(Self.keys.count))]
                if random.next() % 4 == 0 {
                    batch.delete(key)
                    next[key] = nil
                } else {
                    let large = random.next() % 16 == 0
                    let count = large ? 2_500 + Int(random.next() % 6_000) : Int(random.next() % 700)
                    let value = [UInt8](repeating: UInt8(truncatingIfNeeded: commit), count: count)
                    batch.put(key, value)
                    next[key] = value
                }
            }
            guard (try? engine.commit(batch)) != nil else { break }
            model = next
            states.append(model)
            if commit % 20 == 0 { guard (try? engine.checkpoint()) != nil else { break } }
        }
        try? engine.close()
        return states
    }

    /// The options of the crash tests (small segments, so the log rotates), and a dry run
    /// of the workload: every state it passes through and how many operations it takes.
    private func dryRun(seed: UInt64, leafCompression: LeafCompression = .none)
        -> (options: EngineOptions, states: [[[UInt8]: [UInt8]]], operations: Int) {
        var options = EngineOptions()
        options.log.segmentBytes = 16 << 10
        options.leafCompression = leafCompression
        let dry = SimulatedFileSystem()
        let states = runWorkload(dry, seed: seed, options: options)
        return (options, states, dry.operationCount)
    }

    /// The workload run until a power cut at operation `cut`, then a crash with random
    /// fates (seeded by `fates`): the file system and the states acknowledged before it.
    private func crashed(seed: UInt64, options: EngineOptions, cut: Int,
                         fates: UInt64) -> (SimulatedFileSystem, [[[UInt8]: [UInt8]]]) {
        let fileSystem = SimulatedFileSystem()
        fileSystem.cutPower(atOperation: cut)
        let states = runWorkload(fileSystem, seed: seed, options: options)
        fileSystem.crash(.random(seed: fates))
        return (fileSystem, states)
    }

    private func contents(_ engine: StorageEngine) throws -> [[UInt8]: [UInt8]] {
        Dictionary(uniqueKeysWithValues: try engine.snapshot().scan().map { ($0.key, $0.value) })
    }

    /// With `.lz4`, the checkpoints write compressed leaves (values of one repeated byte),
    /// which recovery, `verify` and the next checkpoints read; either way they write overflow
    /// runs (compressed with `.lz4`), which most recovered trees hold.
    @Test(arguments: [(UInt64(7), LeafCompression.none), (UInt64(7), .lz4)])
    func aCrashAtEveryOperationKeepsAcknowledgedCommitsAsAPrefix(seed: UInt64, leafCompression: LeafCompression) throws {
        print("seed \(seed)")
        let (options, allStates, operations) = dryRun(seed: seed, leafCompression: leafCompression)
        #expect(allStates.count == 201)
        var fellBack = 0
        var withCompressedLeaves = 0
        var withRuns = 0
        for cut in 0..<operations {
            let (fileSystem, states) = crashed(seed: seed, options: options, cut: cut, fates: seed &* 31 &+ UInt64(cut))
            let (engine, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            let recovered = try contents(engine)
            let acknowledged = states.count - 1
            // I1 + I2: the state after some prefix, at least every acknowledged commit.
            let matching = allStates.indices.filter { allStates[$0] == recovered }
            #expect(matching.contains { $0 >= acknowledged }, "cut at \(cut): recovered a state that is not a prefix with all \(acknowledged) acknowledged commits")
            if report.rejectedMeta != nil { fellBack += 1 }
            // I3: the data file verifies.
            let verification = engine.verify()
            #expect(verification.isValid, "cut at \(cut): \(verification)")
            if verification.compressedLeafPages > 0 { withCompressedLeaves += 1 }
            if verification.overflowPages > 0 { withRuns += 1 }
            // I4: it takes a commit and reopens with it.
            try engine.commit(WALBatch([.put(key: Array("after".utf8), value: [1])]))
            try engine.close()
            let (reopened, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            #expect(try reopened.snapshot().get(Array("after".utf8)) == [1])
            try reopened.close()
        }
        print("crashed at each of \(operations) operations; \(fellBack) recoveries used the older meta page, "
              + "\(withCompressedLeaves) recovered trees held compressed leaves, \(withRuns) overflow runs")
        #expect(leafCompression == .none ? withCompressedLeaves == 0 : withCompressedLeaves * 2 > operations)
        #expect(withRuns * 2 > operations)
    }

    /// A read-only open of a crashed store (FORMAT.md, "Locking and read-only opens") sees
    /// exactly the state a writer's recovery then recovers, and changes no file to do so.
    @Test(arguments: [UInt64(11)])
    func aReadOnlyOpenAfterACrashSeesWhatRecoveryKeepsAndWritesNothing(seed: UInt64) throws {
        print("seed \(seed)")
        let (options, allStates, operations) = dryRun(seed: seed)
        var tornTails = 0
        for cut in stride(from: 0, to: operations, by: 5) {
            let (fileSystem, states) = crashed(seed: seed, options: options, cut: cut, fates: seed &* 17 &+ UInt64(cut))
            guard fileSystem.fileExists("/db/data") else { continue }
            let before = try storeFiles(fileSystem)
            let operationsBefore = fileSystem.operationCount
            let mutating = FileOperation.allCases.filter(\.isMutating)
            let changesBefore = mutating.map { fileSystem.count(of: $0) }
            let (reader, report) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem, options: options)
            let seen = try contents(reader)
            if !report.log.damage.isEmpty { tornTails += 1 }
            #expect(reader.verify().isValid, "cut at \(cut)")
            try reader.close()
            #expect(fileSystem.operationCount > operationsBefore)
            #expect(mutating.map { fileSystem.count(of: $0) } == changesBefore,
                    "cut at \(cut): a read-only open did an operation that changes files")
            #expect(try storeFiles(fileSystem) == before, "cut at \(cut): a read-only open changed a file")
            let (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            #expect(try contents(writer) == seen, "cut at \(cut): the writer recovered another state than the reader saw")
            let acknowledged = states.count - 1
            #expect(allStates.indices.contains { $0 >= acknowledged && allStates[$0] == seen }, "cut at \(cut)")
            try writer.close()
        }
        print("read-only opens after crashes at \((operations + 4) / 5) operations; \(tornTails) had a torn log tail")
        #expect(tornTails > 0, "no crash left a torn tail: the test did not exercise the reader's tail handling")
    }

    /// The workload with a reader beside the writer that holds a snapshot taken after the
    /// first checkpoint, so that every later checkpoint runs while it pins an older tree;
    /// a power cut at every eighth operation, then a crash. Before the cut the snapshot
    /// reads what it read after each checkpoint (no page of its tree was reused); after the
    /// crash, recovery keeps I1–I4 with the dead reader's slot in the table, and a reader
    /// opens beside the recovered writer.
    @Test(arguments: [UInt64(13)])
    func checkpointsWhileAReaderPinsAnOlderTreeSurviveACrashAtEveryEighthOperation(seed: UInt64) throws {
        print("seed \(seed)")
        var options = EngineOptions()
        options.log.segmentBytes = 16 << 10
        // A small cache: the reader's snapshot reads its pages from the file, where a
        // reused page would show.
        options.cacheBytes = 16 * options.pageBytes
        func run(_ fileSystem: SimulatedFileSystem) -> (states: [[[UInt8]: [UInt8]]], pinnedReads: Int, violations: [String]) {
            var states: [[[UInt8]: [UInt8]]] = [[:]]
            var violations: [String] = []
            var pinnedReads = 0
            guard let (engine, _) = try? StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options) else {
                return (states, 0, [])
            }
            var random = SplitMix64(seed: seed)
            var model: [[UInt8]: [UInt8]] = [:]
            var reader: StorageEngine?
            var pinned: (snapshot: Snapshot, state: [[UInt8]: [UInt8]])?
            for commit in 1...200 {
                var batch = WALBatch()
                var next = model
                // The first commit fills 300 keys: a tree of many more pages than the cache.
                for _ in 0..<(commit == 1 ? 300 : random.next() % 3 + 1) {
                    let key = Array("key-\(commit == 1 ? next.count : Int(random.next() % 300))".utf8)
                    let value = [UInt8](repeating: UInt8(truncatingIfNeeded: commit), count: 100 + Int(random.next() % 600))
                    batch.put(key, value)
                    next[key] = value
                }
                guard (try? engine.commit(batch)) != nil else { break }
                model = next
                states.append(model)
                guard commit % 20 == 0 else { continue }
                guard (try? engine.checkpoint()) != nil else { break }
                if pinned == nil, let opened = try? StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem,
                                                                       options: options).engine {
                    reader = opened
                    pinned = (opened.snapshot(), model)
                } else if let (snapshot, state) = pinned {
                    guard let read = try? contents(snapshot) else { continue }  // the cut fails reads too
                    pinnedReads += 1
                    if read != state { violations.append("after commit \(commit)") }
                }
            }
            pinned = nil
            try? reader?.close()
            try? engine.close()
            return (states, pinnedReads, violations)
        }
        let dry = SimulatedFileSystem()
        let (allStates, dryReads, dryViolations) = run(dry)
        #expect(allStates.count == 201 && dryReads == 9 && dryViolations.isEmpty)
        for cut in stride(from: 0, to: dry.operationCount, by: 8) {
            let fileSystem = SimulatedFileSystem()
            fileSystem.cutPower(atOperation: cut)
            let (states, _, violations) = run(fileSystem)
            #expect(violations.isEmpty, "cut at \(cut): the pinned snapshot changed \(violations)")
            fileSystem.crash(.random(seed: seed &* 29 &+ UInt64(cut)))
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            let recovered = try contents(engine)
            #expect(allStates.indices.contains { $0 >= states.count - 1 && allStates[$0] == recovered }, "cut at \(cut)")
            #expect(engine.verify().isValid, "cut at \(cut)")
            #expect(engine.readers.isEmpty, "cut at \(cut): a dead reader's slot survived")
            try engine.commit(WALBatch([.put(key: Array("after".utf8), value: [1])]))
            let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem, options: options)
            #expect(try reader.snapshot().get(Array("after".utf8)) == [1], "cut at \(cut)")
            try reader.close()
            try engine.close()
        }
    }

    private func contents(_ snapshot: Snapshot) throws -> [[UInt8]: [UInt8]] {
        Dictionary(uniqueKeysWithValues: try snapshot.scan().map { ($0.key, $0.value) })
    }

    /// Every file of the store at /db, by path, with its bytes.
    private func storeFiles(_ fileSystem: SimulatedFileSystem) throws -> [String: [UInt8]] {
        var result: [String: [UInt8]] = [:]
        for directory in ["/db", "/db/wal"] where fileSystem.fileExists(directory) {
            for name in (try? fileSystem.contentsOfDirectory(directory)) ?? [] where name != "wal" {
                result[directory + "/" + name] = fileSystem.contents(of: directory + "/" + name)
            }
        }
        return result
    }

    @Test func aTornMetaPageAtEveryByteFallsBackToTheOtherWithTheSameState() throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.log.segmentBytes = 1 << 20
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        var previousSlotBytes: [UInt8] = []
        var logBeforeLastCheckpoint: [String: [UInt8]] = [:]
        for round in 0..<4 {
            var batch = WALBatch()
            for index in 0..<(50 + 30 * round) { batch.put(Array("k\(index)".utf8), Array("v\(round)-\(index)".utf8)) }
            try engine.commit(batch)
            // What the slot the next checkpoint writes holds now.
            let next = engine.checkpointLock.withLock { $0.meta.generation } + 1
            let slot = Int(next % 2) * 4096
            previousSlotBytes = Array(try #require(fileSystem.contents(of: "/db/data"))[slot..<(slot + 4096)])
            logBeforeLastCheckpoint = try storeFiles(fileSystem).filter { $0.key.hasPrefix("/db/wal/") }
            try engine.checkpoint()
        }
        let expected = try contents(engine)
        let generation = engine.checkpointLock.withLock { $0.meta.generation }
        try engine.close(checkpoint: false)
        // A meta page is torn only while it is written, before the checkpoint releases any
        // log segment (StorageEngine.E2): put the log back as it was then.
        for path in try storeFiles(fileSystem).keys where path.hasPrefix("/db/wal/") && logBeforeLastCheckpoint[path] == nil {
            try fileSystem.removeFile(path)
        }
        for (path, bytes) in logBeforeLastCheckpoint where !fileSystem.modify(path, { $0 = bytes }) {
            let file = try fileSystem.open(path, options: [.create, .write])
            try file.write(bytes, at: 0)
            try file.close()
        }
        let image = try #require(fileSystem.contents(of: "/db/data"))
        let pageBytes = 4096
        let newest = Int(generation % 2) * pageBytes
        let newestBytes = Array(image[newest..<(newest + pageBytes)])
        #expect(try MetaPage.decode(newestBytes).generation == generation)
        #expect(try MetaPage.decode(previousSlotBytes).generation == generation - 2)
        var fellBack = 0
        for offset in 0..<pageBytes {
            // The write of the newest meta page reached the disk up to `offset`.
            var torn = image
            let slot = Array(newestBytes[..<offset]) + previousSlotBytes[offset...]
            torn.replaceSubrange(newest..<(newest + pageBytes), with: slot)
            fileSystem.modify("/db/data") { $0 = torn }
            let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            #expect(try contents(reopened) == expected, "torn at byte \(offset)")
            if slot != newestBytes {
                #expect(report.metaGeneration == generation - 1, "torn at byte \(offset) must fall back")
                fellBack += 1
            }
            try reopened.close(checkpoint: false)
        }
        print("torn meta page: \(fellBack) of \(pageBytes) tears fell back to the older meta page, the rest left it whole")
        #expect(fellBack > 64)
    }
}

extension EngineCrashTests {
    /// A meta page whose checkpoint version or generation is at the top of the range
    /// (crafted: a checksum that matches) is invalid, not a later overflow trap.
    @Test func aMetaPageWithCountersAtTheirLimitIsRejected() throws {
        let fileSystem = SimulatedFileSystem()
        try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine.close()
        // The new store's meta page (generation 0), crafted into the other slot.
        var meta = try MetaPage.decode(Array(try #require(fileSystem.contents(of: "/db/data"))[0..<4096]))
        meta.generation = 5
        meta.checkpointVersion = UInt64.max
        fileSystem.modify("/db/data") { $0.replaceSubrange(4096..<8192, with: meta.encoded()) }
        let (engine, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        #expect(report.metaGeneration == 0)
        #expect(report.rejectedMeta != nil)
        try engine.commit(WALBatch([.put(key: [1], value: [2])]))
        try engine.close()
    }
}
