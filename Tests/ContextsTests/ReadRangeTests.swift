import Strata
import StrataContexts
import StrataTesting
import TestBackends
import Testing

/// What a layer above contexts was asked to settle (ReadRangeTests use it to see that a
/// merge or refresh hands read conflicts over).
final class SettlementLog: ContextSettling, @unchecked Sendable {
    // Only the test's own task touches it: merges run on the caller's thread.
    var calls: [(conflicts: [[UInt8]], readConflicts: [[UInt8]], policy: MergePolicy)] = []

    func settle(_ context: Context, conflicts: [[UInt8]], readConflicts: [[UInt8]], policy: MergePolicy,
                sides: [([UInt8]) throws -> [UInt8]?]) throws {
        calls.append((conflicts, readConflicts, policy))
    }
}

/// Read ranges (Context.C4): a key another commit writes inside a range a context
/// read is a conflict at its root commit, though the context did not write it; at a merge
/// or refresh it is handed to the layers above.
@Suite struct ReadRangeTests {
    @Test(arguments: Backend.allCases) func aWriteInsideAReadRangeConflictsAtTheRootCommit(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try seed(store, ["list/1": "a", "other": "x"])
            // A write inside the range after the read: a conflict naming the key.
            let reader = store.makeContext()
            try reader.addReadRange(KeyRange(prefix: bytes("list/")))
            try reader.put(bytes("summary"), bytes("1 item"))
            try seed(store, ["list/2": "b"])
            #expect(throws: ContextError.conflict(keys: [bytes("list/2")], readVersion: reader.version)) { try reader.commit() }
            reader.discard()
            // A write outside it, or one before the read: no conflict.
            let calm = store.makeContext()
            try calm.addReadRange(KeyRange(prefix: bytes("list/")))
            try calm.addReadRange(key: bytes("other"))
            try calm.put(bytes("summary"), bytes("2 items"))
            try seed(store, ["unrelated": "y", "list0": "z"])
            try calm.commit()
            // A point range sees a change of its one key.
            let point = store.makeContext()
            try point.addReadRange(key: bytes("other"))
            try point.put(bytes("summary"), bytes("3"))
            try seed(store, ["other": "changed"])
            #expect(throws: ContextError.self) { try point.commit() }
            point.discard()
        }
    }

    /// Deletes inside a range conflict too, also once a checkpoint folded them into the
    /// tree (tombstones keep their version while a snapshot needs them).
    @Test func aDeleteInsideAReadRangeConflictsAfterACheckpoint() throws {
        let (store, _) = try simulatedStore()
        try seed(store, ["list/1": "a", "list/2": "b"])
        let reader = store.makeContext()
        try reader.addReadRange(KeyRange(prefix: bytes("list/")))
        try reader.put(bytes("summary"), bytes("2 items"))
        try store.write { unit in try unit.delete(bytes("list/1")) }
        try store.engine.checkpoint()
        #expect(throws: ContextError.conflict(keys: [bytes("list/1")], readVersion: reader.version)) { try reader.commit() }
    }

    /// A child's read range meets the parent's writes since the fork at the merge: the
    /// layers get them, under the child's policy; the parent takes the range over, so a
    /// later write by another commit inside it conflicts at the root.
    @Test(arguments: Backend.allCases) func aMergeHandsReadConflictsToTheLayersAndTheRangeToTheParent(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let log = store.layers.attached(SettlementLog.self) { SettlementLog() }
            let root = store.makeContext()
            let child = try root.makeChild(mergePolicy: .childWins)
            try child.addReadRange(KeyRange(prefix: bytes("list/")))
            try child.put(bytes("summary"), bytes("none"))
            try root.put(bytes("list/1"), bytes("a"))
            try root.put(bytes("elsewhere"), bytes("b"))
            try child.commit()
            #expect(log.calls.count == 1)
            #expect(log.calls.first?.readConflicts == [bytes("list/1")] && log.calls.first?.conflicts == [])
            #expect(log.calls.first?.policy == .childWins)
            // A merge that meets no write in its ranges calls no layer.
            let quiet = try root.makeChild()
            try quiet.addReadRange(key: bytes("nothing"))
            try quiet.put(bytes("q"), bytes("1"))
            try quiet.commit()
            #expect(log.calls.count == 1)
            try seed(store, ["list/9": "z"])
            #expect(throws: ContextError.self) { try root.commit() }
            root.discard()
        }
    }

    /// refresh() finds keys written in its ranges since its snapshot, hands them to the
    /// layers, and keeps the ranges for the commit.
    @Test(arguments: Backend.allCases) func refreshHandsReadConflictsToTheLayers(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let log = store.layers.attached(SettlementLog.self) { SettlementLog() }
            let root = store.makeContext(mergePolicy: .parentWins)
            try root.addReadRange(KeyRange(prefix: bytes("list/")))
            try root.put(bytes("summary"), bytes("none"))
            try seed(store, ["list/3": "c", "x": "y"])
            try root.refresh()
            #expect(log.calls.map(\.readConflicts) == [[bytes("list/3")]])
            // Read at the new version: the write is no longer after it.
            try root.commit()
        }
    }
}
