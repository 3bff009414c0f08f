import Foundation
import StrataFileIO
import StrataLocks
import StrataWAL
import Synchronization
import Testing
@testable import StrataEngine

/// `StorageEngine.withValue(forKey:_:)`: a key's newest committed value, read without a
/// snapshot object, from the view it pins in the registry for the read alone.
@Suite struct NewestValueTests {
    private func key(_ number: Int) -> [UInt8] { Array(String(format: "key%06d", number).utf8) }

    /// The same answer as a snapshot's, wherever the key's newest change lies: the tree,
    /// the frozen memtable (a checkpoint in flight is not needed: the active memtable over
    /// a tree is the common case, and the tree alone after a checkpoint), a delete over a
    /// tree value, a key never written, and a value in overflow pages.
    @Test func answersWhatASnapshotAnswers() throws {
        let engine = try StorageEngine.inMemory()
        defer { try? engine.close() }
        var model: [[UInt8]: [UInt8]] = [:]
        func commit(_ operations: [WALBatch.Operation]) throws {
            try engine.commit(WALBatch(operations))
            for operation in operations {
                switch operation {
                case let .put(key, value): model[key] = value
                case let .delete(key): model[key] = nil
                default: Issue.record("unexpected operation")
                }
            }
        }
        try commit((0..<2_000).map { .put(key: key($0), value: Array("tree \($0)".utf8)) })
        try commit([.put(key: key(2_000), value: [UInt8](repeating: 7, count: 40_000))])
        try engine.checkpoint()
        try commit((0..<2_000).filter { $0 % 3 == 0 }.map { .put(key: key($0), value: Array("memtable \($0)".utf8)) })
        try commit((0..<2_000).filter { $0 % 5 == 0 }.map { .delete(key: key($0)) })
        let snapshot = engine.snapshot()
        for number in 0..<2_100 {
            let newest = try engine.withValue(forKey: key(number)) { $0.withUnsafeBytes { Array($0) } }
            #expect(newest == model[key(number)], "key \(number)")
            #expect(newest == (try snapshot.get(key(number))), "key \(number)")
        }
        // A read sees the commits before it, not a snapshot taken before them.
        try commit([.put(key: key(1), value: Array("after".utf8))])
        #expect(try engine.withValue(forKey: key(1)) { $0.withUnsafeBytes { Array($0) } } == Array("after".utf8))
        #expect(try snapshot.get(key(1)) == Array("tree 1".utf8))
        #expect(engine.snapshots.oldestPins().version == snapshot.version, "no pin left behind but the snapshot's")
    }

    /// A read-only store beside a writer (ReaderTable.swift): each newest read moves it to
    /// the writer's newest durable version, across checkpoints, and leaves no snapshot of
    /// its own pinned. Fails when the read reads the view the store last moved to instead.
    @Test func aReaderBesideAWriterReadsTheWritersNewestValue() throws {
        let fileSystem = SimulatedFileSystem()
        let (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        defer { try? writer.close() }
        func put(_ value: String) throws { try writer.commit(WALBatch([.put(key: key(1), value: Array(value.utf8))])) }
        try put("1")
        let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem)
        defer { try? reader.close() }
        func newest() throws -> String? {
            try reader.withValue(forKey: key(1)) { $0.withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }
        }
        #expect(try newest() == "1")
        try put("2")
        #expect(try newest() == "2")
        try writer.checkpoint()
        try put("3")
        try writer.checkpoint()
        try writer.commit(WALBatch([.delete(key: key(1))]))
        #expect(try newest() == nil)
        try put("4")
        #expect(try newest() == "4")
        #expect(reader.version == writer.version)
        #expect(reader.snapshots.oldestPins() == (nil, nil))
    }

    /// Readers on several threads while a writer commits and checkpoints: every read sees
    /// a whole commit (the two keys of a transfer agree) and never an older one than the
    /// thread's read before; once they stop, no pin is left. With the views the reads pin
    /// retired and released as checkpoints and commits publish newer ones, this fails when
    /// the registry lets a view go while a read borrows it (a crash, or a torn pair).
    @Test func readsBesideCommitsAndCheckpointsSeeWholeCommits() throws {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 64 << 10
        let engine = try StorageEngine.inMemory(options: options)
        defer { try? engine.close() }
        let (left, right) = (Array("left".utf8), Array("right".utf8))
        func pair(_ round: UInt64) -> WALBatch {
            withUnsafeBytes(of: round.bigEndian) { bytes in
                WALBatch([.put(key: left, value: Array(bytes)), .put(key: right, value: Array(bytes)),
                          .put(key: Array("filler\(round % 512)".utf8), value: [UInt8](repeating: 1, count: 200))])
            }
        }
        try engine.commit(pair(0))
        let stop = Atomic(false)
        let torn = Atomic(0)
        let backwards = Atomic(0)
        let reads = Atomic(0)
        let readers = TestThreads(3) { _ in
            var last: UInt64 = 0
            while !stop.load(ordering: .relaxed) {
                // Both keys read in one view: a snapshot's, and two newest reads around it.
                let before = (try? engine.withValue(forKey: left) { $0.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self).bigEndian } }) ?? nil
                let snapshot = engine.snapshot()
                let l = try? snapshot.get(left)
                let r = try? snapshot.get(right)
                let after = (try? engine.withValue(forKey: right) { $0.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self).bigEndian } }) ?? nil
                if l != r { torn.add(1, ordering: .relaxed) }
                guard let before, let after else {
                    torn.add(1, ordering: .relaxed)
                    continue
                }
                if before < last || after < before { backwards.add(1, ordering: .relaxed) }
                last = after
                reads.add(1, ordering: .relaxed)
            }
        }
        // At least 3,000 commits, and on until the readers have read 1,000 rounds.
        var round: UInt64 = 0
        while round < 3_000 || (reads.load(ordering: .relaxed) < 1_000 && round < 300_000) {
            round += 1
            try engine.commit(pair(round))
            if round % 500 == 0 { try engine.checkpoint() }
        }
        stop.store(true, ordering: .relaxed)
        readers.wait()
        print("readsBesideCommitsAndCheckpointsSeeWholeCommits: \(reads.load(ordering: .relaxed)) rounds of reads")
        #expect(torn.load(ordering: .relaxed) == 0)
        #expect(backwards.load(ordering: .relaxed) == 0)
        #expect(reads.load(ordering: .relaxed) >= 1_000)
        #expect(engine.snapshots.oldestPins() == (nil, nil))
        #expect(try engine.withValue(forKey: left) { $0.byteCount } == 8)
    }

    /// Once the store is closed, the read throws `EngineError.closed` whether the key's
    /// newest change is still in the memtable (closed without a checkpoint) or in the tree.
    @Test func aClosedStoreRefusesTheReadWhereverTheKeyLies() throws {
        for checkpoint in [false, true] {
            let engine = try StorageEngine.inMemory()
            try engine.commit(WALBatch([.put(key: key(1), value: [1])]))
            #expect(try engine.withValue(forKey: key(1)) { $0.byteCount } == 1)
            try engine.close(checkpoint: checkpoint)
            #expect("closed with checkpoint \(checkpoint)", performing: { try engine.withValue(forKey: key(1)) { $0.byteCount } },
                    throws: { error in
                        if case EngineError.closed = error { return true }
                        return false
                    })
        }
    }
}
