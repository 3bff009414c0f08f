import Strata
import StrataTesting
import Foundation
import Synchronization
import TestBackends
import Testing

struct Gadget: Record, Equatable {
    var id: Int
    var serial: String
    var color: String
    var weight: Int

    static var indexes: [RecordIndex<Gadget>] { [.index(\Gadget.serial, unique: true), .index(\Gadget.color), .index(\Gadget.weight)] }
}

struct Owner: Record, Equatable {
    var id: Int
    var handle: String
    var city: String?

    static var indexes: [RecordIndex<Owner>] { [.index(\Owner.handle, unique: true), .index(\Owner.city)] }
}

/// RecordIndex.X1 under merges, refreshes and concurrency: a record's index entries are exactly those
/// its current value implies, whatever settled a conflict, and reading stages nothing.
@Suite struct IndexIntegrityTests {
    /// 200 concurrent units of work on a fresh store each insert one record of an indexed
    /// type: none fails (before: 27 to 43 failed with a conflict on the entity's internal
    /// manifest key), and the indexes hold every record.
    @Test(arguments: Backend.allCases) func concurrentFirstWritersOfAnIndexedTypeNeverConflict(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let failures = Mutex(0)
            DispatchQueue.concurrentPerform(iterations: 200) { index in
                do {
                    try store.write { try $0.repository(Gadget.self).insert(Gadget(id: index, serial: "s\(index)", color: "red", weight: index)) }
                } catch {
                    failures.withLock { $0 += 1 }
                }
            }
            #expect(failures.withLock { $0 } == 0)
            let repository = store.makeContext().repository(Gadget.self)
            #expect(try repository.checkIndexes() == [])
            #expect(try repository.fetch(#Predicate<Gadget> { $0.color == "red" }).count == 200)
        }
    }

    /// A unit that only reads commits nothing, even the first use of an indexed type.
    @Test(arguments: Backend.allCases) func aUnitThatOnlyReadsCommitsNothing(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let version = store.version
            let found = try store.write { try $0.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.color == "red" }) }
            #expect(found.isEmpty && store.version == version)
            try store.write { try $0.repository(Owner.self).insert(Owner(id: 1, handle: "a", city: nil)) }
            let after = store.version
            _ = try store.write { try $0.repository(Gadget.self).all() }
            #expect(store.version == after)
        }
    }

    /// A child that changed an indexed field wins over a parent that changed it too: the
    /// parent's entry goes (before: it stayed, so the value counted as taken and a fetch
    /// by it returned the record).
    @Test(arguments: Backend.allCases, [MergePolicy.childWins, .parentWins])
    func aSettledMergeLeavesOnlyTheWinnersEntries(backend: Backend, policy: MergePolicy) async throws {
        try await backend.withStore { store throws in
            try store.write { try $0.repository(Gadget.self).insert(Gadget(id: 1, serial: "base", color: "grey", weight: 1)) }
            let parent = store.makeContext()
            let child = try parent.makeChild(mergePolicy: policy)
            try parent.repository(Gadget.self).update(Gadget(id: 1, serial: "parent", color: "blue", weight: 2))
            try child.repository(Gadget.self).update(Gadget(id: 1, serial: "child", color: "green", weight: 3))
            try child.commit()
            let (winner, loser) = policy == .childWins ? ("child", "parent") : ("parent", "child")
            #expect(try parent.repository(Gadget.self).checkIndexes() == [])
            #expect(try parent.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.serial == winner }).map(\.id) == [1])
            #expect(try parent.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.serial == loser }).isEmpty)
            // The loser's unique value is free again.
            try parent.repository(Gadget.self).insert(Gadget(id: 2, serial: loser, color: "red", weight: 4))
            try parent.commit()
            #expect(try store.makeContext().repository(Gadget.self).checkIndexes() == [])
            #expect(try store.checkIndexEntries() == [])
        }
    }

    /// Two records that claim one unique value on the two sides of a merge: the merge that
    /// would keep both is refused as a unique violation, and changes nothing.
    @Test(arguments: Backend.allCases) func aMergeThatWouldBreakAUniqueIndexIsRefused(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let parent = store.makeContext(mergePolicy: .childWins)
            let child = try parent.makeChild()
            try parent.repository(Owner.self).insert(Owner(id: 1, handle: "same", city: "Oslo"))
            try child.repository(Owner.self).insert(Owner(id: 2, handle: "same", city: "Rome"))
            #expect(throws: RecordError.uniqueViolation(entity: "Owner", index: "handle", value: "same")) { try child.commit() }
            #expect(try parent.repository(Owner.self).all().map(\.id) == [1])
            #expect(try parent.repository(Owner.self).checkIndexes() == [])
        }
    }

    /// `refresh()` settles a record another commit changed: whichever side wins, the
    /// other side's entries go.
    @Test(arguments: Backend.allCases, [MergePolicy.childWins, .parentWins])
    func aSettledRefreshLeavesOnlyTheWinnersEntries(backend: Backend, policy: MergePolicy) async throws {
        try await backend.withStore { store throws in
            try store.write { try $0.repository(Gadget.self).insert(Gadget(id: 1, serial: "base", color: "grey", weight: 1)) }
            let mine = store.makeContext(mergePolicy: policy)
            try mine.repository(Gadget.self).update(Gadget(id: 1, serial: "mine", color: "green", weight: 3))
            try store.write { try $0.repository(Gadget.self).update(Gadget(id: 1, serial: "theirs", color: "blue", weight: 2)) }
            try mine.refresh()
            let (winner, loser) = policy == .childWins ? ("mine", "theirs") : ("theirs", "mine")
            #expect(try mine.repository(Gadget.self).checkIndexes() == [])
            #expect(try mine.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.serial == winner }).map(\.id) == [1])
            #expect(try mine.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.serial == loser }).isEmpty)
            try mine.commit()
            #expect(try store.makeContext().repository(Gadget.self).checkIndexes() == [])
        }
    }

    /// Without a sort, a fetch through an index returns id order, as a scan does (before:
    /// index order).
    @Test(arguments: Backend.allCases) func aFetchWithoutASortIsInIDOrderThroughAnIndexToo(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try store.write { unit in
                for id in 0..<20 { try unit.repository(Gadget.self).insert(Gadget(id: id, serial: "s\(id)", color: "c", weight: 100 - id)) }
            }
            let repository = store.makeContext().repository(Gadget.self)
            #expect(try repository.explain(#Predicate<Gadget> { $0.weight > 85 }).contains("index weight"))
            #expect(try repository.fetch(#Predicate<Gadget> { $0.weight > 85 }).map(\.id) == Array(0..<15))
            #expect(try repository.fetch(#Predicate<Gadget> { $0.weight > 85 }, limit: 3, offset: 2).map(\.id) == [2, 3, 4])
            #expect(try repository.first(#Predicate<Gadget> { $0.weight > 85 })?.id == 0)
        }
    }

    /// Random nested contexts over two indexed types with random merge policies: after
    /// every step, every open context's view and the store's pass the index checks.
    @Test(arguments: Backend.allCases, [UInt64(1), 2, 3])
    func randomContextTreesKeepEveryIndexExact(backend: Backend, seed: UInt64) async throws {
        print("IndexIntegrityTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        try await backend.withStore { store throws in
            let policies: [MergePolicy] = [.error, .childWins, .parentWins]
            var open: [Context] = []
            var counts: [String: Int] = [:]
            func pick<T>(_ items: [T]) -> T { items[Int(random.next() % UInt64(items.count))] }
            for step in 0..<700 {
                open.removeAll { $0.status != .open }
                let leaves = open.filter { $0.openChildCount == 0 }
                let action = open.isEmpty ? 0 : Int(random.next() % 10)
                var done = "newRoot"
                switch action {
                case 0:
                    if open.filter({ $0.parent == nil }).count < 3 {
                        open.append(store.makeContext(mergePolicy: pick(policies)))
                    } else {
                        done = "idle"
                    }
                case 1...4:
                    // Any open context: a parent that writes after a child forked makes the
                    // child's merge settle conflicts.
                    let context = pick(open)
                    let id = Int(random.next() % 6)
                    do {
                        if random.next() % 2 == 0 {
                            let gadget = Gadget(id: id, serial: "s\(random.next() % 10)", color: pick(["red", "blue", "grey"]),
                                                weight: Int(random.next() % 5))
                            if random.next() % 5 == 0 { try context.repository(Gadget.self).delete(id) } else {
                                try context.repository(Gadget.self).upsert(gadget)
                            }
                        } else {
                            let owner = Owner(id: id, handle: "h\(random.next() % 10)", city: random.next() % 3 == 0 ? nil : pick(["Oslo", "Rome"]))
                            if random.next() % 5 == 0 { try context.repository(Owner.self).delete(id) } else {
                                try context.repository(Owner.self).upsert(owner)
                            }
                        }
                        done = "write"
                    } catch is RecordError {
                        done = "refusedWrite"
                    }
                case 5:
                    open.append(try pick(leaves).makeChild(mergePolicy: pick(policies)))
                    done = "child"
                case 6, 7:
                    let context = pick(leaves)
                    do {
                        try context.commit()
                        done = context.parent == nil ? "rootCommit" : "merge"
                    } catch {
                        // A conflict or a refused merge: the context is dropped.
                        context.discard()
                        done = "refusedCommit"
                    }
                case 8:
                    pick(leaves).discard()
                    done = "discard"
                default:
                    if let root = leaves.first(where: { $0.parent == nil }) {
                        do { try root.refresh(); done = "refresh" } catch { done = "refusedRefresh" }
                    }
                }
                counts[done, default: 0] += 1
                for context in open where context.status == .open {
                    let problems = try context.repository(Gadget.self).checkIndexes() + context.repository(Owner.self).checkIndexes()
                    #expect(problems.isEmpty, "seed \(seed) step \(step) after \(done): \(problems)")
                    if !problems.isEmpty { return }
                }
                let committed = store.makeContext()
                #expect(try committed.repository(Gadget.self).checkIndexes() + committed.repository(Owner.self).checkIndexes() == [])
                #expect(try store.checkIndexEntries() == [])
            }
            print("seed \(seed): \(counts.sorted { $0.key < $1.key })")
        }
    }
}
