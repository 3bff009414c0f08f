// The outbox's cost: `publish` runs N durable units of work that each insert one record and
// publish one event (`unit.publish`), `publish-baseline` the same units without the event;
// naming `publish` runs both, baseline first, so their ratio comes from one run. Strata
// only (the peers have no outbox). The events are then read back through a consumer,
// after the clock, and checked. Expectation: the event adds one key of ~20 bytes to a
// commit that waits on an fdatasync, so publish ≥ 0.9 × publish-baseline.
import Foundation
import Strata

struct OrderPlaced: DomainEvent {
    var order: Int
    var customer: String
}

struct OutboxWorkloads {
    let workload: String
    let options: StrataBench

    func run() throws -> Result {
        let count = options.num ?? 2_000
        let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Store.open(path: directory, options: Workload.strataOptions())
        defer { try? store.close() }
        let publishes = workload == "publish"
        let start = ContinuousClock.now
        for number in 0..<count {
            try store.write { unit in
                try unit.repository(Person.self).insert(Person(number))
                if publishes { try unit.publish(OrderPlaced(order: number, customer: Person(number).email)) }
            }
        }
        let elapsed = ContinuousClock.now - start
        // Checked after the clock: every unit's record, and each event once, in order.
        let (records, events) = try store.read { context in
            (try context.repository(Person.self).count(),
             publishes ? try context.eventTypes().first?.count ?? 0 : 0)
        }
        guard records == count, events == (publishes ? count : 0) else {
            throw BenchError(description: "strata kept \(records) records and \(events) events of \(count)")
        }
        if publishes {
            try store.write { try $0.context.registerEventConsumer("check", of: OrderPlaced.eventName) }
            let delivered = try store.read { try $0.events(of: OrderPlaced.self, consumer: "check", limit: .max) }
            guard delivered.map(\.event.order) == Array(0..<count) else {
                throw BenchError(description: "strata delivered the events out of order")
            }
        }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Result(engine: "strata", bench: workload, num: count, batch: 1, valueSize: 0, seconds: seconds,
                      bytesOnDisk: 0, fdatasyncs: nil)
    }
}
