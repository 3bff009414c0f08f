import Foundation
import StrataTesting
import Testing

/// `strata events`: the outbox's types, consumers and positions, and removing or moving a
/// consumer.
@Suite struct EventsCommandTests {
    struct InvoiceSent: DomainEvent {
        var number: Int
    }

    @Test func listsTypesAndConsumersAndMovesAndRemovesThem() async throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("store").path
        do {
            let store = try Store.open(path: path)
            defer { try? store.close() }
            try await store.write { unit in
                try unit.context.registerEventConsumer("mailer", of: "InvoiceSent")
                try unit.context.registerEventConsumer("ledger", of: "InvoiceSent")
            }
            for number in 1...3 { try await store.write { try $0.publish(InvoiceSent(number: number)) } }
            let first = try await store.read { try $0.events(of: InvoiceSent.self, consumer: "mailer", limit: 1) }
            try await first[0].acknowledge()
        }
        let listed = try runStrata(["events", path], in: directory)
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.lines == [
            "InvoiceSent: 3 event(s) kept (2.0 … 4.0)",
            "  consumer ledger: acknowledged 0.0, 3 pending",
            "  consumer mailer: acknowledged 2.0, 2 pending",
        ])
        let moved = try runStrata(["events", path, "--move", "ledger", "--event", "InvoiceSent", "--to", "3.0"], in: directory)
        #expect(moved.status == 0 && moved.lines == ["moved consumer ledger of InvoiceSent to 3.0"], "\(moved.stderr)")
        // Both consumers are past 2.0 now: the first event is gone.
        let removed = try runStrata(["events", path, "--remove", "mailer", "--event", "InvoiceSent"], in: directory)
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(try runStrata(["events", path], in: directory).lines == [
            "InvoiceSent: 1 event(s) kept (4.0 … 4.0)",
            "  consumer ledger: acknowledged 3.0, 1 pending",
        ])
        let unknown = try runStrata(["events", path, "--remove", "nobody", "--event", "InvoiceSent"], in: directory)
        #expect(unknown.status == 2 && unknown.stderr.contains("No consumer \"nobody\" of InvoiceSent events"))
        let usage = try runStrata(["events", path, "--move", "ledger", "--event", "InvoiceSent", "--to", "3"], in: directory)
        #expect(usage.status == 64 && usage.stderr.contains("--to VERSION.PLACE"))
    }
}
