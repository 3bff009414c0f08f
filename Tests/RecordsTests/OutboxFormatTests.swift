import Foundation
import Strata
import Testing

/// FORMAT.md, "Events": the outbox's keys and values, byte for byte.
@Suite struct OutboxFormatTests {
    struct Sent: DomainEvent {
        var n: Int
    }

    static func name(_ text: String) -> [UInt8] { [UInt8(text.utf8.count)] + Array(text.utf8) }
    static func be(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }

    @Test func eventsConsumersAndTheMarkerAreStoredAsFormatSays() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { try $0.context.registerEventConsumer("mail", of: "Sent") }  // version 1
        try await store.write { unit in  // version 2
            try unit.publish(Sent(n: 5))
            try unit.publish(Sent(n: -1))
        }
        let pairs = try await store.read { try $0.scan(prefix: [0xFE]) }
        let event = [0xFE, 0x65] + Self.name("Sent")
        let consumer = [0xFE, 0x63] + Self.name("Sent") + Self.name("mail")
        let marker = [0xFE, 0x6B] + Self.name("Sent")
        // The keys in key order: consumer ('c'), events ('e'), the marker ('k').
        #expect(pairs.map(\.key) == [consumer, event + Self.be(2) + Self.be(0), event + Self.be(2) + Self.be(1), marker])
        // The consumer: the record encoding of {version: 0, sequence: 0} (no limit, no gap).
        #expect(pairs[0].value == [0x01, 0x09, 0x02, 0x07] + Array("version".utf8) + [0x04, 0x00]
                + [0x08] + Array("sequence".utf8) + [0x04, 0x00])
        // The events: the record encoding of each, in publish order (zigzag 5 = 10, -1 = 1).
        #expect(pairs[1].value == [0x01, 0x09, 0x01, 0x01, UInt8(ascii: "n"), 0x03, 0x0A])
        #expect(pairs[2].value == [0x01, 0x09, 0x01, 0x01, UInt8(ascii: "n"), 0x03, 0x01])
        #expect(pairs[3].value == [])
    }

    /// An acknowledgement deletes at most 256 events; the next one deletes the rest.
    @Test func anAcknowledgementDeletesAtMost256Events() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { try $0.context.registerEventConsumer("mail", of: "Sent") }
        try await store.write { unit in for n in 0..<300 { try unit.publish(Sent(n: n)) } }
        try await store.write { try $0.publish(Sent(n: 300)) }
        let all = try await store.read { try $0.events(of: Sent.self, consumer: "mail", limit: .max) }
        #expect(all.count == 301)
        try await all[299].acknowledge()
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [301 - 256])
        try await all[300].acknowledge()
        #expect(try await store.read { try $0.eventTypes() }.isEmpty)
        await #expect(throws: RecordError.invalidQuery("limit -1 must not be negative")) {
            try await store.read { try $0.events(of: Sent.self, consumer: "mail", limit: -1) }
        }
    }
}
