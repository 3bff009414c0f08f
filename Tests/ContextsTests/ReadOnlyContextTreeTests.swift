import Strata
import Testing
@testable import StrataContexts
@testable import StrataEngine

/// A read-only context (`Store.read`) moves to a snapshot of its own version once a
/// checkpoint folded the memtable its snapshot reads (`Context.snapshotForReads`): its
/// reads then come from the tree alone, and say exactly what they said before. A commit
/// after its snapshot keeps it where it is.
@Suite struct ReadOnlyContextTreeTests {
    private static func store() throws -> Store {
        var options = EngineOptions()
        options.idleCheckpointDelay = nil   // the test checkpoints when it means to
        return try Store.inMemory(options: options)
    }

    private static func seeded(_ store: Store, _ range: Range<Int>) throws {
        try seed(store, Dictionary(uniqueKeysWithValues: range.map { (String(format: "k%04d", $0), "v\($0)") }))
    }

    /// `body` in a read context of a store whose memtable holds 300 pairs.
    private static func reading(_ body: (Store, Context) throws -> Void) throws {
        let store = try store()
        defer { try? store.close() }
        try seeded(store, 0..<300)
        try store.read { context in try body(store, context) }
    }

    @Test func aReadOnlyContextReadsTheCheckpointedTreeAtItsVersion() throws {
        try Self.reading { store, context in
            let first = context.snapshot
            #expect(first.state.treeVersion < first.version, "the pairs must be in the memtable")
            let pairs = try context.scan()
            #expect(pairs.count == 300)
            try store.checkpoint()
            #expect(try context.countKeys() == 300)
            let moved = context.snapshot
            #expect(moved !== first && moved.version == first.version && moved.state.treeVersion == first.version)
            #expect(moved.state.active.isEmpty && moved.state.frozen == nil)
            #expect(try context.scan().map { $0.key } == pairs.map { $0.key })
            #expect(try context.scan().map { $0.value } == pairs.map { $0.value })
        }
    }

    @Test func aCommitAfterItsSnapshotKeepsItWhereItIs() throws {
        try Self.reading { store, context in
            let first = context.snapshot
            try Self.seeded(store, 300..<310)
            try store.checkpoint()
            #expect(try context.countKeys() == 300)
            #expect(context.snapshot === first)
        }
    }

    /// A context that may write keeps the snapshot its conflicts are checked against.
    @Test func aWritableContextKeepsItsSnapshot() throws {
        let store = try Self.store()
        defer { try? store.close() }
        try Self.seeded(store, 0..<300)
        let context = store.makeContext()
        let first = context.snapshot
        try store.checkpoint()
        #expect(try context.countKeys() == 300)
        #expect(context.snapshot === first)
        context.discard()
    }
}
