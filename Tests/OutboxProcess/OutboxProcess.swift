// The process of the outbox kill test (Tests/RecordsTests/OutboxKillTests.swift): a
// producer and a consumer of one embedded store, killed with SIGKILL at random moments.
//
//   OutboxProcess <store-directory> <log> run     produce and consume until killed (60 s at most)
//   OutboxProcess <store-directory> <log> drain   consume what is kept, then exit 0
//
// It logs `opened` once the store is open, and a drain logs `C n`: orders 0 to n − 1
// committed.
//
// The producer places order n in a unit of work that also publishes `OrderPlaced(n)`, and
// logs `T n` before the commit and `P n` once it returned. The consumer iterates the
// store's deliveries for consumer "mailer", logs `D n` when one arrives and `A n` once its
// acknowledgement returned. Every line is one write(2), so a kill loses none written.
import Foundation
import Strata

struct OrderPlaced: DomainEvent {
    var number: Int
}

final class Log: Sendable {
    let handle: FileHandle

    init(path: String) {
        guard let handle = FileHandle(forWritingAtPath: path) else { fail("cannot open \(path)") }
        handle.seekToEndOfFile()
        self.handle = handle
    }

    func write(_ line: String) { handle.write(Data((line + "\n").utf8)) }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("OutboxProcess: \(message)\n".utf8))
    exit(2)
}

@main enum OutboxProcess {
    static func main() async {
        let arguments = CommandLine.arguments
        guard arguments.count == 4, ["run", "drain"].contains(arguments[3]) else {
            fail("usage: OutboxProcess <store-directory> <log> run|drain")
        }
        let log = Log(path: arguments[2])
        do {
            let store = try Store.open(path: arguments[1])
            log.write("opened")
            if arguments[3] == "drain" {
                try await drain(store, log: log)
                let next = try await store.read { try $0.get(Array("next-order".utf8)) }
                log.write("C \(next.map { String(decoding: $0, as: UTF8.self) } ?? "0")")
                try store.close()
                log.write("drained")
                exit(0)
            }
            let producer = Task { try await produce(store, log: log) }
            let consumer = Task { try await consume(store, log: log) }
            try await Task.sleep(for: .seconds(60))
            producer.cancel()
            consumer.cancel()
            fail("was not killed within 60 s")
        } catch {
            fail("\(error)")
        }
    }

    static func produce(_ store: Store, log: Log) async throws {
        let counter = Array("next-order".utf8)
        while !Task.isCancelled {
            let number = try await store.write { unit in
                let number = Int(String(decoding: try unit.get(counter) ?? Array("0".utf8), as: UTF8.self)) ?? 0
                log.write("T \(number)")
                try unit.put(counter, Array("\(number + 1)".utf8))
                try unit.put(Array("order/\(number)".utf8), Array("placed".utf8))
                try unit.publish(OrderPlaced(number: number))
                return number
            }
            log.write("P \(number)")
        }
    }

    static func consume(_ store: Store, log: Log) async throws {
        for try await delivery in store.events(of: OrderPlaced.self, consumer: "mailer") {
            log.write("D \(delivery.event.number)")
            try await delivery.acknowledge()
            log.write("A \(delivery.event.number)")
        }
    }

    /// Consumes until nothing is kept for the consumer.
    static func drain(_ store: Store, log: Log) async throws {
        while true {
            let batch = try await store.read { context in
                try context.events(of: OrderPlaced.self, consumer: "mailer", limit: 64)
            }
            guard !batch.isEmpty else { return }
            for delivery in batch {
                log.write("D \(delivery.event.number)")
                try await delivery.acknowledge()
                log.write("A \(delivery.event.number)")
            }
        }
    }
}
