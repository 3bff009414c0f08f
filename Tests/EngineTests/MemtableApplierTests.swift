// A batch is linked into the memtable while its frame is still being synced
// (MemtableApplier.swift): these tests hold a commit inside a slow fdatasync and check what
// readers and a checkpoint see meanwhile.
import Foundation
import StrataFileIO
import Synchronization
import Testing
import StrataWAL
@testable import StrataEngine

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite struct MemtableApplierTests {
    /// How long each fdatasync of the simulated disk takes: the window in which a commit is
    /// linked but not yet durable.
    static let syncLatency = Duration.seconds(2)

    /// Commits `batch` on a thread of its own; `wait()` returns its result.
    final class BackgroundCommit: Sendable {
        private let result = Mutex<Result<CommitResult, any Error>?>(nil)
        private let done = DispatchSemaphore(value: 0)

        init(_ batch: WALBatch, on engine: StorageEngine) {
            Thread.detachNewThread { [self] in
                let outcome = Result { try engine.commit(batch) }
                result.withLock { $0 = outcome }
                done.signal()
            }
        }

        func wait() throws -> CommitResult {
            done.wait()
            return try result.withLock { $0! }.get()
        }
    }

    /// Waits (at most 30 s) until the applier has linked `version`.
    static func waitUntilLinked(_ version: UInt64, in engine: StorageEngine) {
        let deadline = ContinuousClock.now + .seconds(30)
        while engine.applier.appliedVersion < version && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.001)
        }
    }

    /// A batch small enough to be linked on its committing thread and one handed to the
    /// applier's thread (MemtableApplier MemtableApplier.A3) alike.
    @Test(arguments: [2, MemtableApplier.inlineOperationLimit + 1, 500])
    func aBatchLinkedBeforeItsSyncIsUnseenUntilPublished(operationCount: Int) throws {
        let fileSystem = SimulatedFileSystem()
        let engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
        try engine.commit(WALBatch([.put(key: bytes("a"), value: bytes("1"))]))
        fileSystem.setSyncLatency(Self.syncLatency)
        let others = (1..<operationCount).map { bytes("b\($0)") }
        let batch = WALBatch([.put(key: bytes("a"), value: bytes("2"))] + others.map { .put(key: $0, value: bytes("2")) })
        let commit = BackgroundCommit(batch, on: engine)
        Self.waitUntilLinked(2, in: engine)
        #expect(engine.applier.appliedVersion == 2)
        // Linked, not durable: a snapshot taken now is at version 1 and sees none of it.
        let snapshot = engine.snapshot()
        #expect(snapshot.version == 1)
        #expect(try snapshot.get(bytes("a")) == bytes("1"))
        #expect(try snapshot.get(others[0]) == nil)
        #expect(try snapshot.scan().map(\.key) == [bytes("a")])
        #expect(try commit.wait().version == 2)
        #expect(try engine.snapshot().get(others[others.count - 1]) == bytes("2"))
        #expect(try engine.snapshot().scan().count == operationCount)
        #expect(try snapshot.get(bytes("a")) == bytes("1"))
        fileSystem.setSyncLatency(.zero)
        try engine.close()
    }

    /// Small batches linked on their committing threads and large ones linked by the
    /// applier's thread, interleaved from four threads, all writing one key: the key ends
    /// with the value of the highest version, as if every batch had been linked in order.
    /// Two threads linking into one memtable at once corrupt it and can spin forever: the
    /// time limit turns that into a failure.
    @Test(.timeLimit(.minutes(2))) func smallAndLargeBatchesAreLinkedInVersionOrder() throws {
        let engine = try StorageEngine.open(path: "/db", fileSystem: SimulatedFileSystem()).engine
        let results = Mutex<[(version: UInt64, value: [UInt8])]>([])
        TestThreads(4) { thread in
            for round in 0..<200 {
                let value = bytes("\(thread)-\(round)")
                let padding = round % 2 == 0 ? 0 : MemtableApplier.inlineOperationLimit * 3
                let batch = WALBatch([.put(key: bytes("k"), value: value)]
                    + (0..<padding).map { .put(key: bytes("p\(thread)-\($0)"), value: value) })
                guard let version = try? engine.commit(batch).version else { return }
                results.withLock { $0.append((version, value)) }
            }
        }.wait()
        let all = results.withLock { $0 }
        #expect(all.count == 800)
        let last = try #require(all.max { $0.version < $1.version })
        #expect(try engine.snapshot().get(bytes("k")) == last.value)
        try engine.close()
    }

    /// A checkpoint that freezes the memtable while a linked batch waits for its fdatasync
    /// folds that batch into the tree once it is durable, instead of leaving it behind in
    /// the frozen memtable it drops.
    @Test func aCheckpointDuringAnUnsyncedCommitFoldsItOnceDurable() throws {
        let fileSystem = SimulatedFileSystem()
        let engine = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
        try engine.commit(WALBatch([.put(key: bytes("a"), value: bytes("1"))]))
        fileSystem.setSyncLatency(Self.syncLatency)
        let commit = BackgroundCommit(WALBatch([.put(key: bytes("b"), value: bytes("2")), .delete(key: bytes("a"))]), on: engine)
        Self.waitUntilLinked(2, in: engine)
        #expect(engine.version == 1)
        try engine.checkpoint()
        // The checkpoint covers version 2, and the memtables are empty: "b" is in the tree.
        #expect(engine.checkpointLock.withLock { $0.meta.checkpointVersion } == 2)
        #expect(engine.version == 2)
        #expect(try engine.status().memtableKeys == 0)
        #expect(try engine.snapshot().scan().map(\.key) == [bytes("b")])
        #expect(try commit.wait().version == 2)
        fileSystem.setSyncLatency(.zero)
        try engine.close()
        let reopened = try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine
        #expect(try reopened.snapshot().scan().map { [$0.key, $0.value] } == [[bytes("b"), bytes("2")]])
        try reopened.close()
    }

    /// The checkpoint encodes a new value straight from its memtable node: the same bytes as
    /// the entry a leaf decodes to (multi-byte varints, an empty value, a tombstone and an
    /// overflow reference among them), and the page decodes back to those entries.
    @Test func aLeafEncodedFromMemtableNodesMatchesOneEncodedFromEntries() throws {
        let memtable = Memtable()
        let changes: [(key: [UInt8], entry: MemtableEntry)] = [
            (bytes("a"), MemtableEntry(version: 1, value: bytes("one"))),
            (bytes("b"), MemtableEntry(version: 300, value: [])),
            (bytes("c"), MemtableEntry(version: 70_000, value: nil)),
            ([UInt8](repeating: 0x6B, count: 200), MemtableEntry(version: 1 << 40, value: [UInt8](repeating: 7, count: 150))),
        ]
        memtable.linkReplayed(changes)
        var iterator = memtable.entries(from: nil, reverse: false)
        var cells: [CellToWrite] = []
        while let node = iterator.nextNode() { cells.append(.node(node)) }
        let overflow = LeafEntry(key: bytes("z"), version: 9, payload: .overflow(.chain(first: PageID(12), byteCount: 5_000)))
        cells.append(.entry(overflow))
        let entries = changes.map { change in
            LeafEntry(key: change.key, version: change.entry.version,
                      payload: change.entry.value.map { .inline($0) } ?? .tombstone)
        } + [overflow]
        #expect(cells.map(\.cellBytes) == entries.map(\.cellBytes))
        let fromNodes = withExtendedLifetime(memtable) {
            PageCodec.encodeLeaf(cells: cells[...], id: PageID(5), generation: 3, pageBytes: 4096)
        }
        let fromEntries = PageCodec.encodeLeaf(entries[...], id: PageID(5), generation: 3, pageBytes: 4096)
        #expect(fromNodes == fromEntries)
        #expect(try PageCodec.decodeLeaf(fromNodes, count: entries.count) == entries)
    }
}
