import Foundation
import Strata
import StrataEtcd
import StrataTesting
import TestBackends
import Testing

struct ParcelShipped: DomainEvent, Equatable {
    var parcel: Int
}

/// The outbox over etcd: events published by one server (a store of its own on the same
/// prefix) are delivered to a consumer on another, in one order for both, with concurrent
/// publishers on both servers (the event counter, `EtcdBackend.eventStampKey`).
@Suite struct EtcdOutboxTests {
    @Test func eventsPublishedOnTwoServersAreDeliveredOnEitherInOneOrder() async throws {
        let prefix = "outbox-\(UUID().uuidString)/"
        let first = try await EtcdServer.makeStore(prefix: prefix)
        defer { try? first.close() }
        let second = try await EtcdServer.makeStore(prefix: prefix)
        defer { try? second.close() }
        // Both servers publish at once; neither unit retries on its own (retries: 0).
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (store, parcels) in [(first, 1...15), (second, 101...115)] {
                group.addTask {
                    for parcel in parcels {
                        try await store.write { unit in
                            try unit.put(Array("parcel/\(parcel)".utf8), Array("shipped".utf8))
                            try unit.publish(ParcelShipped(parcel: parcel))
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        var onSecond: [EventDelivery<ParcelShipped>] = []
        for try await delivery in second.events(of: ParcelShipped.self, consumer: "mailer") {
            onSecond.append(delivery)
            if onSecond.count == 30 { break }
        }
        let parcels = onSecond.map(\.event.parcel)
        #expect(Set(parcels) == Set(Array(1...15) + Array(101...115)))
        // Each server's own publishes keep their order, and positions are unique and ascending.
        #expect(parcels.filter { $0 < 100 } == Array(1...15) && parcels.filter { $0 > 100 } == Array(101...115))
        #expect(zip(onSecond, onSecond.dropFirst()).allSatisfy { $0.position < $1.position })
        // The first server's replica delivers the same events in the same order.
        var onFirst: [EventDelivery<ParcelShipped>] = []
        for try await delivery in first.events(of: ParcelShipped.self, consumer: "archive") {
            onFirst.append(delivery)
            if onFirst.count == 30 { break }
        }
        #expect(onFirst.map(\.position) == onSecond.map(\.position))
        // An acknowledgement on one server is the consumer's position on the other.
        try await onSecond[9].acknowledge()
        func mailerOnFirst() async throws -> EventConsumerStatus? {
            try await first.read { try $0.eventConsumers(of: ParcelShipped.eventName) }.first { $0.consumer == "mailer" }
        }
        for _ in 0..<100 where try await mailerOnFirst()?.acknowledged != onSecond[9].position {
            try await Task.sleep(for: .milliseconds(20))
        }
        let mailer = try await mailerOnFirst()
        #expect(mailer?.acknowledged == onSecond[9].position && mailer?.pending == 20)
    }
}
