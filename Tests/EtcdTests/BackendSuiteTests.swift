// One suite, two backends: the contexts, units of work, records and change feed behave the
// same on the embedded engine and over etcd. Each test runs once per backend.
import Foundation
import Strata
import StrataEtcd
import StrataTesting
import TestBackends
import Testing

struct Account: Record, Equatable {
    var id: Int
    var owner: String
    var city: String
    var balance: Int

    static var indexes: [RecordIndex<Account>] { [.index(\Account.owner, unique: true), .index(\Account.city)] }
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite(.hangLimit) struct BackendSuiteTests {
    @Test(arguments: Backend.allCases)
    func aUnitOfWorkCommitsAsOneAndRollsBackOnThrow(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in
            try unit.put(bytes("a"), bytes("1"))
            try unit.put(bytes("b"), bytes("2"))
        }
        struct Abandon: Error {}
        await #expect(throws: Abandon.self) {
            try await store.write { unit in
                try unit.put(bytes("a"), bytes("changed"))
                try unit.delete(bytes("b"))
                throw Abandon()
            }
        }
        // A new context sees the commit at once (read-your-writes) and nothing of the rollback.
        let pairs = try await store.read { try $0.scan() }
        #expect(pairs.map(\.key) == [bytes("a"), bytes("b")])
        #expect(pairs.map(\.value) == [bytes("1"), bytes("2")])
        try await store.write { unit in try unit.delete(bytes("a")) }
        #expect(try await store.read { try $0.get(bytes("a")) } == nil)
        #expect(try await store.read { try $0.get(bytes("b")) } == bytes("2"))
    }

    @Test(arguments: Backend.allCases)
    func nestedUnitsMergeIntoTheirParentAndADiscardedChildLeavesNoTrace(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let context = store.makeContext()
        try context.put(bytes("kept"), bytes("1"))
        let child = try context.makeChild()
        try child.put(bytes("child"), bytes("2"))
        try await child.commit()
        let form = try context.makeChild()
        try form.put(bytes("cancelled"), bytes("3"))
        form.discard()
        #expect(try await store.read { try $0.get(bytes("kept")) } == nil, "nothing is visible before the root commits")
        try await context.commit()
        #expect(try await store.read { try $0.scan().map(\.key) } == [bytes("child"), bytes("kept")])
    }

    @Test(arguments: Backend.allCases)
    func theFirstCommitterWinsOnChangedDeletedAndCreatedKeys(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in
            try unit.put(bytes("changed"), bytes("0"))
            try unit.put(bytes("deleted"), bytes("0"))
        }
        for (key, change) in [("changed", "put"), ("deleted", "delete"), ("created", "put")] {
            let slow = store.makeContext()
            _ = try slow.get(bytes(key))
            try slow.put(bytes(key), bytes("slow"))
            try await store.write { unit in
                if change == "put" { try unit.put(bytes(key), bytes("fast")) } else { try unit.delete(bytes(key)) }
            }
            do {
                try await slow.commit()
                Issue.record("a commit over \(key) after another commit wrote it succeeded")
            } catch let ContextError.conflict(keys, _) {
                #expect(keys == [bytes(key)])
            }
            slow.discard()
        }
        #expect(try await store.read { try $0.get(bytes("changed")) } == bytes("fast"))
        #expect(try await store.read { try $0.get(bytes("deleted")) } == nil)
        #expect(try await store.read { try $0.get(bytes("created")) } == bytes("fast"))
        // A commit that wrote other keys meanwhile is no conflict.
        let context = store.makeContext()
        try context.put(bytes("other"), bytes("x"))
        try await store.write { unit in try unit.put(bytes("unrelated"), bytes("y")) }
        try await context.commit()
    }

    @Test(arguments: Backend.allCases)
    func retriesRunTheBodyAgainOnAFreshContextAfterAConflict(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in try unit.put(bytes("n"), bytes("0")) }
        let attempts = Counter()
        try await store.write(retries: 3) { unit in
            let value = Int(String(decoding: try unit.get(bytes("n"))!, as: UTF8.self))!
            if attempts.next() == 1 {
                // Another writer commits between this unit's read and its commit.
                try await store.write { other in try other.put(bytes("n"), bytes("10")) }
            }
            try unit.put(bytes("n"), bytes("\(value + 1)"))
        }
        #expect(attempts.value == 2)
        #expect(try await store.read { try $0.get(bytes("n")) } == bytes("11"))
    }

    @Test(arguments: Backend.allCases)
    func recordsAreQueriedThroughTheirIndexes(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let cities = ["Oslo", "Lima", "Rome"]
        try await store.write { unit in
            let accounts = unit.repository(Account.self)
            for id in 0..<30 { try accounts.insert(Account(id: id, owner: "owner\(id)", city: cities[id % 3], balance: 100)) }
        }
        try await store.write { unit in
            let accounts = unit.repository(Account.self)
            try accounts.update(Account(id: 4, owner: "owner4", city: "Oslo", balance: 5))
            try accounts.delete(7)
        }
        try await store.read { context in
            let accounts = context.repository(Account.self)
            #expect(try accounts.count() == 29)
            let lima = try accounts.fetch(#Predicate<Account> { $0.city == "Lima" }, sortBy: [SortDescriptor(\.id)])
            #expect(lima.map(\.id) == [1, 10, 13, 16, 19, 22, 25, 28])
            #expect(try accounts.explain(#Predicate<Account> { $0.city == "Lima" }).contains("index"))
            #expect(try accounts.first(#Predicate<Account> { $0.owner == "owner4" })?.balance == 5)
            #expect(try accounts.get(7) == nil)
        }
        // A unique index refuses a second owner of the same name on both backends.
        await #expect(throws: (any Error).self) {
            try await store.write { unit in
                try unit.repository(Account.self).insert(Account(id: 99, owner: "owner1", city: "Oslo", balance: 0))
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func theChangeFeedTellsInsertsUpdatesAndDeletesInCommitOrder(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let feed = try store.changes(of: Account.self)
        try await store.write { unit in try unit.repository(Account.self).insert(Account(id: 1, owner: "a", city: "Oslo", balance: 1)) }
        try await store.write { unit in try unit.repository(Account.self).update(Account(id: 1, owner: "a", city: "Oslo", balance: 2)) }
        try await store.write { unit in try unit.repository(Account.self).delete(1) }
        var kinds: [RecordChange<Account>.Kind] = []
        var versions: [UInt64] = []
        for try await change in feed {
            kinds.append(change.kind)
            versions.append(change.version)
            if kinds.count == 3 { break }
        }
        #expect(kinds == [.inserted, .updated, .deleted])
        #expect(versions == versions.sorted() && Set(versions).count == 3)
    }

    @Test(arguments: Backend.allCases)
    func concurrentTransfersKeepTheTotalInEverySnapshot(backend: Backend) async throws {
        let seed = UInt64.random(in: 0...UInt64.max)
        print("BackendSuiteTests.concurrentTransfers seed \(seed)")
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in
            for account in 0..<20 { try unit.put(bytes("acct/\(account)"), bytes("100")) }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    var random = SplitMix64(seed: seed &+ UInt64(writer))
                    for _ in 0..<15 {
                        let from = Int(random.next() % 20), to = (from + 1 + Int(random.next() % 19)) % 20
                        try await store.write(retries: 1_000) { unit in
                            let a = Int(String(decoding: try unit.get(bytes("acct/\(from)"))!, as: UTF8.self))!
                            let b = Int(String(decoding: try unit.get(bytes("acct/\(to)"))!, as: UTF8.self))!
                            try unit.put(bytes("acct/\(from)"), bytes("\(a - 1)"))
                            try unit.put(bytes("acct/\(to)"), bytes("\(b + 1)"))
                        }
                    }
                }
            }
            group.addTask {
                for _ in 0..<30 {
                    let total = try await store.read { context in
                        try context.scan(prefix: bytes("acct/")).reduce(0) { $0 + Int(String(decoding: $1.value, as: UTF8.self))! }
                    }
                    #expect(total == 2_000)
                    await Task.yield()
                }
            }
            try await group.waitForAll()
        }
        let total = try await store.read { context in
            try context.scan(prefix: bytes("acct/")).reduce(0) { $0 + Int(String(decoding: $1.value, as: UTF8.self))! }
        }
        #expect(total == 2_000)
    }
}

/// A counter a body can bump from a unit of work that may run more than once.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    func next() -> Int { lock.withLock { count += 1; return count } }
    var value: Int { lock.withLock { count } }
}
