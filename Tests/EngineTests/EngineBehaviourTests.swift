import StrataFileIO
import StrataLocks
import Foundation
import StrataCodec
import Testing
import StrataWAL
@_spi(EngineInlinable) @testable import StrataEngine

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite struct EngineBehaviourTests {
    /// `Snapshot.count` counts what a scan of the range returns, up to its limit, across
    /// the tree and the memtable, with deletes and values in overflow pages (which it
    /// does not read).
    @Test func countingARangeCountsWhatAScanReturns() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem())
        defer { try? engine.close() }
        func key(_ number: Int) -> [UInt8] { Array(String(format: "k%04d", number).utf8) }
        var batch = WALBatch()
        for number in 0..<300 { batch.put(key(number), [UInt8](repeating: 1, count: number % 50 == 0 ? 20_000 : 10)) }
        try engine.commit(batch)
        try engine.checkpoint()
        batch = WALBatch()
        for number in stride(from: 0, to: 300, by: 7) { batch.delete(key(number)) }
        for number in 300..<340 { batch.put(key(number), [2]) }
        try engine.commit(batch)
        let snapshot = engine.snapshot()
        for (from, to) in [(0, 340), (13, 200), (150, 151), (299, 320), (345, 400)] {
            let range = KeyRange(from: key(from), to: key(to))
            let scanned = try snapshot.scan(from: key(from), to: key(to)).count
            #expect(try snapshot.count(range) == scanned, "\(from)..<\(to)")
            #expect(try snapshot.count(range, limit: 5) == min(5, scanned), "\(from)..<\(to)")
        }
        #expect(try snapshot.count(limit: 0) == 0)
    }

    /// A count passes over the tree's tombstones (kept by a checkpoint for a snapshot that
    /// still reads the deleted keys) without counting them, alone, in runs longer than a
    /// leaf, and under a memtable's changes: a key put again over a tombstone counts once,
    /// a live tree key deleted in the memtable not at all. Random ranges and limits.
    @Test func aCountPassesOverTheTreesTombstones() throws {
        let seed: UInt64 = 0x70_3B5
        print("aCountPassesOverTheTreesTombstones seed \(seed)")
        var random = SplitMix64(seed: seed)
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem())
        defer { try? engine.close() }
        func key(_ number: Int) -> [UInt8] { Array(String(format: "k%05d", number).utf8) }
        let keys = 4_000
        var live = Set(0..<keys)
        var batch = WALBatch()
        for number in 0..<keys { batch.put(key(number), [UInt8(truncatingIfNeeded: number)]) }
        try engine.commit(batch)
        try engine.checkpoint()
        let older = engine.snapshot()
        // Every third key deleted, and a run of 600 (several leaves' worth).
        batch = WALBatch()
        for number in 0..<keys where number % 3 == 0 || (1_000..<1_600).contains(number) {
            batch.delete(key(number))
            live.remove(number)
        }
        try engine.commit(batch)
        try engine.checkpoint()
        var cursor = try engine.snapshot().state.tree.cursor(from: nil, reverse: false, file: engine.pageFile)
        var tombstones = 0
        while try cursor.currentKey() != nil {
            if case .tombstone = try cursor.currentContents() { tombstones += 1 }
            try cursor.advance()
        }
        try #require(tombstones == keys - live.count, "the tree keeps the deletes the older snapshot may conflict with")
        func check(_ label: String) throws {
            let snapshot = engine.snapshot()
            for trial in 0..<200 {
                let lower = trial % 5 == 0 ? nil : Int(random.next() % UInt64(keys + 10))
                let upper = trial % 7 == 0 ? nil : Int(random.next() % UInt64(keys + 10))
                let range = KeyRange(from: lower.map(key), to: upper.map(key))
                let expected = live.count { number in number >= (lower ?? 0) && number < (upper ?? .max) }
                #expect(try snapshot.count(range) == expected, "\(label), trial \(trial): \(String(describing: lower))..<\(String(describing: upper))")
                let limit = 1 + Int(random.next() % UInt64(expected + 2))
                #expect(try snapshot.count(range, limit: limit) == min(limit, expected), "\(label), trial \(trial), limit \(limit)")
            }
        }
        try check("the tree alone")
        // In the memtable: deleted keys put again, live ones deleted, both in runs.
        batch = WALBatch()
        for _ in 0..<150 {
            let first = Int(random.next() % UInt64(keys))
            for number in first..<min(keys, first + 1 + Int(random.next() % 4)) {
                guard !batch.operations.contains(where: { $0.key == key(number) }) else { continue }
                if live.contains(number) {
                    batch.delete(key(number))
                    live.remove(number)
                } else {
                    batch.put(key(number), [1])
                    live.insert(number)
                }
            }
        }
        try engine.commit(batch)
        try check("the tree and a memtable")
        withExtendedLifetime(older) {}
    }

    /// A forward walk of keys written in random order reads ahead, and stops at its upper
    /// bound without comparing every key to it (`MemtableIterator.handedOut(before:)`):
    /// counts and walks of random ranges, with rewritten and deleted keys, at an older
    /// snapshot and the newest, give what the writes left in the range, no key more or less.
    @Test func aWalkThatReadsAheadStopsAtItsBound() throws {
        var random = SplitMix64(seed: 12)
        print("aWalkThatReadsAheadStopsAtItsBound seed 12")
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem())
        defer { try? engine.close() }
        func key(_ number: UInt64) -> [UInt8] { Array(String(format: "k%06llu", number).utf8) }
        var model: [[UInt8]: [UInt8]] = [:]
        var older: (snapshot: Snapshot, model: [[UInt8]: [UInt8]])?
        for round in 0..<30 {
            var batch = WALBatch()
            var written = Set<[UInt8]>()
            for _ in 0..<400 {
                let key = key(random.next() % 20_000)
                guard written.insert(key).inserted else { continue }
                if random.next() % 6 == 0 {
                    batch.delete(key)
                    model[key] = nil
                } else {
                    let value = [UInt8(truncatingIfNeeded: round)]
                    batch.put(key, value)
                    model[key] = value
                }
            }
            try engine.commit(batch)
            if round == 15 { older = (engine.snapshot(), model) }
        }
        let newest = (snapshot: engine.snapshot(), model: model)
        var readAhead = false
        for (snapshot, model) in [older!, newest] {
            let sorted = model.keys.sorted { compareKeys($0, $1) < 0 }
            for _ in 0..<40 {
                let from = random.next() % 20_000
                let to = from + random.next() % 3_000
                let expected = sorted.filter { compareKeys($0, key(from)) >= 0 && compareKeys($0, key(to)) < 0 }
                let range = KeyRange(from: key(from), to: key(to))
                #expect(try snapshot.count(range) == expected.count, "\(from)..<\(to)")
                var walked: [[UInt8]] = []
                try snapshot.forEach(range) { key, value in
                    walked.append(key.withUnsafeBytes { Array($0) })
                    return true
                }
                #expect(walked.elementsEqual(expected), "\(from)..<\(to): walked \(walked.count), expected \(expected.count)")
                var iterator = snapshot.state.active.entries(from: key(from), reverse: false, at: snapshot.version)
                for _ in 0..<(4 * MemtableIterator.lookaheadAfter) { _ = iterator.next() }
                readAhead = readAhead || iterator.readsAhead
            }
        }
        #expect(readAhead)
    }

    /// A checkpoint asked for leaves the next memtable's index sparse (no memory until keys
    /// come); one the writes start backs it with memory at once, so that the commits
    /// arriving meanwhile take no page fault per key.
    @Test func onlyACheckpointUnderWritesBacksTheNextMemtable() throws {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 64 << 10
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options)
        defer { try? engine.close() }
        func activeIsPopulated() -> Bool { engine.snapshots.current.active.isPopulated }
        var batch = WALBatch()
        batch.put(Array("first".utf8), [1])
        try engine.commit(batch)
        try engine.checkpoint()
        #expect(!activeIsPopulated())
        // Past the threshold, a commit starts a checkpoint on a thread of its own.
        var round = 0
        let deadline = ContinuousClock.now + .seconds(20)
        while !activeIsPopulated() && ContinuousClock.now < deadline {
            var batch = WALBatch()
            for index in 0..<50 { batch.put(Array("key\(round)-\(index)".utf8), [UInt8](repeating: 7, count: 200)) }
            try engine.commit(batch)
            round += 1
            if round > 20 { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(activeIsPopulated(), "no checkpoint under writes after \(round) commits")
    }

    /// A memtable of small changes is checkpointed when its hash index is nearly full,
    /// long before its byte budget: frozen, its index still names every key (no key of it
    /// is found by a skip-list search), and every change is in the tree afterwards.
    @Test func aMemtableOfSmallChangesIsCheckpointedBeforeItsIndexFills() throws {
        var options = EngineOptions()
        // 16,384 index slots: nearly full at 11,264 keys, full at 12,288. A change here
        // takes ~40 bytes a node, so the byte budget alone would hold ~26,000.
        options.checkpointMemtableBytes = 1 << 20
        options.idleCheckpointDelay = nil   // only the index starts a checkpoint here
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options)
        defer { try? engine.close() }
        let first = engine.snapshots.current.active
        func key(_ number: Int) -> [UInt8] { withUnsafeBytes(of: UInt64(number).bigEndian) { Array($0) } }
        var committed = 0
        // Commits stop at the mark, so the checkpoint's freeze finds the index as it was.
        while !first.index.isNearlyFull {
            var batch = WALBatch()
            for number in committed..<(committed + 64) { batch.put(key(number), [1]) }
            try engine.commit(batch)
            committed += 64
            try #require(committed <= 12_288, "the index took \(first.index.slotCount) keys and never said it was nearly full")
        }
        // 11/16 of the slots, as EngineOptions.checkpointMemtableBytes says: not sooner.
        #expect(committed == 11_264)
        #expect(first.byteCount < options.checkpointMemtableBytes)
        let deadline = ContinuousClock.now + .seconds(30)
        while engine.snapshots.current.treeVersion == 0 && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        let state = engine.snapshots.current
        #expect(state.treeVersion > 0, "no checkpoint of a memtable whose index is nearly full")
        #expect(state.active !== first)
        #expect(first.index.isComplete)
        let snapshot = engine.snapshot()
        for number in stride(from: 0, to: committed, by: 97) { #expect(try snapshot.get(key(number)) == [1]) }
        #expect(try snapshot.count() == committed)
    }

    /// Recovery names every key it replays in the memtable's hash index, so a process's
    /// first reads after a crash find them in one or two loads (not a skip-list search),
    /// and so does every commit after it; a replay larger than the index can name leaves
    /// it nearly full, and the next commit starts a checkpoint.
    @Test func recoveryIndexesTheChangesItReplays() throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        // 16,384 index slots: nearly full at 11,264 keys, full at 12,288.
        options.checkpointMemtableBytes = 1 << 20
        options.idleCheckpointDelay = nil   // the batches it counts stay in the log
        func key(_ number: Int) -> [UInt8] { Array("key\(number)".utf8) }
        func newest(_ memtable: Memtable, _ key: [UInt8]) -> MemtableNode? {
            key.withUnsafeBytes { memtable.index.newest($0, hash: hashKey($0)) }
        }
        var model: [[UInt8]: [UInt8]?] = [:]
        do {
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
            for (round, range) in [0..<3_000, 1_000..<4_000, 2_000..<2_500].enumerated() {
                var batch = WALBatch()
                for number in range {
                    if round == 2 && number % 2 == 0 {
                        batch.delete(key(number))
                        model[key(number)] = .some(nil)
                    } else {
                        batch.put(key(number), [UInt8(round)])
                        model[key(number)] = .some([UInt8(round)])
                    }
                }
                try engine.commit(batch)
            }
            try engine.close(checkpoint: false)
        }
        let (engine, report) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        #expect(report.batchesReplayed == 3)
        let replayed = engine.snapshots.current.active
        #expect(replayed.index.isComplete)
        for (key, value) in model {
            let node = try #require(newest(replayed, key), "the index does not name \(String(decoding: key, as: UTF8.self))")
            #expect(node.value.map(Array.init) == value)
        }
        #expect(newest(replayed, key(4_000)) == nil)
        // Commits after the replay go on naming their keys.
        var batch = WALBatch()
        for number in 3_500..<5_000 { batch.put(key(number), [9]) }
        try engine.commit(batch)
        #expect(replayed.index.isComplete)
        #expect(try #require(newest(replayed, key(4_999))).value.map(Array.init) == [9])
        #expect(try engine.snapshot().count() == 5_000 - 250)
        try engine.close(checkpoint: false)

        // 12,000 more keys, committed with a larger budget (no checkpoint): replayed into
        // a memtable of 1 MiB, they fill its index.
        var more = WALBatch()
        for number in 5_000..<17_000 { more.put(key(number), [7]) }
        do {
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: EngineOptions())
            try engine.commit(more)
            try engine.close(checkpoint: false)
        }
        let (full, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        defer { try? full.close() }
        let filled = full.snapshots.current.active
        #expect(filled.index.isNearlyFull && !filled.index.isComplete)
        #expect(full.snapshots.current.treeVersion == 0)
        var one = WALBatch()
        one.put(key(0), [8])
        try full.commit(one)
        let deadline = ContinuousClock.now + .seconds(30)
        while full.snapshots.current.treeVersion == 0 && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        #expect(full.snapshots.current.treeVersion > 0, "no checkpoint of a replayed memtable whose index filled")
        let snapshot = full.snapshot()
        for number in stride(from: 5_000, to: 17_000, by: 61) { #expect(try snapshot.get(key(number)) == [7]) }
        #expect(try snapshot.get(key(0)) == [8])
        #expect(try snapshot.count() == 17_000 - 250)
    }

    /// A batched read answers each key from the active memtable before the frozen one and
    /// from the frozen one before the tree, as `withValue` does: a key changed in both
    /// memtables, deleted in the newer, changed in the frozen one alone, in the tree alone
    /// or nowhere, in batches of one, of the lanes read side by side and past them.
    @Test func batchedReadsTakeTheNewerMemtableFirst() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem())
        defer { try? engine.close() }
        func key(_ number: Int) -> [UInt8] { Array("key\(number)".utf8) }
        var model: [[UInt8]: [UInt8]] = [:]
        func commit(_ puts: Range<Int>, _ value: UInt8, deleting deletes: Range<Int> = 0..<0) throws {
            var batch = WALBatch()
            for number in puts { batch.put(key(number), [value]); model[key(number)] = [value] }
            for number in deletes { batch.delete(key(number)); model[key(number)] = nil }
            try engine.commit(batch)
        }
        try commit(0..<400, 0)
        try engine.checkpoint()
        try commit(100..<300, 1, deleting: 250..<260)
        // Frozen by hand, as a checkpoint freezes the memtable before it folds it.
        _ = engine.snapshots.publish { $0.with(frozen: .some($0.active), active: Memtable()) }
        try commit(200..<350, 2, deleting: 150..<160)
        let snapshot = engine.snapshot()
        try #require(snapshot.state.frozen.map { !$0.isEmpty } == true && !snapshot.state.active.isEmpty)
        var keys = (0..<450).map(key)
        var random = SplitMix64(seed: 0xBA7C_4ED)
        print("seed \(0xBA7C_4ED)")
        for order in [keys.sorted { compareKeys($0, $1) < 0 }, { keys.shuffle(using: &random); return keys }()] {
            for size in [1, Snapshot.batchLanes, Snapshot.batchLanes + 3, 450] {
                for start in stride(from: 0, to: order.count, by: size) {
                    let chunk = Array(order[start..<min(start + size, order.count)])
                    var batch = KeyBatch()
                    for key in chunk { batch.append(key.span.bytes) }
                    var found: [[UInt8]?] = []
                    try snapshot.withValues(forKeys: batch) { _, _, value in
                        found.append(value?.withUnsafeBytes { Array($0) })
                        return true
                    }
                    #expect(found == chunk.map { model[$0] }, "batches of \(size) from \(start)")
                    #expect(try found == chunk.map { try snapshot.get($0) })
                }
            }
        }
    }

    /// A walk merges the tree, the frozen memtable and the active one in key order, the
    /// newest change of a key winning and deletes dropped: keys in one source, in two or
    /// in all three, runs from one source and keys alternating between them, forwards and
    /// backwards, within random bounds, through `forEach` and the cursor alike; first with
    /// no frozen memtable (`MergedScan`'s two-head path), then with one.
    @Test(arguments: [UInt64(0x3E4D), 0x50_2CE5, 0xF0_12])
    func walksMergeTheTreeAndBothMemtables(seed: UInt64) throws {
        let (engine, seeded) = try Self.walkStore(seed: seed)
        var random = seeded
        defer { try? engine.close() }
        var model: [[UInt8]: [UInt8]] = [:]
        /// A commit of random puts and deletes of keys below `keys`, in runs of neighbours
        /// and alone, each value naming the commit.
        func commit(_ round: UInt8, keys: Int) throws {
            try engine.commit(randomChanges(keys: keys, runs: 40, longest: 6, deleteOneIn: 5, model: &model,
                                            next: { random.next() }, value: { [round, UInt8(truncatingIfNeeded: $0)] }))
        }
        for round in 0..<6 { try commit(UInt8(round), keys: 600) }
        try engine.checkpoint()
        for round in 6..<9 { try commit(UInt8(round), keys: 600) }
        // The common case first, no checkpoint running: the tree and the active memtable.
        let twoSources = engine.snapshot()
        try #require(twoSources.state.tree.root != .none && twoSources.state.frozen == nil && !twoSources.state.active.isEmpty)
        try checkWalks(twoSources, model, seed: seed, random: &random, label: "tree and active")
        // Frozen by hand, as a checkpoint freezes the memtable before it folds it.
        _ = engine.snapshots.publish { $0.with(frozen: .some($0.active), active: Memtable()) }
        for round in 9..<12 { try commit(UInt8(round), keys: 600) }
        let snapshot = engine.snapshot()
        try #require(snapshot.state.tree.root != .none && snapshot.state.frozen.map { !$0.isEmpty } == true
                     && !snapshot.state.active.isEmpty)
        try checkWalks(snapshot, model, seed: seed, random: &random, label: "tree, frozen and active")
    }

    /// A walk hands out a long run of the tree's keys a leaf at a time, comparing only
    /// each leaf's last key with the memtable's next one (`MergedScan.continueRun`): runs
    /// that end inside a leaf, at its last cell, at a bound or where the walk is stopped;
    /// values of one- and two-byte lengths, in overflow pages and empty; memtable keys
    /// that replace or delete a tree key inside a run; raw and compressed leaves; and an
    /// empty memtable (no rival: every leaf is one run).
    @Test(arguments: [(UInt64(0x1EAF), LeafCompression.none), (0x2_5EED, .lz4), (0x77_0C, .none)])
    func walksHandOutTheTreesRunsALeafAtATime(seed: UInt64, compression: LeafCompression) throws {
        print("seed \(seed), \(compression)")
        var random = SplitMix64(seed: seed)
        var options = EngineOptions()
        options.leafCompression = compression
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem(), options: options)
        defer { try? engine.close() }
        var model: [[UInt8]: [UInt8]] = [:]
        let key = Self.walkKey
        func value(_ number: Int, _ round: UInt8) -> [UInt8] {
            let length = switch random.next() % 20 {
            case 0: 0
            case 1: 5_000 + Int(random.next() % 3_000)
            case 2, 3: 128 + Int(random.next() % 300)
            default: 1 + Int(random.next() % 100)
            }
            return (0..<length).map { UInt8(truncatingIfNeeded: $0 &+ number &* 7) ^ round }
        }
        let keys = 3_000
        // Two hundred commits, so that the cells' versions take one byte and two.
        for first in stride(from: 0, to: keys, by: 15) {
            var batch = WALBatch()
            for number in first..<(first + 15) where random.next() % 8 != 0 {
                let bytes = value(number, 0)
                batch.put(key(number), bytes)
                model[key(number)] = bytes
            }
            try engine.commit(batch)
        }
        try engine.checkpoint()
        let treeOnly = engine.snapshot()
        try #require(treeOnly.state.tree.height >= 2 && treeOnly.state.active.isEmpty)
        try checkWalks(treeOnly, model, seed: seed, random: &random, label: "the tree alone", keys: keys)
        // A few changes in the memtable, alone and in small runs, each inside a tree run.
        for round in 1...3 {
            try engine.commit(randomChanges(keys: keys, runs: 12, longest: 3, deleteOneIn: 3, model: &model,
                                            next: { random.next() }, value: { value($0, UInt8(round)) }))
        }
        let snapshot = engine.snapshot()
        try #require(snapshot.state.frozen == nil && !snapshot.state.active.isEmpty)
        try checkWalks(snapshot, model, seed: seed, random: &random, label: "the tree and a sparse memtable", keys: keys)
        // The sparse memtable frozen by hand, as a checkpoint freezes it, and a few more
        // changes in a new one: the rival of a run is the first of two memtables' keys.
        _ = engine.snapshots.publish { $0.with(frozen: .some($0.active), active: Memtable()) }
        var more = WALBatch()
        for _ in 0..<10 {
            let number = Int(random.next() % UInt64(keys))
            guard !more.operations.contains(where: { $0.key == key(number) }) else { continue }
            let bytes = value(number, 9)
            more.put(key(number), bytes)
            model[key(number)] = bytes
        }
        try engine.commit(more)
        let three = engine.snapshot()
        try #require(three.state.frozen.map { !$0.isEmpty } == true && !three.state.active.isEmpty)
        try checkWalks(three, model, seed: seed, random: &random, label: "the tree and two sparse memtables", keys: keys)
    }

    /// A leaf run of more cells than a batch holds (`RunCells.capacity`) is read batch
    /// after batch (`TreeCursor.plainCells`): leaves of a few hundred tiny cells, walked
    /// whole, within bounds and stopped part way, forwards and backwards, alone and with
    /// memtable keys inside their runs.
    @Test(arguments: [UInt64(0xBA7C), 0x64_CE11])
    func leafRunsLongerThanABatchAreReadBatchAfterBatch(seed: UInt64) throws {
        let (engine, seeded) = try Self.walkStore(seed: seed)
        var random = seeded
        defer { try? engine.close() }
        var model: [[UInt8]: [UInt8]] = [:]
        let key = Self.walkKey
        let keys = 2_000
        var batch = WALBatch()
        for number in 0..<keys where random.next() % 16 != 0 {
            let value = [UInt8](repeating: UInt8(truncatingIfNeeded: number), count: Int(random.next() % 3))
            batch.put(key(number), value)
            model[key(number)] = value
        }
        try engine.commit(batch)
        try engine.checkpoint()
        // Cells of ten bytes or so: a 4 KiB leaf holds a few hundred.
        let status = try engine.status()
        try #require(model.count / Int(status.pageCount) > 2 * RunCells.capacity, "\(status.pageCount) pages")
        try checkWalks(engine.snapshot(), model, seed: seed, random: &random, label: "long leaves alone", keys: keys)
        try engine.commit(randomChanges(keys: keys, runs: 8, longest: 3, deleteOneIn: 3, model: &model,
                                        next: { random.next() }, value: { [UInt8(truncatingIfNeeded: $0), 7] }))
        try checkWalks(engine.snapshot(), model, seed: seed, random: &random, label: "long leaves and a memtable", keys: keys)
    }

    /// A store on a simulated file system for a walk test, and the random source of its
    /// `seed`, printed.
    private static func walkStore(seed: UInt64) throws -> (StorageEngine, SplitMix64) {
        print("seed \(seed)")
        return (try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem()).engine, SplitMix64(seed: seed))
    }

    /// Key `number` of the walk tests: `k` and five digits, so that keys sort as numbers.
    private static func walkKey(_ number: Int) -> [UInt8] { Array(String(format: "k%05d", number).utf8) }

    /// A batch of random changes to the keys `k%05d` below `keys`, `model` following it:
    /// `runs` runs of up to `longest` neighbouring keys (each key once), one key in
    /// `deleteOneIn` deleted and the others put with `value(number)`.
    private func randomChanges(keys: Int, runs: Int, longest: Int, deleteOneIn: UInt64, model: inout [[UInt8]: [UInt8]],
                               next: () -> UInt64, value: (Int) -> [UInt8]) -> WALBatch {
        let key = Self.walkKey
        var batch = WALBatch()
        var touched: Set<Int> = []
        for _ in 0..<runs {
            let first = Int(next() % UInt64(keys))
            for number in first..<min(keys, first + 1 + Int(next() % UInt64(longest))) where touched.insert(number).inserted {
                if next() % deleteOneIn == 0 {
                    batch.delete(key(number))
                    model[key(number)] = nil
                } else {
                    let bytes = value(number)
                    batch.put(key(number), bytes)
                    model[key(number)] = bytes
                }
            }
        }
        return batch
    }

    /// Random walks of `snapshot` (bounded or not, both ways; `forEach`, the cursor and a
    /// stopped walk) against `model`, the keys of `k%05d` below `keys` + 20.
    private func checkWalks(_ snapshot: Snapshot, _ model: [[UInt8]: [UInt8]], seed: UInt64, random: inout SplitMix64,
                            label: String, keys: Int = 600) throws {
        let key = Self.walkKey
        let sorted = model.keys.sorted { compareKeys($0, $1) < 0 }
        for trial in 0..<60 {
            let lower = trial % 3 == 0 ? nil : key(Int(random.next() % UInt64(keys + 20)))
            let upper = trial % 4 == 0 ? nil : key(Int(random.next() % UInt64(keys + 20)))
            let range = KeyRange(from: lower, to: upper)
            for reverse in [false, true] {
                let context = "seed \(seed), \(label), trial \(trial), reverse \(reverse)"
                var expected = sorted.filter { key in
                    lower.map { compareKeys(key, $0) >= 0 } ?? true && upper.map { compareKeys(key, $0) < 0 } ?? true
                }
                if reverse { expected.reverse() }
                var walked: [[UInt8]] = []
                try snapshot.forEach(range, reverse: reverse) { key, value in
                    let key = key.withUnsafeBytes { Array($0) }
                    #expect(value.withUnsafeBytes { Array($0) } == model[key], "\(context): the value of \(key)")
                    walked.append(key)
                    return true
                }
                #expect(walked == expected, "\(context): forEach")
                var cursor = try snapshot.cursor(range, reverse: reverse)
                var stepped: [[UInt8]] = []
                while let (key, value) = try cursor.next() {
                    #expect(value == model[key], "\(context): the cursor's value of \(key)")
                    stepped.append(key)
                }
                #expect(stepped == expected, "\(context): cursor")
                // A walk stopped part way hands out a prefix of the whole.
                let stop = expected.isEmpty ? 0 : Int(random.next() % UInt64(expected.count))
                var prefix: [[UInt8]] = []
                try snapshot.forEach(range, reverse: reverse) { key, _ in
                    prefix.append(key.withUnsafeBytes { Array($0) })
                    return prefix.count <= stop
                }
                #expect(prefix == Array(expected.prefix(stop + 1)), "\(context): a stopped walk")
            }
            // A count of the range, whole and up to a limit, is what the walk handed out.
            let context = "seed \(seed), \(label), trial \(trial)"
            let expected = sorted.count { key in
                lower.map { compareKeys(key, $0) >= 0 } ?? true && upper.map { compareKeys(key, $0) < 0 } ?? true
            }
            #expect(try snapshot.count(range) == expected, "\(context): count")
            let limit = 1 + Int(random.next() % UInt64(expected + 2))
            #expect(try snapshot.count(range, limit: limit) == min(limit, expected), "\(context): count up to \(limit)")
        }
    }

    /// An empty batch is a commit of nothing: it takes a version and survives a reopen
    /// (before, publishing it indexed its first key and trapped).
    @Test func anEmptyBatchCommitsNothing() throws {
        let fileSystem = SimulatedFileSystem()
        var engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
        try engine.commit(WALBatch([.put(key: bytes("a"), value: bytes("1"))]))
        let result = try engine.commit(WALBatch())
        try engine.commit(WALBatch(), readAt: engine.snapshot())
        #expect(result.version == 2 && engine.version == 3)
        #expect(try engine.snapshot().scan().map(\.key) == [bytes("a")])
        let ended = fileSystem.clone()
        ended.crash(.keepAll)
        engine = try StorageEngine.open(path: "/db", fileSystem: ended).engine
        #expect(engine.version == 3)
        #expect(try engine.snapshot().scan().map(\.key) == [bytes("a")])
        try engine.close()
    }

    /// Recovery keeps each replayed batch's bytes and points at keys and values inside them
    /// (ReplayedChanges): values whose length takes one to three bytes to encode, the
    /// longest key, deletes and keys changed again in later batches all come back as the
    /// last commit left them.
    @Test func replayRestoresTheLastChangeOfEachKeyWhateverItsLengths() throws {
        let fileSystem = SimulatedFileSystem()
        let engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
        let longKey = [UInt8](repeating: 0x7A, count: Limits.maxKeyBytes)
        var model: [[UInt8]: [UInt8]] = [:]
        let lengths = [0, 1, 127, 128, 16_383, 16_384, 70_000]
        for (round, length) in lengths.enumerated() {
            var operations: [WALBatch.Operation] = []
            let value = [UInt8](repeating: UInt8(round + 1), count: length)
            for key in [bytes("k\(round)"), bytes("shared"), longKey] {
                operations.append(.put(key: key, value: value))
                model[key] = value
            }
            if round > 0 {
                // Delete the previous round's own key; "gone" is put and deleted in turn.
                operations.append(.delete(key: bytes("k\(round - 1)")))
                model[bytes("k\(round - 1)")] = nil
            }
            let gone = bytes("gone")
            operations.append(round.isMultiple(of: 2) ? .put(key: gone, value: value) : .delete(key: gone))
            model[gone] = round.isMultiple(of: 2) ? value : nil
            try engine.commit(WALBatch(operations))
        }
        #expect(try engine.status().memtableKeys > 0, "the changes are still only in the log")
        let ended = fileSystem.clone()
        ended.crash(.keepAll)
        let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: ended)
        #expect(report.batchesReplayed == lengths.count)
        let pairs = try reopened.snapshot().scan()
        #expect(pairs.map(\.key) == model.keys.sorted { $0.lexicographicallyPrecedes($1) })
        for pair in pairs {
            let restored = pair.value == model[pair.key]
            #expect(restored, "a key of \(pair.key.count) bytes has \(pair.value.count) bytes, not \(model[pair.key]?.count ?? 0)")
        }
        try reopened.close()
        try engine.close()
    }

    /// A batch larger than one log frame is never encoded whole: the log encodes it a
    /// fragment at a time and the memtable links it from its operations. Such batches (keys
    /// in order after every key held, keys among those held, a key put and deleted twice in
    /// one batch, inserts, version-stamped keys) read back as a model says, from the
    /// memtable (whose nodes point at values of a page or more in place), again once the
    /// log replays them after a crash, and from the tree a checkpoint folds them into.
    @Test func batchesLargerThanAFrameAreLinkedAndReplayedWhole() throws {
        let seed: UInt64 = 0x5_7EA4
        print("batchesLargerThanAFrameAreLinkedAndReplayedWhole seed \(seed)")
        var random = SplitMix64(seed: seed)
        let fileSystem = SimulatedFileSystem()
        let engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
        var model: [[UInt8]: [UInt8]] = [:]
        func value(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next() % 7) } }
        for round in 0..<6 {
            var batch = WALBatch()
            let keys = (0..<40).map { index in
                round.isMultiple(of: 2) ? bytes(String(format: "r%02d-%03d", round, index)) : bytes(String(format: "r%02d-%03d", round - 1, Int(random.next() % 60)))
            }
            for (index, key) in keys.enumerated() {
                let stored = value(index.isMultiple(of: 9) ? 200 : 40_000)
                batch.operations.append(index.isMultiple(of: 5) ? .insert(key: key, value: stored) : .put(key: key, value: stored))
                model[key] = stored
            }
            let twice = keys[3]
            batch.delete(twice)
            let last = value(100)
            batch.put(twice, last)
            model[twice] = last
            if round == 5 {
                batch.delete(keys[7])
                model[keys[7]] = nil
            }
            var stamped = false
            if round == 4 {
                // Two keys stamped with the commit's version (their last 16 bytes).
                for ordinal in 0..<2 {
                    batch.versionStampedOperations.append(batch.operations.count)
                    batch.put(bytes("stamp") + [UInt8](repeating: 0, count: WALBatch.versionStampBytes - 1) + [UInt8(ordinal)], [UInt8(ordinal)])
                }
                stamped = true
            }
            #expect(batch.measure.spansFrames, "round \(round)")
            let version = try engine.commit(batch).version
            if stamped {
                for ordinal in 0..<2 {
                    let key = bytes("stamp") + withUnsafeBytes(of: (version.bigEndian, UInt64(ordinal).bigEndian)) { Array($0) }
                    model[key] = [UInt8(ordinal)]
                }
            }
            let pairs = try engine.snapshot().scan()
            let linked = pairs.map(\.key) == model.keys.sorted { $0.lexicographicallyPrecedes($1) } && pairs.allSatisfy { model[$0.key] == $0.value }
            #expect(linked, "round \(round): the memtable holds what the model does")
        }
        #expect(try engine.status().memtableKeys > 0, "the changes are still only in the log")
        let ended = fileSystem.clone()
        ended.crash(.keepAll)
        let (reopened, report) = try StorageEngine.open(path: "/db", fileSystem: ended)
        #expect(report.batchesReplayed == 6)
        let pairs = try reopened.snapshot().scan()
        let replayed = pairs.map(\.key) == model.keys.sorted { $0.lexicographicallyPrecedes($1) } && pairs.allSatisfy { model[$0.key] == $0.value }
        #expect(replayed, "the replayed store holds what the model does")
        try reopened.close()
        // The memtable whose nodes point at the batches' values, folded into the tree.
        try engine.checkpoint()
        #expect(try engine.status().memtableKeys == 0)
        let folded = try engine.snapshot().scan()
        let checkpointed = folded.map(\.key) == model.keys.sorted { $0.lexicographicallyPrecedes($1) } && folded.allSatisfy { model[$0.key] == $0.value }
        #expect(checkpointed, "the checkpointed tree holds what the model does")
        try engine.close()
    }

    @Test func aWriteWriteConflictNamesTheKeysEvenAfterACheckpoint() throws {
        let engine = try StorageEngine.inMemory()
        try engine.commit(WALBatch([.put(key: bytes("a"), value: bytes("1")), .put(key: bytes("b"), value: bytes("1"))]))
        let early = engine.snapshot()
        try engine.commit(WALBatch([.put(key: bytes("a"), value: bytes("2")), .delete(key: bytes("b"))]))
        try engine.checkpoint()
        #expect {
            try engine.commit(WALBatch([.put(key: bytes("b"), value: bytes("x")), .put(key: bytes("a"), value: bytes("x")),
                                        .put(key: bytes("c"), value: bytes("x"))]), readAt: early)
        } throws: { error in
            guard case let EngineError.conflict(keys, readVersion) = error else { return false }
            return keys == [bytes("a"), bytes("b")] && readVersion == early.version
        }
        // Nothing of the refused commit is visible, and a commit on a fresh snapshot succeeds.
        #expect(try engine.snapshot().get(bytes("c")) == nil)
        try engine.commit(WALBatch([.put(key: bytes("c"), value: bytes("y"))]), readAt: engine.snapshot())
        #expect(try engine.snapshot().get(bytes("c")) == bytes("y"))
        // Disjoint keys from the old snapshot do not conflict.
        try engine.commit(WALBatch([.put(key: bytes("d"), value: bytes("z"))]), readAt: early)
    }

    /// A commit that read at or after the tree's checkpoint checks its keys against the
    /// memtables alone: the tree holds no newer change, so no page of it is read (once, a
    /// record store's inserts read a leaf of every index they wrote, each kept resident).
    /// One that read before it still reads the tree: with every read of the file failing,
    /// the first commits, the second fails.
    @Test func aCommitReadingAtTheTreesVersionReadsNoPageOfIt() throws {
        let fileSystem = SimulatedFileSystem()
        var options = EngineOptions()
        options.cacheBytes = 0
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options)
        try engine.commit(WALBatch((0..<500).map { .put(key: bytes("k\($0)"), value: [UInt8](repeating: 7, count: 100)) }))
        let early = engine.snapshot()
        try engine.commit(WALBatch([.put(key: bytes("k7"), value: bytes("2"))]))
        try engine.checkpoint()
        let late = engine.snapshot()
        #expect(late.state.treeVersion == late.version && late.state.tree.height >= 2)
        fileSystem.injectFault(errno: EIO, atOperation: fileSystem.operationCount, persistent: true, operations: [.read])
        // Keys in the tree, in no memtable: only the tree could say when they were written.
        try engine.commit(WALBatch([.put(key: bytes("k8"), value: bytes("3")), .put(key: bytes("k9"), value: bytes("3"))]),
                          readAt: late, unchecked: [], readRanges: [KeyRange(from: bytes("k1"), to: bytes("k2"))])
        let latest = engine.snapshot()
        #expect(try latest.wasWritten(bytes("k8"), after: late.version) && !latest.wasWritten(bytes("k20"), after: late.version))
        #expect(try latest.keysWritten(in: KeyRange(from: bytes("k"), to: bytes("l")), after: late.version) == [bytes("k8"), bytes("k9")])
        func failedRead(_ error: any Error) -> Bool {
            if case EngineError.io(let failure) = error { return failure.operation == .read }
            return false
        }
        #expect(performing: { try engine.commit(WALBatch([.put(key: bytes("k10"), value: bytes("3"))]), readAt: early) },
                throws: failedRead)
        #expect(performing: { try latest.wasWritten(bytes("k20"), after: early.version) }, throws: failedRead)
        #expect(performing: { try latest.keysWritten(in: KeyRange(from: bytes("k"), to: bytes("l")), after: early.version) },
                throws: failedRead)
        #expect(performing: { try late.get(bytes("k10")) }, throws: failedRead)
        try? engine.close()
    }

    @Test func aSnapshotKeepsItsVersionWhileCommitsAndCheckpointsRun() throws {
        let engine = try StorageEngine.inMemory()
        try engine.commit(WALBatch([.put(key: bytes("k"), value: bytes("old"))]))
        let snapshot = engine.snapshot()
        for round in 0..<20 {
            try engine.commit(WALBatch([.put(key: bytes("k"), value: bytes("new\(round)")),
                                        .put(key: bytes("n\(round)"), value: [UInt8](repeating: 1, count: 3000))]))
            try engine.checkpoint()
        }
        #expect(try snapshot.get(bytes("k")) == bytes("old"))
        #expect(try snapshot.scan().map(\.key) == [bytes("k")])
        #expect(try engine.snapshot().get(bytes("k")) == bytes("new19"))
        #expect(engine.verify().isValid)
    }

    /// The snapshot registry's publication lock is an adaptive mutex (its waiters spin
    /// before they sleep): it must exclude exactly as the default one does. Two threads
    /// each make 200,000 read-then-write increments of a plain counter under it; a lost
    /// update would show.
    @Test(arguments: [false, true]) func aLockedValueExcludesWhetherOrNotItsWaitersSpin(adaptive: Bool) {
        let counter = Locked(0, adaptive: adaptive)
        TestThreads(2) { _ in
            for _ in 0..<200_000 {
                counter.withLock { value in
                    let read = value
                    value = read &+ 1
                }
            }
        }.wait()
        #expect(counter.withLock { $0 } == 400_000)
    }

    @Test func readersOnOtherThreadsSeeConsistentSnapshotsDuringCommitsAndCheckpoints() throws {
        // Two accounts whose sum stays 1000: every snapshot must see the sum, and a value
        // once seen never goes back.
        let engine = try StorageEngine.inMemory()
        @Sendable func encode(_ value: Int) -> [UInt8] { withUnsafeBytes(of: Int64(value).littleEndian) { Array($0) } }
        @Sendable func decode(_ value: [UInt8]?) -> Int { value.map { Int($0.withUnsafeBytes { Int64(littleEndian: $0.loadUnaligned(as: Int64.self)) }) } ?? 0 }
        try engine.commit(WALBatch([.put(key: bytes("x"), value: encode(1000)), .put(key: bytes("y"), value: encode(0))]))
        let done = Locked(false)
        let failures = Locked(0)
        let group = DispatchGroup()
        for _ in 0..<2 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                var lastVersion: UInt64 = 0
                while !done.withLock({ $0 }) {
                    let snapshot = engine.snapshot()
                    let x = decode(try? snapshot.get(bytes("x")))
                    let y = decode(try? snapshot.get(bytes("y")))
                    let scanned = (try? snapshot.scan().reduce(0) { $0 + decode($1.value) }) ?? -1
                    if x + y != 1000 || scanned != 1000 || snapshot.version < lastVersion { failures.withLock { $0 += 1 } }
                    lastVersion = snapshot.version
                }
            }
        }
        for amount in 1...300 {
            let snapshot = engine.snapshot()
            let x = decode(try snapshot.get(bytes("x")))
            let y = decode(try snapshot.get(bytes("y")))
            try engine.commit(WALBatch([.put(key: bytes("x"), value: encode(x - amount % 7)),
                                        .put(key: bytes("y"), value: encode(y + amount % 7))]), readAt: snapshot)
            if amount % 25 == 0 { try engine.checkpoint() }
        }
        done.withLock { $0 = true }
        group.wait()
        #expect(failures.withLock { $0 } == 0)
        #expect(engine.verify().isValid)
    }

    /// A commit that conflicts with one still in flight (its fdatasync running) throws
    /// only once that one is published, so that a retry's snapshot holds it; a retry at
    /// once would meet the same unpublished commit again.
    @Test(arguments: ["blocking", "async"])
    func aConflictWithACommitInFlightIsThrownOnceThatCommitIsPublished(path: String) async throws {
        let fileSystem = SimulatedFileSystem()
        let engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
        try engine.commit(WALBatch([.put(key: bytes("k"), value: [0])]))
        let before = engine.snapshot()
        fileSystem.setSyncLatency(.milliseconds(300))
        let syncing = DispatchSemaphore(value: 0)
        fileSystem.observeSyncs { _ in syncing.signal() }
        let writerDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? engine.commit(WALBatch([.put(key: bytes("k"), value: [1])]))
            writerDone.signal()
        }
        syncing.wait()
        fileSystem.observeSyncs(nil)
        let late = WALBatch([.put(key: bytes("k"), value: [2])])
        if path == "blocking" {
            #expect(throws: EngineError.self) { try engine.commit(late, readAt: before) }
        } else {
            await #expect(throws: EngineError.self) { try await engine.commit(late, readAt: before) }
        }
        #expect(try engine.snapshot().get(bytes("k")) == [1], "the conflict was thrown before what it met was published")
        writerDone.wait()
        fileSystem.setSyncLatency(.zero)
        try engine.close()
    }

    @Test func oversizedKeysAndValuesAreRefusedWithTheLimit() throws {
        // The engine states its limits as literals; the log's format must hold the same.
        #expect(Limits.maxKeyBytes == WALFormat.maxKeyBytes)
        #expect(Limits.maxValueBytes == WALFormat.maxValueBytes)
        let engine = try StorageEngine.inMemory()
        #expect {
            try engine.commit(WALBatch([.put(key: [UInt8](repeating: 1, count: Limits.maxKeyBytes + 1), value: [])]))
        } throws: { error in
            guard case let EngineError.keyTooLarge(count, limit) = error else { return false }
            return count == Limits.maxKeyBytes + 1 && limit == Limits.maxKeyBytes
        }
        #expect(throws: EngineError.self) { try engine.commit(WALBatch([.put(key: [], value: [1])])) }
        // An empty key among good ones refuses the whole batch, whatever its kind.
        #expect {
            try engine.commit(WALBatch([.put(key: [1], value: [1]), .delete(key: []), .put(key: [2, 2], value: [2])]))
        } throws: { error in
            guard case let EngineError.keyTooLarge(count, _) = error else { return false }
            return count == 0
        }
        #expect(try engine.snapshot().get([1]) == nil)
        #expect(throws: EngineError.self) {
            try engine.commit(WALBatch([.put(key: [1], value: [UInt8](repeating: 0, count: Limits.maxValueBytes + 1))]))
        }
        // The largest key and a large value fit, and come back after a checkpoint.
        let key = [UInt8](repeating: 7, count: Limits.maxKeyBytes)
        let value = [UInt8](repeating: 9, count: 100_000)
        try engine.commit(WALBatch([.put(key: key, value: value)]))
        try engine.checkpoint()
        #expect(try engine.snapshot().get(key) == value)
        #expect(engine.verify().isValid)
    }

    @Test func aSecondOpenerIsRefusedWithThePathNeverAHang() throws {
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        #expect {
            try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        } throws: { error in
            guard case let EngineError.inUse(path, holder) = error else { return false }
            return path == "/db" && holder.contains("process \(getpid()) has it open for writing")
        }
        try engine.close()
        _ = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
    }

    @Test func aDataFileFromANewerFormatIsRefused() throws {
        let fileSystem = SimulatedFileSystem()
        try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine.close()
        fileSystem.modify("/db/data") { image in
            var first = Array(image[0..<4096])
            first[16] = 9
            PageCodec.seal(&first)
            image.replaceSubrange(0..<4096, with: first)
        }
        #expect {
            try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        } throws: { error in
            guard case let EngineError.unsupportedVersion(_, found, _) = error else { return false }
            return found == 9
        }
    }
}

@Suite struct EngineCorruptionTests {
    private static let pageBytes = 4096

    private static var options: EngineOptions {
        var options = EngineOptions()
        options.log.segmentBytes = 4096
        return options
    }

    /// A closed store in `/db` whose data file has `page` as page 2 and a meta page (in
    /// slot 1, generation 9) with root page 2 and the given height.
    private func storeWithRoot(_ page: [UInt8], height: UInt64) throws -> SimulatedFileSystem {
        let fileSystem = SimulatedFileSystem()
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        try engine.commit(WALBatch([.put(key: Array("a".utf8), value: [1])]))
        try engine.close()
        let meta = MetaPage(pageBytes: Self.pageBytes, generation: 9, root: PageID(2), freeListHead: .none,
                            checkpointVersion: 1, pageCount: 4, keyCount: 1, height: height)
        fileSystem.modify("/db/data") { image in
            let size = Self.pageBytes
            if image.count < 4 * size { image += [UInt8](repeating: 0, count: 4 * size - image.count) }
            image.replaceSubrange(2 * size..<3 * size, with: page)
            image.replaceSubrange(size..<2 * size, with: meta.encoded())
        }
        return fileSystem
    }

    /// A closed store in `/db` of exactly three pages whose one leaf, page 2, is `leaf`,
    /// with a meta page of data format `format` counting `keyCount` keys and naming
    /// `checkpointVersion`.
    private func storeOfOneLeaf(_ leaf: [UInt8], keyCount: UInt64, checkpointVersion: UInt64, format: UInt8) throws -> SimulatedFileSystem {
        let fileSystem = try storeWithRoot(leaf, height: 1)
        var meta = MetaPage(pageBytes: Self.pageBytes, generation: 9, root: PageID(2), freeListHead: .none,
                            checkpointVersion: checkpointVersion, pageCount: 3, keyCount: keyCount, height: 1).encoded()
        meta[16] = format
        meta[17] = 0
        PageCodec.seal(&meta)
        fileSystem.modify("/db/data") { image in
            image.replaceSubrange(Self.pageBytes..<(2 * Self.pageBytes), with: meta)
            image.removeSubrange((3 * Self.pageBytes)...)
        }
        return fileSystem
    }

    /// A leaf as format 1 or 2 wrote it: 2-byte slots without hints, and each cell's
    /// version in eight little-endian bytes (format 1) or a varint (format 2); or as
    /// formats 3 to 5 wrote it: hinted slots, whole keys in every cell.
    private func olderFormatLeaf(_ entries: [(key: String, version: UInt64, value: [UInt8])], format: UInt8, id: PageID) -> [UInt8] {
        if format >= 3 {
            let cells = entries.map { CellToWrite.entry(LeafEntry(key: Array($0.key.utf8), version: $0.version, payload: .inline($0.value))) }
            var page = PageCodec.encodeLeaf(cells: cells[...], id: id, generation: 1, pageBytes: Self.pageBytes, elide: false)
            PageCodec.seal(&page)
            return page
        }
        var page = PageCodec.emptyPage(.leaf, id: id, generation: 1, count: entries.count, word: 0, pageBytes: Self.pageBytes)
        page[PageCodec.leafFormatOffset] = format == 1 ? 0 : PageCodec.varintVersions
        var end = Self.pageBytes
        for (index, entry) in entries.enumerated() {
            var cell = ByteWriter(capacity: 64)
            cell.writeVarint(UInt64(entry.key.utf8.count))
            cell.write(contentsOf: Array(entry.key.utf8))
            if format == 1 { cell.write(entry.version) } else { cell.writeVarint(entry.version) }
            cell.write(UInt8(0))
            cell.writeVarint(UInt64(entry.value.count))
            cell.write(contentsOf: entry.value)
            end -= cell.count
            page.replaceSubrange(end..<(end + cell.count), with: cell.bytes)
            page[PageHeader.bytes + 2 * index] = UInt8(end & 0xFF)
            page[PageHeader.bytes + 2 * index + 1] = UInt8(end >> 8)
        }
        PageCodec.seal(&page)
        return page
    }

    /// `verify` names a leaf entry newer than its tree's checkpoint version: commits that
    /// read at that version or later check their conflicts without reading the tree, so
    /// such an entry would hide one.
    @Test func verifyNamesAnEntryNewerThanItsCheckpoint() throws {
        for (newest, sound) in [(UInt64(9), true), (10, false)] {
            let leaf = olderFormatLeaf([("a", 1, [1]), ("b", newest, [2])], format: 5, id: PageID(2))
            let fileSystem = try storeOfOneLeaf(leaf, keyCount: 2, checkpointVersion: 9, format: 5)
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
            let report = engine.verify()
            #expect(report.problems == (sound ? [] : ["the leaf at offset 8192 holds a key of version 10, after its checkpoint's 9"]))
            try engine.close()
        }
    }

    /// A malformed cell inside a run of a leaf's cells (`TreeCursor.step`, and the batches
    /// of `plainCells`, which leave such a cell to `step`) fails the walk that reaches it
    /// with the page named, as a cell read one by one does; and a walk
    /// that stops before a malformed last cell, which a run looks at first, still ends
    /// cleanly.
    @Test func aMalformedCellInALeafsRunIsNamed() throws {
        let entries = (0..<33).map { (String(format: "k%02d", $0), UInt64(2), [UInt8](repeating: UInt8($0), count: 3)) }
        /// The leaf with `change` made to the bytes of cell `index`, from its start.
        func leaf(changing index: Int, _ change: (inout [UInt8], Int) -> Void) -> [UInt8] {
            var page = olderFormatLeaf(entries, format: 2, id: PageID(2))
            let cell = Int(page[PageHeader.bytes + 2 * index]) | Int(page[PageHeader.bytes + 2 * index + 1]) << 8
            change(&page, cell)
            PageCodec.seal(&page)
            return page
        }
        func keys(_ snapshot: Snapshot, below upper: String?) throws -> [String] {
            var keys: [String] = []
            try snapshot.forEach(KeyRange(from: nil, to: upper.map { Array($0.utf8) })) { key, _ in
                keys.append(key.withUnsafeBytes { String(decoding: $0, as: UTF8.self) })
                return true
            }
            return keys
        }
        // Cell 20's flags (after its length, three key bytes and a one-byte version) are
        // none a cell may have.
        let badFlags = leaf(changing: 20) { page, cell in page[cell + 5] = 0x55 }
        // The last cell's key length says two bytes of 12,672.
        let badLastKey = leaf(changing: 32) { page, cell in page[cell] = 0x80 }
        // Cells inside the run that a batch reads (`TreeCursor.plainCells`) stops before:
        // cell 24's key length says 767 bytes, past the page's end; cell 27's slot points
        // past the page. A walk bounded below either reads the cell before it (its key is
        // the bound) and stops there.
        let keyPastThePage = leaf(changing: 24) { page, cell in (page[cell], page[cell + 1]) = (0xFF, 0x05) }
        var slotPastThePage = olderFormatLeaf(entries, format: 2, id: PageID(2))
        (slotPastThePage[PageHeader.bytes + 2 * 27], slotPastThePage[PageHeader.bytes + 2 * 27 + 1]) = (0xFF, 0xFF)
        PageCodec.seal(&slotPastThePage)
        for (page, upper, readable) in [(badFlags, "k19", true), (badFlags, nil, false), (badLastKey, "k30", true), (badLastKey, nil, false),
                                        (keyPastThePage, "k23", true), (keyPastThePage, nil, false),
                                        (slotPastThePage, "k26", true), (slotPastThePage, nil, false)] {
            let fileSystem = try storeOfOneLeaf(page, keyCount: 33, checkpointVersion: 2, format: 2)
            let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
            defer { try? engine.close() }
            if readable {
                #expect(try keys(engine.snapshot(), below: upper) == entries.map(\.0).filter { $0 < upper! })
            } else {
                #expect {
                    try keys(engine.snapshot(), below: nil)
                } throws: { error in
                    guard case let EngineError.corruptPage(_, offset, _) = error else { return false }
                    return offset == 2 * Int64(Self.pageBytes)
                }
            }
        }
    }

    /// Format 2 stores versions as varints, format 3 adds hints to leaf slots, format 6
    /// stores a leaf's shared key prefix once; a file of format 1, 2 or 5 (leaves with
    /// eight-byte or varint versions and plain slots, or hinted slots and whole keys) still
    /// reads, takes commits, and its old leaves are rewritten in format 6 by the next
    /// checkpoint.
    @Test(arguments: [UInt8(1), 2, 5])
    func anOlderFormatDataFileStillReadsAndTakesCommits(format: UInt8) throws {
        // Enough cells after the first few for a walk to hand the rest of the leaf out as
        // one run (`TreeCursor.step`), one with a value of a two-byte length.
        let more = (1...30).map { (String(format: "c%02d", $0), UInt64(2), [UInt8](repeating: UInt8($0), count: $0 == 25 ? 200 : $0)) }
        let entries = [("a", 1, [1]), ("b", 70_000, [2, 2]), ("c", 1 << 40, [])] + more
        let leaf = olderFormatLeaf(entries, format: format, id: PageID(2))
        let fileSystem = try storeOfOneLeaf(leaf, keyCount: UInt64(entries.count), checkpointVersion: 1 << 40, format: format)
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        let snapshot = engine.snapshot()
        #expect(try snapshot.get(Array("a".utf8)) == [1] && snapshot.get(Array("b".utf8)) == [2, 2] && snapshot.get(Array("c".utf8)) == [])
        #expect(try snapshot.lastWriteVersion(Array("b".utf8)) == 70_000 && snapshot.lastWriteVersion(Array("c".utf8)) == 1 << 40)
        var pairs: [(String, [UInt8])] = []
        try snapshot.forEach { key, value in
            pairs.append((key.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }, value.withUnsafeBytes { Array($0) }))
            return true
        }
        #expect(pairs.map(\.0) == entries.map(\.0) && pairs.map(\.1) == entries.map(\.2))
        var backwards: [String] = []
        try snapshot.forEach(reverse: true) { key, _ in
            backwards.append(key.withUnsafeBytes { String(decoding: $0, as: UTF8.self) })
            return true
        }
        #expect(backwards == entries.map(\.0).reversed())
        #expect(engine.verify().isValid)
        try engine.commit(WALBatch([.put(key: Array("d".utf8), value: [4])]))
        try engine.checkpoint()
        let root = engine.snapshot().state.tree.root
        #expect(try engine.pageFile.withPage(root) { $0.bytes[PageCodec.leafFormatOffset] } == PageCodec.currentLeafFormat)
        #expect(try engine.snapshot().lastWriteVersion(Array("c".utf8)) == 1 << 40)
        #expect(try engine.snapshot().get(Array("d".utf8)) == [4])
        #expect(engine.verify().isValid)
        try engine.close()
    }

    /// A full format-2 leaf (2-byte slots, one-byte versions) holds more cells than one
    /// format-3 leaf can (6-byte slots). A close whose vacuum would move such a leaf, one
    /// the checkpoint before it did not rewrite, keeps the file's size instead of encoding
    /// it into a page too small (it trapped: "leaf cells overflow the page").
    @Test func aCloseLeavesAnOlderFormatsFullLeafWhereItIs() throws {
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        let capacity = (Self.pageBytes - PageHeader.bytes) / 8 - 1   // 6-byte cells, 2-byte slots
        let keys = (0..<capacity).map { String([letters[$0 / 26], letters[$0 % 26]]) }
        let pages = 20, fullLeaf = PageID(UInt64(pages - 1))
        let leaf = olderFormatLeaf(keys.map { ($0, 1, []) }, format: 2, id: fullLeaf)
        let entries = keys.map { LeafEntry(key: Array($0.utf8), version: 1, payload: .inline([])) }
        #expect(!PageCodec.leafFits(entries, pageBytes: Self.pageBytes), "the leaf does not fit format 3")
        // Pages 0–1 meta (format 2, generation 9 in slot 1), 2 a free list of 5…18, 3 a leaf
        // from "zz" on, 4 the root over it and the full leaf, page 19: 15 of 20 pages free.
        let other = PageCodec.encodeLeaf([LeafEntry(key: Array("zzz".utf8), version: 1, payload: .inline([9]))][...],
                                         id: PageID(3), generation: 9, pageBytes: Self.pageBytes)
        let root = PageCodec.encodeBranch([BranchEntry(key: [], child: fullLeaf), BranchEntry(key: Array("zz".utf8), child: PageID(3))][...],
                                          id: PageID(4), generation: 9, pageBytes: Self.pageBytes)
        var meta = MetaPage(pageBytes: Self.pageBytes, generation: 9, root: PageID(4), freeListHead: PageID(2),
                            checkpointVersion: 1, pageCount: UInt64(pages), keyCount: UInt64(keys.count + 1), height: 2).encoded()
        meta[16] = 2
        meta[17] = 0
        PageCodec.seal(&meta)
        let freeList = PageCodec.encodeFreeList((5..<UInt64(pages - 1)).map { PageID($0) }[...], next: .none, id: PageID(2),
                                                generation: 9, pageBytes: Self.pageBytes)
        let fileSystem = try storeWithRoot(root, height: 2)
        fileSystem.modify("/db/data") { image in
            let size = Self.pageBytes
            image = Array(image[..<size]) + meta + freeList + other + root + [UInt8](repeating: 0, count: (pages - 6) * size) + leaf
        }
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        // A commit the close checkpoints: it rewrites page 3 and the root, not the full leaf.
        try engine.commit(WALBatch([.put(key: Array("zzzz".utf8), value: [8])]))
        try engine.close()
        #expect(fileSystem.contents(of: "/db/data")?.count == pages * Self.pageBytes, "the file kept its size")
        let (reopened, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        #expect(try reopened.snapshot().scan().map(\.key) == (keys + ["zzz", "zzzz"]).map { Array($0.utf8) })
        #expect(try reopened.snapshot().get(Array("zzzz".utf8)) == [8])
        #expect(reopened.verify().isValid)
        try reopened.close()
    }

    /// Found by the EnginePage fuzz target: a branch pointing at page 2^63 made computing
    /// the page's offset overflow (a trap) instead of reporting a corrupt page.
    @Test func aChildPointerOutsideAnyFileIsACorruptPageNotATrap() throws {
        let branch = PageCodec.encodeBranch([BranchEntry(key: [], child: PageID(1 << 63)),
                                             BranchEntry(key: Array("m".utf8), child: PageID(3))][...],
                                            id: PageID(2), generation: 9, pageBytes: Self.pageBytes)
        let fileSystem = try storeWithRoot(branch, height: 2)
        let (reopened, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        #expect {
            try reopened.snapshot().get(Array("a".utf8))
        } throws: { error in
            guard case let EngineError.corruptPage(path, _, reason) = error else { return false }
            return path == "/db/data" && reason.contains("outside")
        }
        #expect(!reopened.verify().isValid)
        try reopened.close(checkpoint: false)
    }

    /// Found by the EnginePage fuzz target: a page whose slot count puts the slot array
    /// past the end of the page was read out of bounds by the in-place key search.
    @Test(arguments: [PageType.branch, .leaf])
    func aSlotCountPastThePageIsACorruptPageNotAnOverread(type: PageType) throws {
        var page = PageCodec.emptyPage(type, id: PageID(2), generation: 1, count: 3000, word: 3, pageBytes: Self.pageBytes)
        PageCodec.seal(&page)
        let fileSystem = try storeWithRoot(page, height: type == .branch ? 2 : 1)
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        #expect {
            try engine.snapshot().get(Array("key".utf8))
        } throws: { error in
            guard case let EngineError.corruptPage(_, offset, _) = error else { return false }
            return offset == 2 * Int64(Self.pageBytes)
        }
        // The newest read, with no snapshot made, goes through the same checks.
        #expect {
            try engine.withValue(forKey: Array("key".utf8)) { $0.byteCount }
        } throws: { error in
            guard case let EngineError.corruptPage(_, offset, _) = error else { return false }
            return offset == 2 * Int64(Self.pageBytes)
        }
        #expect(throws: EngineError.self) { try engine.snapshot().scan() }
        try engine.close(checkpoint: false)
    }
}

extension EngineBehaviourTests {
    @Test func blindWritesFromManyThreadsNeverConflictAndTheLastWriterWins() throws {
        let engine = try StorageEngine.inMemory()
        let failures = Locked(0)
        TestThreads(4) { thread in
            for round in 0..<50 {
                let batch = WALBatch([.put(key: Array("shared".utf8), value: [UInt8(thread), UInt8(round)])])
                if (try? engine.commit(batch)) == nil { failures.withLock { $0 += 1 } }
            }
        }.wait()
        #expect(failures.withLock { $0 } == 0)
        #expect(try engine.snapshot().get(Array("shared".utf8))?.last == 49)
    }
}
