import Foundation
import StrataFileIO
import Synchronization
import Testing
import StrataWAL
@testable import StrataEngine

/// What a memtable should hold: every change of every key, oldest first.
private struct MemtableModel {
    var changes: [[UInt8]: [(version: UInt64, value: [UInt8]?)]] = [:]

    mutating func apply(_ batch: WALBatch, version: UInt64) {
        var last: [[UInt8]: [UInt8]?] = [:]
        for operation in batch.operations { last[operation.key] = .some(operation.value) }
        for (key, value) in last { changes[key, default: []].append((version, value)) }
    }

    func entry(_ key: [UInt8], at version: UInt64) -> MemtableEntry? {
        changes[key]?.last { $0.version <= version }.map { MemtableEntry(version: $0.version, value: $0.value) }
    }

    /// Keys in order with their newest change at or below `version`.
    func view(at version: UInt64) -> [(key: [UInt8], entry: MemtableEntry)] {
        changes.keys.sorted { compareKeys($0, $1) < 0 }.compactMap { key in entry(key, at: version).map { (key, $0) } }
    }
}

private func walk(_ memtable: Memtable, from start: [UInt8]?, reverse: Bool, at version: UInt64) -> [(key: [UInt8], entry: MemtableEntry)] {
    var iterator = memtable.entries(from: start, reverse: reverse, at: version)
    var result: [(key: [UInt8], entry: MemtableEntry)] = []
    while let next = iterator.next() { result.append((next.key, next.value)) }
    return result
}

/// Whether both lists hold the same keys and entries in order (a Bool, so a failing
/// expectation does not print both lists whole).
private func same(_ left: [(key: [UInt8], entry: MemtableEntry)], _ right: [(key: [UInt8], entry: MemtableEntry)]) -> Bool {
    left.count == right.count && zip(left, right).allSatisfy { $0.key == $1.key && $0.entry == $1.entry }
}

private func expectSame(_ left: [(key: [UInt8], entry: MemtableEntry)], _ right: [(key: [UInt8], entry: MemtableEntry)],
                        _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation) {
    let matches = same(left, right)
    #expect(matches, comment, sourceLocation: sourceLocation)
}

extension Memtable {
    /// Recovery's path (ReplayedChanges.swift): each change made into a node as the log is
    /// read, then the run linked in key order. `changes` are sorted, no key twice.
    func linkReplayed(_ changes: [(key: [UInt8], entry: MemtableEntry)]) {
        let nodes = changes.map { change in
            change.key.withUnsafeBytes { key in
                change.entry.value.withUnsafeBytesIfPresent { makeNode(key, version: change.entry.version, value: $0) }
            }
        }
        link(sortedUniqueCount: nodes.count) { nodes[$0] }
    }
}

/// Every memtable test goes through the engine's own paths (a commit's `apply`, recovery's
/// `makeNode` and `link`) and checks the invariants (`_checkInvariants`) after every step.
@Suite struct MemtableTests {
    /// A value of `Memtable.inPlaceValueBytes` or more, in a batch linked from its
    /// operations, is pointed at, not copied (Memtable.K5): it reads back whole once the
    /// caller's batch is gone and its memory taken again and overwritten, in a sorted
    /// batch and in one among the keys held, and its bytes count as if copied. The
    /// memtable keeps the arrays its nodes point at and nothing else of the batch: not a
    /// value a later operation of its key replaced, nor one it copied.
    /// A checkpoint folding two memtables (a close after a stopped checkpoint) takes each
    /// key's newest change at or below its version from the newer memtable when it has
    /// one, a delete included, and from the older one otherwise, in key order.
    @Test(arguments: [UInt64(31), 32, 33])
    func newestChangesOfTwoMemtablesTakeTheNewerOnesChange(seed: UInt64) {
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let older = Memtable(), newer = Memtable()
        var olderModel = MemtableModel(), newerModel = MemtableModel()
        func batch() -> WALBatch {
            var batch = WALBatch()
            for _ in 0..<(1 + random.next() % 20) {
                let key = Array("k\(random.next() % 60)".utf8)
                if random.next() % 4 == 0 { batch.delete(key) } else { batch.put(key, [UInt8(truncatingIfNeeded: random.next())]) }
            }
            return batch
        }
        for version in UInt64(1)...8 {
            let next = batch()
            older.apply(next, version: version)
            olderModel.apply(next, version: version)
        }
        for version in UInt64(9)...16 {
            let next = batch()
            newer.apply(next, version: version)
            newerModel.apply(next, version: version)
        }
        for at in [UInt64(4), 8, 12, 16] {
            var expected: [[UInt8]: MemtableEntry] = [:]
            for (key, entry) in olderModel.view(at: at) { expected[key] = entry }
            for (key, entry) in newerModel.view(at: at) { expected[key] = entry }
            let folded = Memtable.newestChanges(of: [newer, older], at: at)
            let keys = folded.map { Array($0.key) }
            #expect(keys == expected.keys.sorted { compareKeys($0, $1) < 0 }, "at \(at)")
            #expect(folded.allSatisfy { expected[Array($0.key)] == $0.entry }, "at \(at)")
        }
    }

    @Test func valuesLinkedInPlaceOutliveTheirBatch() throws {
        let memtable = Memtable()
        func key(_ number: Int) -> [UInt8] { Array(String(format: "k%03d", number).utf8) }
        func size(_ number: Int) -> Int { number.isMultiple(of: 3) ? 100 + number : Memtable.inPlaceValueBytes + number }
        var pointedAt = 0
        for round in 0..<2 {
            var batch = WALBatch()
            for number in stride(from: round, to: 64, by: 2) {
                // Put twice, the first value replaced within the batch.
                if number.isMultiple(of: 4) { batch.put(key(number), [UInt8](repeating: 0xAA, count: 2 * Memtable.inPlaceValueBytes)) }
                batch.put(key(number), [UInt8](repeating: UInt8(number), count: size(number)))
                if size(number) >= Memtable.inPlaceValueBytes { pointedAt += 1 }
            }
            memtable.apply(batch, version: UInt64(round + 1))
            batch.operations.removeAll()
            try memtable._checkInvariants()
        }
        #expect(memtable.writerOnly.pointee.kept.count == pointedAt)
        // Memory the batches' values took, taken again and overwritten.
        let filler = (0..<256).map { _ in [UInt8](repeating: 0xEE, count: Memtable.inPlaceValueBytes + 32) }
        var counted = 0
        for number in 0..<64 {
            let value = memtable.entry(key(number))?.value
            let intact = value == [UInt8](repeating: UInt8(number), count: size(number))
            #expect(intact, "the value of \(key(number)) reads back whole")
            counted += size(number)
        }
        #expect(memtable.byteCount > counted, "values pointed at count toward the memtable's bytes")
        withExtendedLifetime(filler) {}
    }

    /// Random batches (appended, scattered, overwriting, deleting, a key put twice, put
    /// then deleted or deleted then put in one batch) at increasing versions: lookups and
    /// walks in both directions, from any start and as of any earlier version, match a
    /// model of every change.
    /// Seed 3 runs with a budget so small that the hash index fills up early and lookups
    /// of the keys it lacks go through the skip list.
    /// Seed 4 commits batches of up to 700 keys: a batch is searched and linked in rounds
    /// of 256, each round seeing the nodes the one before it linked.
    /// Seeds 5 and 6 run a reader's memtable, which defers linking (Memtable+Deferred.swift):
    /// keys are looked up at every version before anything walks the list, then walks link
    /// what was left out. Seed 6's index fills up halfway: the memtable links everything and
    /// stops deferring, and lookups go on through the skip list.
    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6])
    func everyVersionReadsAsTheModelSays(seed: UInt64) throws {
        print("MemtableTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        let memtable = switch seed {
        case 3: Memtable(budgetBytes: 4_096)
        case 5: Memtable(defersLinking: true)
        case 6: Memtable(budgetBytes: 512 << 10, defersLinking: true)
        default: Memtable()
        }
        let defers = seed >= 5
        var model = MemtableModel()
        func key(_ number: UInt64) -> [UInt8] { Array(String(format: "%06llu", number).utf8) }
        for version in UInt64(1)...150 {
            var batch = WALBatch()
            // Every other batch writes its smallest key twice (the first write must lose);
            // the others delete key 1 and put it, or put it and delete it (the last counts).
            if version % 2 == 0 { batch.put(key(0), [0]) }
            if version % 4 == 1 { batch.delete(key(1)) }
            if version % 4 == 3 { batch.put(key(1), [UInt8(truncatingIfNeeded: version)]) }
            let appended = version % 3 == 0
            for index in 0..<(1 + Int(random.next() % (seed == 4 ? 700 : 120))) {
                let number = appended ? version * 1_000 + UInt64(index) : random.next() % (version * 1_000)
                if random.next() % 7 == 0 { batch.delete(key(number)) } else {
                    batch.put(key(number), [UInt8](repeating: UInt8(truncatingIfNeeded: version), count: Int(random.next() % 30)))
                }
            }
            if version % 2 == 0 { batch.put(key(0), [UInt8(truncatingIfNeeded: version)]) }
            if version % 4 == 1 { batch.put(key(1), [UInt8(truncatingIfNeeded: version), 1]) }
            if version % 4 == 3 { batch.delete(key(1)) }
            memtable.apply(batch, version: version)
            model.apply(batch, version: version)
            try memtable._checkInvariants()
            #expect(memtable.count == model.changes.values.reduce(0) { $0 + $1.count }, "seed \(seed), version \(version)")
            if defers && version % 5 == 0 {
                // Before any walk: what was left out is found by key, at every version.
                for _ in 0..<200 {
                    let at = 1 + random.next() % version
                    let probe = random.next() % 4 == 0 ? key(version % 2) : key(random.next() % (version * 1_000))
                    #expect(memtable.entry(probe, at: at) == model.entry(probe, at: at), "seed \(seed), at \(at)")
                }
            }
            guard version % 25 == 0 else { continue }
            if defers {
                let unlinked = memtable.unlinkedCount.load(ordering: .relaxed)
                #expect(unlinked > 0 || !memtable.defersLinking.load(ordering: .relaxed), "seed \(seed), version \(version)")
            }
            for _ in 0..<4 {
                let at = 1 + random.next() % version
                let view = model.view(at: at)
                expectSame(walk(memtable, from: nil, reverse: false, at: at), view, "seed \(seed), at \(at)")
                expectSame(walk(memtable, from: nil, reverse: true, at: at), view.reversed(), "seed \(seed), at \(at)")
                let start = key(random.next() % (version * 1_000))
                expectSame(walk(memtable, from: start, reverse: false, at: at), view.filter { compareKeys($0.key, start) >= 0 },
                           "seed \(seed), at \(at)")
                expectSame(walk(memtable, from: start, reverse: true, at: at),
                           view.filter { compareKeys($0.key, start) <= 0 }.reversed(), "seed \(seed), at \(at)")
                // Counts, with and without a bound and a limit, as the model's view says.
                let bounds = [key(random.next() % (version * 1_000)), key(random.next() % (version * 1_000))].sorted { compareKeys($0, $1) < 0 }
                let upper = random.next() % 4 == 0 ? nil : bounds[1]
                let limit = random.next() % 3 == 0 ? Int(random.next() % 100) : Int.max
                let values = view.count { change in
                    compareKeys(change.key, bounds[0]) >= 0 && change.entry.value != nil
                        && upper.map { compareKeys(change.key, $0) < 0 } ?? true
                }
                #expect(memtable.count(KeyRange(from: bounds[0], to: upper), at: at, limit: limit) == min(values, limit),
                        "seed \(seed), at \(at), limit \(limit)")
                for _ in 0..<200 {
                    let probe = key(random.next() % (version * 1_000))
                    #expect(memtable.entry(probe, at: at) == model.entry(probe, at: at), "seed \(seed), at \(at)")
                }
            }
            #expect(memtable.unlinkedCount.load(ordering: .relaxed) == 0, "seed \(seed), version \(version)")
        }
        // Seed 5's index took every key; seed 6's filled up and the memtable stopped deferring.
        if defers { #expect(memtable.defersLinking.load(ordering: .relaxed) == (seed == 5), "seed \(seed)") }
    }

    /// A reader's batch of more changes than its index has slots left, to fewer keys than
    /// that, keeps the memtable deferring its links (Memtable+Deferred.swift): the room it
    /// needs is counted in distinct keys, and each key reads as its last change.
    @Test func aReaderBatchOfRepeatedKeysBeyondTheIndexRoomKeepsDeferring() throws {
        let memtable = Memtable(budgetBytes: 64 << 10, defersLinking: true)
        // More changes than the index has slots, let alone room for.
        let room = memtable.index.slotCount
        var batch = WALBatch()
        var last: [[UInt8]: [UInt8]?] = [:]
        for change in 0..<(room + 10) {
            let key = Array("key\(change % 3)".utf8)
            if change % 7 == 0 {
                batch.delete(key)
                last[key] = .some(nil)
            } else {
                let value = [UInt8(truncatingIfNeeded: change), UInt8(truncatingIfNeeded: change >> 8)]
                batch.put(key, value)
                last[key] = .some(value)
            }
        }
        #expect(!memtable.index.hasRoom(for: batch.operations.count))
        memtable.apply(batch, version: 1)
        try memtable._checkInvariants()
        let defers = memtable.defersLinking.load(ordering: .relaxed)
        #expect(defers)
        #expect(memtable.unlinkedCount.load(ordering: .relaxed) == 3)
        for (key, value) in last {
            #expect(memtable.entry(key, at: 1) == MemtableEntry(version: 1, value: value), "\(String(decoding: key, as: UTF8.self))")
        }
    }

    /// A long forward walk reads ahead, a batch of segments at a time (MemtableLookahead):
    /// from any start it hands out every key once, in order, as following the links would,
    /// including where a segment is longer than a lane takes in one batch (the memtable is
    /// checked to hold such a segment), and a copy of a walk goes on by itself.
    @Test func aWalkThatReadsAheadMissesNoNode() throws {
        var random = SplitMix64(seed: 11)
        print("aWalkThatReadsAheadMissesNoNode seed 11")
        let memtable = Memtable()
        var keys = Set<[UInt8]>()
        for version in UInt64(1)...40 {
            var batch = WALBatch()
            for _ in 0..<1_000 {
                let key = Array(String(format: "k%08llu", random.next() % 1_000_000).utf8)
                keys.insert(key)
                batch.put(key, [UInt8(truncatingIfNeeded: version)])
            }
            memtable.apply(batch, version: version)
            try memtable._checkInvariants()
        }
        let sorted = keys.sorted { compareKeys($0, $1) < 0 }
        // A run of more than `laneNodes` nodes of height 1 makes a lane stop short.
        var longestRun = 0
        var run = 0
        var node = memtable.firstNode(atLeast: UnsafeRawBufferPointer(start: nil, count: 0))
        while let current = node {
            run = current.height >= 2 ? 1 : run + 1
            longestRun = max(longestRun, run)
            node = current.next(0)
        }
        #expect(longestRun > MemtableLookahead.laneNodes, "longest segment \(longestRun)")
        for _ in 0..<20 {
            let from = Int(random.next() % UInt64(sorted.count))
            var iterator = memtable.entries(from: sorted[from], reverse: false)
            var walked: [[UInt8]] = []
            while let next = iterator.next() { walked.append(next.key) }
            #expect(walked == Array(sorted[from...]), "from \(from)")
            #expect(iterator.readsAhead || sorted.count - from < 4 * MemtableIterator.lookaheadAfter)
        }
        var first = memtable.entries(from: nil, reverse: false)
        for _ in 0..<100 { _ = first.next() }
        #expect(first.readsAhead)
        var second = first
        var fromFirst: [[UInt8]] = []
        var fromSecond: [[UInt8]] = []
        for _ in 0..<500 {
            fromFirst.append(first.next()!.key)
            fromSecond.append(second.next()!.key)
        }
        #expect(fromFirst == Array(sorted[100..<600]) && fromSecond == fromFirst)
    }

    /// A count reads ahead in lanes that count as they go (`MemtableLookahead.countValues`):
    /// where a segment starts among a key's changes, at any version, with a bound, and with
    /// a limit just below, at and just above the answer, it counts what the model holds.
    @Test func aCountThatReadsAheadCountsWhatTheModelHolds() throws {
        var random = SplitMix64(seed: 21)
        print("aCountThatReadsAheadCountsWhatTheModelHolds seed 21")
        let memtable = Memtable()
        var model = MemtableModel()
        func key(_ number: UInt64) -> [UInt8] { Array(String(format: "c%05llu", number).utf8) }
        for version in UInt64(1)...60 {
            var batch = WALBatch()
            for _ in 0..<300 {
                let number = random.next() % 4_000
                if random.next() % 8 == 0 { batch.delete(key(number)) } else { batch.put(key(number), [UInt8(truncatingIfNeeded: version)]) }
            }
            memtable.apply(batch, version: version)
            model.apply(batch, version: version)
            try memtable._checkInvariants()
        }
        var readAhead = false
        for round in 0..<150 {
            let at = round % 2 == 0 ? 60 : 1 + random.next() % 60
            let bounds = [random.next() % 4_000, random.next() % 4_000].sorted()
            let (lower, upper) = (key(bounds[0]), round % 5 == 0 ? nil : key(bounds[1]))
            let values = model.view(at: at).count { change in
                compareKeys(change.key, lower) >= 0 && change.entry.value != nil
                    && upper.map { compareKeys(change.key, $0) < 0 } ?? true
            }
            for limit in [values - 1, values, values + 1, Int.max] where limit >= 0 {
                #expect(memtable.count(KeyRange(from: lower, to: upper), at: at, limit: limit) == min(values, limit),
                        "at \(at), \(bounds), limit \(limit)")
            }
            var walk = memtable.entries(from: lower, reverse: false, at: at)
            for _ in 0..<(4 * MemtableIterator.lookaheadAfter) { _ = walk.next() }
            readAhead = readAhead || walk.readsAhead
        }
        #expect(readAhead)
    }

    /// A sorted run of changes, each at its own version (as recovery inserts them), reads
    /// back as given.
    @Test func aSortedRunReadsBackAsInserted() throws {
        var random = SplitMix64(seed: 9)
        let entries = (0..<5_000).map { number in
            (key: Array(String(format: "k%07d", number * 3).utf8),
             entry: MemtableEntry(version: 1 + random.next() % 900, value: random.next() % 5 == 0 ? nil : [UInt8(number % 256)]))
        }
        let memtable = Memtable()
        memtable.linkReplayed(entries)
        try memtable._checkInvariants()
        #expect(memtable.count == entries.count)
        expectSame(walk(memtable, from: nil, reverse: false, at: .max), entries, "forward")
        expectSame(walk(memtable, from: nil, reverse: true, at: .max), entries.reversed(), "reverse")
    }

    @Test func scansStartWhereAskedInBothDirections() throws {
        let memtable = Memtable()
        memtable.apply(WALBatch(["f", "b", "d"].map { .put(key: Array($0.utf8), value: []) }), version: 1)
        try memtable._checkInvariants()
        func keys(_ start: String?, reverse: Bool) -> [String] {
            walk(memtable, from: start.map { Array($0.utf8) }, reverse: reverse, at: .max).map { String(decoding: $0.key, as: UTF8.self) }
        }
        #expect(keys("c", reverse: false) == ["d", "f"])
        #expect(keys("d", reverse: false) == ["d", "f"])
        #expect(keys("c", reverse: true) == ["b"])
        #expect(keys("d", reverse: true) == ["d", "b"])
        #expect(keys(nil, reverse: true) == ["f", "d", "b"])
        #expect(keys("a", reverse: true) == [])
        #expect(keys("g", reverse: false) == [])
    }

    /// Readers on other threads, reading as of the last published version while the writer
    /// links in newer ones, always see exactly that version: every batch writes every key
    /// with a value naming its version; some of the walks read ahead (MemtableLookahead)
    /// while the writer links nodes. (Threads, not tasks: the readers spin.)
    /// With `defers`, a reader's memtable (Memtable+Deferred.swift): the readers' walks link
    /// the nodes left out while the writer applies more.
    @Test(arguments: [false, true])
    func readersBesideTheWriterSeeExactlyTheirVersion(defers: Bool) throws {
        final class Shared: Sendable {
            let memtable: Memtable
            init(defers: Bool) { memtable = Memtable(defersLinking: defers) }
            let published = Atomic<UInt64>(0)
            let failures = Atomic(0)
            /// Walks that read ahead (MemtableLookahead) while the writer linked nodes.
            let walksReadingAhead = Atomic(0)
            let finished = DispatchSemaphore(value: 0)
        }
        let shared = Shared(defers: defers)
        let keys = (0..<200).map { Array(String(format: "key%04d", $0).utf8) }
        let lastVersion: UInt64 = 400
        func batch(_ version: UInt64) -> WALBatch {
            var batch = WALBatch()
            for key in keys.shuffled() { batch.put(key, withUnsafeBytes(of: version.littleEndian) { Array($0) }) }
            return batch
        }
        shared.memtable.apply(batch(1), version: 1)
        try shared.memtable._checkInvariants()
        shared.published.store(1, ordering: .releasing)
        for reader in 0..<2 {
            Thread.detachNewThread {
                var random = SplitMix64(seed: UInt64(reader))
                while true {
                    let version = shared.published.load(ordering: .acquiring)
                    let entry = shared.memtable.entry(keys[Int(random.next() % 200)], at: version)
                    if entry?.version != version || entry?.value != withUnsafeBytes(of: version.littleEndian, { Array($0) }) {
                        shared.failures.add(1, ordering: .relaxed)
                    }
                    if random.next() % 64 == 0 {
                        var iterator = shared.memtable.entries(from: nil, reverse: false, at: version)
                        var seen = 0
                        while let next = iterator.next() {
                            if next.value.version != version { shared.failures.add(1, ordering: .relaxed) }
                            seen += 1
                        }
                        if seen != keys.count { shared.failures.add(1, ordering: .relaxed) }
                        if iterator.readsAhead { shared.walksReadingAhead.add(1, ordering: .relaxed) }
                    }
                    if version == lastVersion { break }
                }
                shared.finished.signal()
            }
        }
        for version in 2...lastVersion {
            shared.memtable.apply(batch(version), version: version)
            shared.published.store(version, ordering: .releasing)
        }
        shared.finished.wait()
        shared.finished.wait()
        #expect(shared.failures.load(ordering: .relaxed) == 0)
        #expect(shared.walksReadingAhead.load(ordering: .relaxed) > 0)
        // The readers are done: the writer's thread is the only one left.
        try shared.memtable._checkInvariants()
        shared.memtable.linkDeferred()
        try shared.memtable._checkInvariants()
        #expect(shared.memtable.count == keys.count * Int(lastVersion))
    }
}

/// The memory the memtable maps: a populated table large enough for huge pages is, like a
/// small one, zeroed and backed whole at once (every page resident before it is touched);
/// a sparse one is backed only where written.
@Suite struct MappedMemoryTests {
    #if os(Linux)
    /// How many of the pages of `byteCount` bytes at `start` are resident.
    private func residentPages(_ start: UnsafeMutableRawPointer, _ byteCount: Int) -> Int {
        let pageBytes = Int(getpagesize())
        var flags = [UInt8](repeating: 0, count: (byteCount + pageBytes - 1) / pageBytes)
        #expect(mincore(start, byteCount, &flags) == 0)
        return flags.filter { $0 & 1 != 0 }.count
    }

    @Test(arguments: [64 << 10, 2 << 20, 6 << 20])
    func populatedMemoryIsZeroedAndResident(byteCount: Int) {
        let start = MappedMemory.allocate(byteCount, populated: true)
        defer { MappedMemory.deallocate(start, byteCount: byteCount) }
        let pages = byteCount / Int(getpagesize())
        #expect(residentPages(start, byteCount) == pages)
        let bytes = UnsafeMutableRawBufferPointer(start: start, count: byteCount)
        #expect(bytes.allSatisfy { $0 == 0 })
        bytes[byteCount - 1] = 7
        #expect(bytes[byteCount - 1] == 7)
    }

    @Test func sparseMemoryIsBackedOnlyWhereWritten() {
        let byteCount = 6 << 20
        let start = MappedMemory.allocate(byteCount)
        defer { MappedMemory.deallocate(start, byteCount: byteCount) }
        #expect(residentPages(start, byteCount) == 0)
        start.storeBytes(of: 1, toByteOffset: 0, as: UInt8.self)
        #expect(residentPages(start, byteCount) < byteCount / Int(getpagesize()) / 2)
    }
    #endif
}

/// The arena's next large block is made ready on another thread while the current one
/// fills (`SpareBlock`): the applier that links commits never waits for the kernel to back
/// a block it could have had backed beforehand.
@Suite struct SpareBlockTests {
    /// Takes the spare once it is ready, waiting at most ten seconds.
    private func takeWhenReady(_ spare: SpareBlock) -> UnsafeMutableRawPointer? {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let block = spare.take() { return block }
            Thread.sleep(forTimeInterval: 0.001)
        }
        return nil
    }

    @Test func aPreparedBlockIsZeroedAndTakenOnce() throws {
        let spare = SpareBlock()
        let byteCount = MemtableArena.largestBlockBytes
        spare.prepare(byteCount)
        let block = try #require(takeWhenReady(spare))
        defer { MappedMemory.deallocate(block, byteCount: byteCount) }
        let bytes = UnsafeMutableRawBufferPointer(start: block, count: byteCount)
        #expect(bytes.allSatisfy { $0 == 0 })
        bytes[byteCount - 1] = 9
        #expect(spare.take() == nil, "a ready block is handed out once")
        spare.abandon()
    }

    @Test func anAbandonedSpareIsNeverHandedOut() {
        let spare = SpareBlock()
        spare.prepare(MemtableArena.largestBlockBytes)
        spare.abandon()
        spare.prepare(MemtableArena.largestBlockBytes)
        Thread.sleep(forTimeInterval: 0.2)
        #expect(spare.take() == nil)
    }

    /// Chunks of an arena that grew through many large blocks, some of them spares, are
    /// all apart: each still holds the bytes written into it.
    @Test func anArenaOfSpareBlocksHandsOutDisjointChunks() {
        var arena = MemtableArena()
        var chunks: [(UnsafeMutableRawPointer, Int)] = []
        var random = SplitMix64(seed: 43)
        var lastReserved = 0
        while arena.reservedBytes < 12 * MemtableArena.largestBlockBytes {
            let count = 16 + Int(random.next() % 3_000)
            let chunk = arena.allocate(count)
            chunk.initializeMemory(as: UInt8.self, repeating: UInt8(truncatingIfNeeded: chunks.count), count: count)
            chunks.append((chunk, count))
            if arena.reservedBytes != lastReserved {
                lastReserved = arena.reservedBytes
                // Time for the spare to be made before the block fills.
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
        for (index, (chunk, count)) in chunks.enumerated() {
            let bytes = UnsafeRawBufferPointer(start: chunk, count: count)
            #expect(bytes.allSatisfy { $0 == UInt8(truncatingIfNeeded: index) }, "chunk \(index) was overwritten")
        }
        print("\(chunks.count) chunks in \(arena.reservedBytes >> 20) MiB; \(arena.spareBlocksTaken) blocks were spares")
        #expect(arena.spareBlocksTaken >= 8)
        arena.deallocateAll()
    }
}

@Suite struct MemtableArenaTests {
    /// Nodes of a few KiB (values of 4 KiB) share blocks once the blocks have grown past
    /// four times their size, and a node too large to share the next block gets one of
    /// its own without stopping the blocks from growing.
    @Test func nodesOfAFewKiBShareGrowingBlocks() {
        var arena = MemtableArena()
        var chunks: [(UnsafeMutableRawPointer, Int)] = []
        for index in 0..<1_000 {
            let count = index == 500 ? MemtableArena.largestBlockBytes / 4 + 8 : 4_200
            let chunk = arena.allocate(count)
            chunk.initializeMemory(as: UInt8.self, repeating: UInt8(truncatingIfNeeded: index), count: count)
            chunks.append((chunk, count))
        }
        for (index, (chunk, count)) in chunks.enumerated() {
            let bytes = UnsafeRawBufferPointer(start: chunk, count: count)
            #expect(bytes.allSatisfy { $0 == UInt8(truncatingIfNeeded: index) }, "chunk \(index) was overwritten")
        }
        // The first three nodes get blocks of their own while the next block grows past
        // four times their size; then blocks of 32 KiB doubling to 2 MiB, and the large
        // request's own: 11 blocks (1,000 before the blocks grew on both paths).
        #expect(arena.blockCount <= 16, "\(arena.blockCount) blocks for 1,000 nodes")
        arena.deallocateAll()
    }

    /// Blocks grow to an eighth of the memtable's budget, from 64 KiB to 2 MiB: a small
    /// memtable's last block and spare stay a fraction of what it holds.
    @Test func blocksGrowToAnEighthOfTheBudget() {
        #expect(MemtableArena.blockLimit(forBudget: 64 << 20) == 2 << 20)
        #expect(MemtableArena.blockLimit(forBudget: 16 << 20) == 2 << 20)
        #expect(MemtableArena.blockLimit(forBudget: 8 << 20) == 1 << 20)
        #expect(MemtableArena.blockLimit(forBudget: 4 << 20) == 512 << 10)
        #expect(MemtableArena.blockLimit(forBudget: 1 << 20) == 128 << 10)
        #expect(MemtableArena.blockLimit(forBudget: 0) == 64 << 10)

        var arena = MemtableArena(blockLimit: 512 << 10)
        var allocated = 0
        var random = SplitMix64(seed: 0x3A9_0004)
        print("seed 0x3A9_0004")
        var chunks: [(UnsafeMutableRawPointer, Int)] = []
        while allocated < 6 << 20 {
            let count = 16 + Int(random.next() % 400)
            let chunk = arena.allocate(count)
            chunk.initializeMemory(as: UInt8.self, repeating: UInt8(truncatingIfNeeded: chunks.count), count: count)
            chunks.append((chunk, count))
            allocated += (count + 7) & ~7
        }
        // Below the limit the blocks double from 4 KiB (7 blocks, 508 KiB); then 512 KiB each.
        #expect(arena.reservedBytes - allocated < 512 << 10, "\(arena.reservedBytes) bytes reserved for \(allocated)")
        #expect(arena.blockCount >= 7 + (6 << 20) / (512 << 10) - 1)
        for (index, (chunk, count)) in chunks.enumerated() {
            let bytes = UnsafeRawBufferPointer(start: chunk, count: count)
            #expect(bytes.allSatisfy { $0 == UInt8(truncatingIfNeeded: index) }, "chunk \(index) was overwritten")
        }
        arena.deallocateAll()
    }

    /// A memtable frozen for a checkpoint gives back the block made ready for its arena and
    /// makes no more, and still takes the batches in flight at the freeze.
    @Test func aFrozenMemtableKeepsNoSpareBlock() throws {
        let memtable = Memtable(budgetBytes: 4 << 20)
        let limit = memtable.writerOnly.pointee.arena.blockLimit
        #expect(limit == 512 << 10)
        let value = [UInt8](repeating: 7, count: 200)
        var version: UInt64 = 0
        /// Applies batches of 100 changes until the arena reserved `bytes` more, pausing
        /// whenever it took a block, so that its spare can be made meanwhile.
        func fill(_ bytes: Int) {
            let target = memtable.writerOnly.pointee.arena.reservedBytes + bytes
            var blocks = memtable.writerOnly.pointee.arena.blockCount
            while memtable.writerOnly.pointee.arena.reservedBytes < target {
                version += 1
                var batch = WALBatch()
                for index in 0..<100 { batch.put(Array("key \(version) \(index)".utf8), value) }
                memtable.apply(batch, version: version)
                if memtable.writerOnly.pointee.arena.blockCount != blocks {
                    blocks = memtable.writerOnly.pointee.arena.blockCount
                    Thread.sleep(forTimeInterval: 0.02)
                }
            }
        }
        fill(4 * limit)
        let taken = memtable.writerOnly.pointee.arena.spareBlocksTaken
        #expect(taken >= 2, "\(taken) of the blocks were spares")
        memtable.releaseSpareBlock()
        fill(3 * limit)
        #expect(memtable.writerOnly.pointee.arena.spareBlocksTaken == taken, "a frozen memtable took a spare")
        for batchVersion in 1...version {
            let key = Array("key \(batchVersion) 99".utf8)
            #expect(memtable.entry(key)?.value == value, "key of batch \(batchVersion)")
        }
    }

    /// A checkpoint frees the spare of the memtable it freezes, and only of that one.
    @Test func aCheckpointFreesTheSpareOfTheMemtableItFreezes() throws {
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem())
        var batch = WALBatch()
        batch.put(Array("key".utf8), Array("value".utf8))
        try engine.commit(batch)
        let frozen = engine.snapshots.current.active
        #expect(!frozen.releasedSpareBlock)
        try engine.checkpoint()
        #expect(frozen.releasedSpareBlock)
        #expect(engine.snapshots.current.active !== frozen && !engine.snapshots.current.active.releasedSpareBlock)
        try engine.close()
    }

    /// A memtable holding one value of a few hundred KiB reserves about that much, not a
    /// block several times its size.
    @Test func oneLargeNodeTakesABlockOfItsOwnSize() {
        var arena = MemtableArena()
        _ = arena.allocate(64)
        _ = arena.allocate(300 << 10)
        #expect(arena.reservedBytes < 320 << 10, "\(arena.reservedBytes) bytes reserved for 300 KiB")
        arena.deallocateAll()
    }
}
