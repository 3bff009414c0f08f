import Foundation
import Strata
import Testing

// README.md's outbox example, run as written: the text between the markers in
// `runExample` is the README's Swift block under "Domain events you can rely on" (a test
// compares the two). The test binds `store` (an in-memory store with three children),
// `Child` and `notifyParents` (which records what it was handed) around it.

/// A child to feed, as the example's use case reads it.
struct Child: Record {
    var id: Int
    var name: String
    var hunger: Int
    static var indexes: [RecordIndex<Child>] { [.index(\Child.hunger)] }
}

@Suite struct ReadmeOutboxExampleTests {
    @Test func theExampleHereIsTheReadmesAsWritten() throws {
        let readme = try ReadmeExampleTests.readmeBlock(after: "## Domain events you can rely on")
        let here = try ReadmeExampleTests.exampleHere("outbox example")
        #expect(readme.count > 10, "README.md's outbox example: \(readme.count) lines")
        #expect(readme == here, "README.md's outbox example and the one this test runs differ")
    }

    @Test func theExampleFeedsTheHungriestChildAndTheConsumerHearsOfIt() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in
            let children = unit.repository(Child.self)
            try children.insert(Child(id: 1, name: "Ann", hunger: 3))
            try children.insert(Child(id: 2, name: "Bo", hunger: 9))
            try children.insert(Child(id: 3, name: "Cy", hunger: 5))
        }
        let notified = ReadmePrinted()
        let consumer = Task { try await Self.runExample(store, notified) }
        // The consumer acknowledges after notifying: wait for both, then stop it.
        for _ in 0..<500 where try await store.read({ try $0.eventConsumers() }).first?.pending != 0 {
            try await Task.sleep(for: .milliseconds(20))
        }
        consumer.cancel()
        try await consumer.value
        #expect(notified.all == ["child 2, 120 g"])
        #expect(try await store.read { try $0.repository(Child.self).get(2)?.hunger } == 0)
        // Acknowledged: the event is no longer kept, and the consumer is past it.
        #expect(try await store.read { try $0.eventTypes() }.isEmpty)
        #expect(try await store.read { try $0.eventConsumers() }.map(\.pending) == [0])
    }

    static func runExample(_ store: Store, _ notified: ReadmePrinted) async throws {
        func notifyParents(_ event: some Sendable) async throws {
            let values = Mirror(reflecting: event).children.map { "\($0.value)" }
            notified.append("child \(values[0]), \(values[1]) g")
        }
        // README.md's outbox example begins
        struct ChildWasFed: DomainEvent { var child: Int; var grams: Int }

        // The use case: feed the hungriest child and say so, in one unit of work.
        try await store.write { unit in
            let children = unit.repository(Child.self)
            guard var hungriest = try children.first(sortBy: [SortDescriptor(\Child.hunger, order: .reverse)]) else { return }
            hungriest.hunger = 0
            try children.update(hungriest)
            try unit.publish(ChildWasFed(child: hungriest.id, grams: 120))
        }

        // Elsewhere: every event in commit order, after a restart from the last acknowledged.
        for try await delivery in store.events(of: ChildWasFed.self, consumer: "parents-app") {
            try await notifyParents(delivery.event)
            try await delivery.acknowledge()
        }
        // README.md's outbox example ends
    }
}
