import Strata
import StrataTesting
import Foundation
import TestBackends
import Testing

struct Chore: Record, Equatable {
    var id: Int
    var title: String
    var done = false
}

/// The kind, id and version of each change, for comparisons.
private struct Seen: Equatable, CustomStringConvertible {
    var kind: RecordChange<Chore>.Kind
    var id: Int
    var version: UInt64

    var description: String { "\(kind) \(id)@\(version)" }
}

/// `store.changes(of:since:)` (RecordChanges.T1, RecordChanges.T2): record-level changes, told apart by what the store
/// held before each commit, in commit order, from the log's history or live.
@Suite struct RecordChangeFeedTests {
    @Test(arguments: Backend.allCases) func insertsUpdatesAndDeletesAreToldApart(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        let feed = try store.changes(of: Chore.self)
        try await store.write { unit in
            let chores = unit.repository(Chore.self)
            try chores.insert(Chore(id: 1, title: "dishes"))
            try chores.insert(Chore(id: 2, title: "laundry"))
        }
        try await store.write { try $0.repository(Chore.self).update(Chore(id: 1, title: "dishes", done: true)) }
        try await store.write { unit in
            let chores = unit.repository(Chore.self)
            try chores.upsert(Chore(id: 2, title: "laundry, folded"))
            try chores.upsert(Chore(id: 3, title: "plants"))
        }
        try await store.write { try $0.repository(Chore.self).delete(2) }
        let changes = try await firstElements(6, of: feed)
        #expect(changes.map { Seen(kind: $0.kind, id: $0.id, version: $0.version) } == [
            Seen(kind: .inserted, id: 1, version: start + 1), Seen(kind: .inserted, id: 2, version: start + 1),
            Seen(kind: .updated, id: 1, version: start + 2),
            Seen(kind: .updated, id: 2, version: start + 3), Seen(kind: .inserted, id: 3, version: start + 3),
            Seen(kind: .deleted, id: 2, version: start + 4),
        ])
        #expect(changes.map(\.isLastOfCommit) == [false, true, true, false, true, true])
        #expect(try changes[2].record() == Chore(id: 1, title: "dishes", done: true))
        #expect(try changes[5].record() == nil)
    }

    /// Only the entity asked for: other entities, index entries and raw keys are left out,
    /// and commits that did not touch the entity yield nothing.
    @Test(arguments: Backend.allCases) func otherEntitiesAndKeysAreLeftOut(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        try await store.write { unit in
            try unit.put(Array("raw".utf8), [1])
            try unit.repository(Gadget.self).insert(Gadget(id: 1, serial: "g", color: "red", weight: 1))
        }
        try await store.write { unit in
            try unit.repository(Chore.self).insert(Chore(id: 7, title: "walk"))
            try unit.repository(Gadget.self).update(Gadget(id: 1, serial: "g", color: "blue", weight: 1))
        }
        let changes = try await firstElements(1, of: try store.changes(of: Chore.self, since: start))
        #expect(changes.map(\.description) == ["inserted Chore 7 at version \(start + 2)"])
        let gadgets = try await firstElements(2, of: try store.changes(of: Gadget.self, since: start))
        #expect(gadgets.map(\.kind) == [.inserted, .updated])
    }

    /// A record inserted and deleted in one unit of work never existed for the store: its
    /// key is left out of the batch, so it is neither logged nor reported (RecordChanges.T2).
    @Test(arguments: Backend.allCases) func aRecordInsertedAndDeletedInOneUnitIsNotReported(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        let feed = try store.changes(of: Chore.self)
        try await store.write { unit in
            try unit.repository(Chore.self).insert(Chore(id: 1, title: "never"))
            try unit.repository(Chore.self).delete(1)
        }
        #expect(store.version == start, "a unit whose changes cancel out commits nothing")
        // With indexes the unit still writes index tombstones, but no record change.
        try await store.write { unit in
            try unit.repository(Chore.self).insert(Chore(id: 2, title: "kept"))
            let child = try unit.context.makeChild()
            try child.repository(Gadget.self).insert(Gadget(id: 9, serial: "brief", color: "red", weight: 1))
            try child.repository(Gadget.self).delete(9)
            try child.commit()
        }
        let changes = try await firstElements(1, of: feed)
        #expect(changes.map { Seen(kind: $0.kind, id: $0.id, version: $0.version) } == [Seen(kind: .inserted, id: 2, version: start + 1)])
        #expect(try await store.read { try $0.repository(Gadget.self).all() }.isEmpty)
    }

    /// What a child merged into its parent and the parent changed again is one change, of
    /// the kind the store saw: an insert stays an insert, an update of a record the store
    /// held stays an update.
    @Test(arguments: Backend.allCases) func nestedChangesReachTheFeedAsOneChangePerRecord(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { try $0.repository(Chore.self).insert(Chore(id: 1, title: "old")) }
        let start = store.version
        let feed = try store.changes(of: Chore.self)
        let parent = store.makeContext()
        let child = try parent.makeChild()
        try child.repository(Chore.self).insert(Chore(id: 2, title: "new"))
        try child.repository(Chore.self).delete(1)
        try await child.commit()
        try parent.repository(Chore.self).update(Chore(id: 2, title: "newer"))
        try parent.repository(Chore.self).insert(Chore(id: 1, title: "again"))
        try await parent.commit()
        let changes = try await firstElements(2, of: feed)
        #expect(changes.map { Seen(kind: $0.kind, id: $0.id, version: $0.version) } == [
            Seen(kind: .updated, id: 1, version: start + 1), Seen(kind: .inserted, id: 2, version: start + 1),
        ])
        #expect(try changes[1].record()?.title == "newer")
    }

    /// The kinds are in the log, so a feed resumed after the process ended reads them as
    /// they were.
    @Test func kindsSurviveARestart() async throws {
        let fileSystem = SimulatedFileSystem()
        let store = try Store.open(path: "/db", fileSystem: fileSystem)
        let start = store.version
        try await store.write { try $0.repository(Chore.self).insert(Chore(id: 1, title: "a")) }
        try await store.write { try $0.repository(Chore.self).update(Chore(id: 1, title: "b")) }
        try await store.write { try $0.repository(Chore.self).delete(1) }
        // The process ends without a close (a close would checkpoint and release the log).
        let ended = fileSystem.clone()
        ended.crash(.keepAll)
        let reopened = try Store.open(path: "/db", fileSystem: ended)
        defer { try? reopened.close() }
        let changes = try await firstElements(3, of: try reopened.changes(of: Chore.self, since: start))
        #expect(changes.map { Seen(kind: $0.kind, id: $0.id, version: $0.version) } == [
            Seen(kind: .inserted, id: 1, version: start + 1), Seen(kind: .updated, id: 1, version: start + 2),
            Seen(kind: .deleted, id: 1, version: start + 3),
        ])
    }

    /// Two units that both saw a record absent cannot both report inserting it: the
    /// second's commit conflicts (first committer wins), so "inserted" stays true.
    @Test(arguments: Backend.allCases) func aRacingInsertConflictsInsteadOfReportingTwoInserts(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let first = store.makeContext()
            let second = store.makeContext()
            try first.repository(Chore.self).upsert(Chore(id: 1, title: "first"))
            try second.repository(Chore.self).upsert(Chore(id: 1, title: "second"))
            try first.commit()
            #expect(throws: ContextError.self) { try second.commit() }
        }
    }

    /// A write carries what its read of the record's key found, so that the commit does not
    /// look the key up again (Context.C6); a refresh that keeps the write under
    /// `.childWins` forgets it for keys another commit wrote since, and the commit tells
    /// the kind from the new snapshot: another unit inserted the record meanwhile, so this
    /// commit updates it. On the embedded backend, whose log takes the kinds from the
    /// batch, keeping the old answer would report both as inserts; over etcd the kinds come
    /// from etcd's own versions, and the test checks the same feed.
    @Test(arguments: Backend.allCases) func aWriteKeptByARefreshIsToldApartByTheNewSnapshot(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        let chores = try store.changes(of: Chore.self)
        let gadgets = try store.changes(of: Gadget.self)
        let editor = store.makeContext(mergePolicy: .childWins)
        try editor.repository(Chore.self).insert(Chore(id: 5, title: "mine"))
        try editor.repository(Gadget.self).insert(Gadget(id: 6, serial: "s6", color: "red", weight: 1))
        try editor.repository(Chore.self).insert(Chore(id: 7, title: "only mine"))
        try await store.write { unit in
            try unit.repository(Chore.self).insert(Chore(id: 5, title: "theirs"))
            try unit.repository(Gadget.self).insert(Gadget(id: 6, serial: "s6", color: "blue", weight: 2))
        }
        try editor.refresh()
        try await editor.commit()
        let seenChores = try await firstElements(3, of: chores)
        #expect(seenChores.map { Seen(kind: $0.kind, id: $0.id, version: $0.version) } == [
            Seen(kind: .inserted, id: 5, version: start + 1),
            Seen(kind: .updated, id: 5, version: start + 2), Seen(kind: .inserted, id: 7, version: start + 2),
        ])
        #expect(try seenChores[1].record() == Chore(id: 5, title: "mine"))
        let seenGadgets = try await firstElements(2, of: gadgets)
        #expect(seenGadgets.map(\.kind) == [.inserted, .updated])
        #expect(try store.makeContext().repository(Gadget.self).fetch(#Predicate { $0.color == "red" }).map(\.id) == [6])
        #expect(try store.makeContext().repository(Gadget.self).fetch(#Predicate { $0.color == "blue" }).isEmpty)
    }
}

/// RecordChanges.T2 under concurrency: random roots and nested contexts over an indexed and a plain type,
/// committed, merged, refreshed and discarded in random order. Every change the feed
/// reports agrees with the store's states before and after its version (inserted: absent
/// then present; updated: present both times; deleted: present then absent), and every
/// record whose value a commit changed is reported in it.
@Suite struct RecordChangeFeedModelTests {
    @Test(arguments: Backend.allCases, [UInt64(1), 2, 3])
    func everyReportedKindMatchesTheStatesAroundItsVersion(backend: Backend, seed: UInt64) async throws {
        print("RecordChangeFeedModelTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        func chores() throws -> [Int: Chore] {
            Dictionary(uniqueKeysWithValues: try store.read { try $0.repository(Chore.self).all() }.map { ($0.id, $0) })
        }
        var states: [UInt64: [Int: Chore]] = [start: try chores()]
        var open: [Context] = []
        func pick<T>(_ items: [T]) -> T { items[Int(random.next() % UInt64(items.count))] }
        for _ in 0..<2_000 {
            open.removeAll { $0.status != .open }
            let leaves = open.filter { $0.openChildCount == 0 }
            switch open.isEmpty ? 0 : Int(random.next() % 10) {
            case 0:
                if open.filter({ $0.parent == nil }).count < 3 { open.append(store.makeContext(mergePolicy: pick([.error, .childWins, .parentWins]))) }
            case 1...4:
                let context = pick(open)
                let id = Int(random.next() % 5)
                do {
                    let chores = context.repository(Chore.self)
                    switch random.next() % 6 {
                    case 0: try chores.insert(Chore(id: id, title: "t\(random.next() % 4)"))
                    case 1: try chores.update(Chore(id: id, title: "t\(random.next() % 4)"))
                    case 2: try chores.delete(id)
                    case 3: try context.repository(Gadget.self).upsert(Gadget(id: id, serial: "s\(random.next() % 9)", color: "red", weight: 1))
                    default: try chores.upsert(Chore(id: id, title: "t\(random.next() % 4)", done: random.next() % 2 == 0))
                    }
                } catch is RecordError {}
            case 5:
                open.append(try pick(leaves).makeChild(mergePolicy: pick([.error, .childWins, .parentWins])))
            case 6, 7:
                let context = pick(leaves)
                do {
                    let receipt = try await context.commit()
                    if context.parent == nil && receipt.version > (states.keys.max() ?? start) {
                        #expect(receipt.version == states.keys.max()! + 1)
                        states[receipt.version] = try chores()
                    }
                } catch {
                    context.discard()
                }
            case 8:
                pick(leaves).discard()
            default:
                if let root = leaves.first(where: { $0.parent == nil }) { try? root.refresh() }
            }
        }
        let last = store.version
        try await store.write { try $0.repository(Chore.self).insert(Chore(id: 1_000, title: "end")) }
        var byVersion: [UInt64: [RecordChange<Chore>]] = [:]
        for try await change in try store.changes(of: Chore.self, since: start) {
            if change.id == 1_000 { break }
            byVersion[change.version, default: []].append(change)
        }
        var reported = 0
        for version in (start + 1)...max(start + 1, last) where version <= last {
            let before = try #require(states[version - 1]), after = try #require(states[version])
            let changes = byVersion[version] ?? []
            reported += changes.count
            #expect(changes.map(\.id) == changes.map(\.id).sorted() && Set(changes.map(\.id)).count == changes.count)
            for change in changes {
                let held = (before[change.id] != nil, after[change.id] != nil)
                switch change.kind {
                case .inserted: #expect(held == (false, true), "seed \(seed): \(change)")
                case .updated: #expect(held == (true, true), "seed \(seed): \(change)")
                case .deleted: #expect(held == (true, false), "seed \(seed): \(change)")
                }
                #expect(try change.record() == after[change.id], "seed \(seed): \(change)")
            }
            let differing = Set(before.keys).union(after.keys).filter { before[$0] != after[$0] }
            #expect(differing.isSubset(of: Set(changes.map(\.id))), "seed \(seed) version \(version): \(differing) not all in \(changes)")
        }
        print("seed \(seed): \(last - start) commits, \(reported) record changes")
    }
}
