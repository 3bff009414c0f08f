import Strata
import StrataTesting
import Foundation
import Synchronization
import TestBackends
import Testing

/// How many times each observed query ran.
final class RunCounts: Sendable {
    private let counts = Mutex<[Int: Int]>([:])
    func ran(_ observer: Int) { counts.withLock { $0[observer, default: 0] += 1 } }
    subscript(observer: Int) -> Int { counts.withLock { $0[observer, default: 0] } }
    var all: [Int: Int] { counts.withLock { $0 } }
}

// Thirty minutes, as the etcd suites' `hangLimit` (Tests/EtcdTests/HangLimit.swift): inside
// the whole suite an async test waits for cooperative threads that synchronous tests hold.

/// A query runs again only after a commit that wrote inside what it read (Observation.V4),
/// however many other observers and commits there are.
@Suite(.timeLimit(.minutes(30))) struct ObservationScopeTests {
    /// 100 observers of queries that commits never touch run once each through 1,000
    /// commits; a commit inside one observer's read set re-runs that one alone, once.
    @Test(arguments: Backend.allCases) func commitsRerunOnlyTheQueriesTheyTouched(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 0, serial: "s0", color: "seed", weight: 0)) }
        let runs = RunCounts()
        var firsts: [AsyncThrowingStream<[Int], any Error>.Iterator] = []
        for observer in 0..<100 {
            let color = "color \(observer)"
            var iterator = store.observe { context in
                runs.ran(observer)
                return try context.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.color == color }).map(\.id)
            }.makeAsyncIterator()
            #expect(try await iterator.next() == [])
            firsts.append(iterator)
        }
        #expect(runs.all.values.allSatisfy { $0 == 1 })
        let commits = backend == .embedded ? 1_000 : 200
        for id in 1...commits {
            try await store.write { unit in
                try unit.repository(Gadget.self).insert(Gadget(id: id, serial: "s\(id)", color: "other", weight: id))
            }
        }
        // One commit inside observer 42's read set: it runs again, once; no one else does.
        try await store.write { unit in
            try unit.repository(Gadget.self).insert(Gadget(id: 5_000, serial: "x", color: "color 42", weight: 1))
        }
        #expect(try await firsts[42].next() == [5_000])
        try await Task.sleep(for: .milliseconds(200))
        let counts = runs.all
        #expect(counts[42] == 2)
        #expect(counts.filter { $0.key != 42 }.values.allSatisfy { $0 == 1 }, "\(counts.filter { $0.value != 1 })")
    }

    /// A query that stops early (a limit read in index order) read only up to where it
    /// stopped: a commit past that point does not run it again, one before it does.
    @Test(arguments: Backend.allCases) func aLimitedQueryReadsOnlyWhatItNeeded(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in
            for id in 0..<20 { try unit.repository(Gadget.self).insert(Gadget(id: id, serial: "s\(id)", color: "c", weight: id * 10)) }
        }
        let runs = RunCounts()
        var lightest = store.observe { context in
            runs.ran(0)
            return try context.repository(Gadget.self).fetch(sortBy: [SortDescriptor(\Gadget.weight)], limit: 3).map(\.id)
        }.makeAsyncIterator()
        #expect(try await lightest.next() == [0, 1, 2])
        // Heavier than the third: outside what the query read.
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 50, serial: "h", color: "c", weight: 500)) }
        try await store.write { unit in try unit.repository(Gadget.self).update(Gadget(id: 19, serial: "s19", color: "d", weight: 190)) }
        try await Task.sleep(for: .milliseconds(200))
        #expect(runs[0] == 1)
        // Lighter than the third: inside it.
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 60, serial: "l", color: "c", weight: 5)) }
        #expect(try await lightest.next() == [0, 60, 1])
        #expect(runs[0] == 2)
    }

    /// A whole count of an indexed value reads that value's entries, counted without a walk
    /// (`Context.countKeys`): a commit of another value does not run it again; one that
    /// inserts or deletes a record of its value does, and it counts what is there.
    @Test(arguments: Backend.allCases) func aCountRunsAgainOnlyForItsOwnValue(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in
            for id in 0..<60 { try unit.repository(Gadget.self).insert(Gadget(id: id, serial: "s\(id)", color: id < 30 ? "red" : "blue", weight: id)) }
        }
        let runs = RunCounts()
        var reds = store.observe { context in
            runs.ran(0)
            return try context.repository(Gadget.self).count(#Predicate<Gadget> { $0.color == "red" })
        }.makeAsyncIterator()
        #expect(try await reds.next() == 30)
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 100, serial: "b", color: "blue", weight: 1)) }
        try await store.write { unit in try unit.repository(Gadget.self).delete(40) }
        try await Task.sleep(for: .milliseconds(200))
        #expect(runs[0] == 1)
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 101, serial: "r", color: "red", weight: 1)) }
        #expect(try await reds.next() == 31)
        try await store.write { unit in try unit.repository(Gadget.self).delete(0) }
        #expect(try await reds.next() == 30)
        #expect(runs[0] == 3)
    }

    /// observeImmediately computes the current value before it returns; the sequence then
    /// yields the values after it.
    @Test(arguments: Backend.allCases) func anImmediateObservationHasItsValueAtOnce(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 1, serial: "a", color: "red", weight: 1)) }
        let observation = try store.observeImmediately { context in try context.repository(Gadget.self).count() }
        #expect(observation.initialValue == 1)
        var iterator = observation.makeAsyncIterator()
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 2, serial: "b", color: "red", weight: 2)) }
        #expect(try await iterator.next() == 2)
        #expect(throws: RecordError.self) { try store.observeImmediately { _ -> Int in throw RecordError.invalidQuery("now") } }
    }

    /// A commit published while observeImmediately's first run reads is not missed: the
    /// sequence yields the value after it without another commit (here the query itself
    /// commits, on its first run only, after reading).
    @Test func aCommitDuringAnImmediateObservationsFirstRunIsYielded() async throws {
        let store = try await Backend.embedded.makeStore()
        defer { try? store.close() }
        try await store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 1, serial: "a", color: "red", weight: 1)) }
        let firstRun = Mutex(true)
        let observation = try store.observeImmediately { context in
            let count = try context.repository(Gadget.self).count()
            if firstRun.withLock({ first in defer { first = false }; return first }) {
                try store.write { unit in try unit.repository(Gadget.self).insert(Gadget(id: 2, serial: "b", color: "red", weight: 2)) }
            }
            return count
        }
        #expect(observation.initialValue == 1)
        let next = try await withThrowingTaskGroup(of: Int?.self) { group in
            group.addTask {
                var iterator = observation.makeAsyncIterator()
                return try await iterator.next()
            }
            group.addTask {
                try await Task.sleep(for: .seconds(20))
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
        #expect(next == 2, "the commit made during the first run was never yielded")
    }
}
