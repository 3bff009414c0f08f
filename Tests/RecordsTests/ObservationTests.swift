import Strata
import StrataTesting
import Foundation
import Observation
import TestBackends
import Testing

/// A list model of the kind a SwiftUI view shows, kept current by `store.observe`.
@MainActor @Observable final class GadgetList {
    var gadgets: [Gadget] = []
    var updates = 0

    func follow(_ store: Store, color: String) async throws {
        for try await gadgets in store.observe({ context in
            try context.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.color == color }, sortBy: [SortDescriptor(\Gadget.id)])
        }) {
            MainActor.assertIsolated()
            self.gadgets = gadgets
            updates += 1
        }
    }
}

@Suite struct ObservationTests {
    private static func insert(_ store: Store, _ id: Int, color: String = "red") async throws {
        try await store.write { try $0.repository(Gadget.self).insert(Gadget(id: id, serial: "s\(id)", color: color, weight: id)) }
    }

    /// The current value first, then a value after each commit that changed it, in commit
    /// order; a commit that leaves the value equal yields nothing.
    @Test(arguments: Backend.allCases) func yieldsTheCurrentValueThenEachChangedOne(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try await Self.insert(store, 1)
        var iterator = store.observe { context in
            try context.repository(Gadget.self).fetch(#Predicate<Gadget> { $0.color == "red" }).map(\.id)
        }.makeAsyncIterator()
        #expect(try await iterator.next() == [1])
        try await Self.insert(store, 2, color: "blue") // not red: the value does not change
        try await Self.insert(store, 3)
        #expect(try await iterator.next() == [1, 3])
        try await store.write { try $0.repository(Gadget.self).delete(1) }
        #expect(try await iterator.next() == [3])
    }

    /// A consumer that falls behind gets the latest value, not one per commit.
    @Test(arguments: Backend.allCases) func aSlowConsumerGetsTheLatestValue(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let observation = store.observe { context in try context.repository(Gadget.self).count() }
        var iterator = observation.makeAsyncIterator()
        #expect(try await iterator.next() == 0)
        for id in 0..<100 { try await Self.insert(store, id) }
        // Whatever was computed meanwhile, the values seen end at 100 within a few steps.
        var seen: [Int] = []
        while seen.last != 100 { seen.append(try #require(try await iterator.next())) }
        #expect(seen.count <= 3, "\(seen)")
    }

    /// Cancelling the consuming task ends the observation and unregisters it; closing the
    /// store ends every observation.
    @Test(arguments: Backend.allCases) func cancellingOrClosingEndsIt(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let consumer = Task {
            var values = 0
            for try await _ in store.observe({ context in try context.repository(Gadget.self).count() }) { values += 1 }
            return values
        }
        try await Task.sleep(for: .milliseconds(50))
        consumer.cancel()
        _ = try await consumer.value
        try await Self.insert(store, 1)
        try await Task.sleep(for: .milliseconds(50))
        #expect(store.observationCount == 0)

        var iterator = store.observe { context in try context.repository(Gadget.self).count() }.makeAsyncIterator()
        #expect(try await iterator.next() == 1)
        try store.close()
        #expect(try await iterator.next() == nil)
    }

    /// A query that throws ends the sequence with its error.
    @Test(arguments: Backend.allCases) func aQueryThatThrowsEndsTheSequenceWithItsError(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        var iterator = store.observe { _ -> Int in throw RecordError.invalidQuery("test") }.makeAsyncIterator()
        await #expect(throws: RecordError.invalidQuery("test")) { _ = try await iterator.next() }
    }

    /// A main-actor @Observable model follows the store; its updates run on the main actor.
    @Test(arguments: Backend.allCases) @MainActor func aMainActorModelStaysCurrent(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let list = GadgetList()
        let following = Task { @MainActor in try await list.follow(store, color: "red") }
        try await Self.insert(store, 1)
        try await Self.insert(store, 2, color: "blue")
        try await Self.insert(store, 3)
        while list.gadgets.map(\.id) != [1, 3] { try await Task.sleep(for: .milliseconds(5)) }
        following.cancel()
        #expect(list.updates >= 1)
    }
}
