// The built-in workloads: W1 (the crash-every-op workload of ~200 commits with
// checkpoints), a random key/value workload with nested units, a bank whose total must
// never change (sequential, and concurrent), and an outbox whose events match its orders.
import Foundation
import StrataLocks

/// W1: 200 commits of one to three puts or deletes over 40 keys, values of 0 to 700
/// bytes, a checkpoint every 20 commits.
public struct W1Workload: CrashWorkload {
    public var name: String { "w1" }
    public let stepCount: Int

    public init(commits: Int = 200) { stepCount = commits }

    public func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        let count = Int(random.next() % 3) + 1
        var operations: [(key: [UInt8], value: [UInt8]?)] = []
        for _ in 0..<count {
            let key = Array("key-\(random.next() % 40)".utf8)
            let value = random.next() % 4 == 0
                ? nil : [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: Int(random.next() % 700))
            operations.append((key, value))
        }
        try store.write { unit in
            for (key, value) in operations {
                if let value { try unit.put(key, value) } else { try unit.delete(key) }
            }
        }
    }
}

/// Random puts and deletes over 64 keys, each unit with a nested unit that is rolled back
/// one time in three.
public struct KeyValueWorkload: CrashWorkload {
    public var name: String { "kv" }
    public let stepCount: Int

    public init(units: Int = 150) { stepCount = units }

    public func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        let keys = (0..<(1 + random.next() % 4)).map { _ in Array("kv/\(random.next() % 64)".utf8) }
        let values = keys.map { _ in (0..<Int(random.next() % 200)).map { _ in UInt8(truncatingIfNeeded: random.next()) } }
        let nestedKey = Array("kv/\(random.next() % 64)".utf8)
        let rollBack = random.next() % 3 == 0
        try store.write { unit in
            for (key, value) in zip(keys, values) {
                if value.count % 5 == 0 { try unit.delete(key) } else { try unit.put(key, value) }
            }
            try? unit.child { nested in
                try nested.put(nestedKey, Array("nested \(index)".utf8))
                if rollBack { throw WorkloadViolation("rolled back on purpose") }
            }
        }
    }
}

/// A bank: `accounts` accounts open with 100 each; every step is a transfer (a unit of
/// work whose credit is a nested unit). The invariant: the total never changes.
public struct BankWorkload: CrashWorkload {
    public var name: String { "bank" }
    public let stepCount: Int
    public let accounts: Int
    public static let openingBalance = 100

    public init(transfers: Int = 150, accounts: Int = 8) {
        stepCount = transfers
        self.accounts = accounts
    }

    static func key(_ account: Int) -> [UInt8] { Array("bank/\(account)".utf8) }

    public func setUp(_ store: Store) throws {
        try store.write { unit in
            for account in 0..<accounts { try unit.put(Self.key(account), Array("\(Self.openingBalance)".utf8)) }
        }
    }

    public func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        try run(step: index, on: store, random: &random, retries: 0)
    }

    /// A transfer, rerun up to `retries` times when another commit wrote its accounts first.
    func run(step index: Int, on store: Store, random: inout SplitMix64, retries: Int) throws {
        let from = Int(random.next() % UInt64(accounts))
        let to = (from + 1 + Int(random.next() % UInt64(accounts - 1))) % accounts
        let amount = Int(random.next() % 40) + 1
        try store.write(retries: retries) { unit in
            let balance = try Self.balance(of: from, in: unit.context)
            try unit.put(Self.key(from), Array("\(balance - amount)".utf8))
            try unit.child { nested in
                let credit = try Self.balance(of: to, in: nested.context)
                try nested.put(Self.key(to), Array("\(credit + amount)".utf8))
            }
        }
    }

    public func checkInvariant(_ store: Store) throws {
        let context = store.makeContext()
        guard try context.contains(Self.key(0)) else {
            // The bank never opened: then no account may exist.
            let present = try context.scan(prefix: Array("bank/".utf8))
            guard present.isEmpty else { throw WorkloadViolation("\(present.count) accounts exist without the bank") }
            return
        }
        let total = try (0..<accounts).reduce(0) { $0 + (try Self.balance(of: $1, in: context)) }
        guard total == accounts * Self.openingBalance else {
            throw WorkloadViolation("the accounts hold \(total) in total, not \(accounts * Self.openingBalance)")
        }
    }

    static func balance(of account: Int, in context: Context) throws -> Int {
        guard let bytes = try context.get(key(account)), let balance = Int(String(decoding: bytes, as: UTF8.self)) else {
            throw WorkloadViolation("account \(account) is missing or unreadable")
        }
        return balance
    }
}

/// The bank with concurrency: each step runs one transfer on each of `threads`
/// threads at once (units of work that retry on conflict), while a reader thread checks
/// the total in a snapshot. Commit order depends on the scheduler, so the harness checks
/// durability, integrity and the total, not a particular prefix.
public struct ConcurrentBankWorkload: CrashWorkload {
    public var name: String { "bank-concurrent" }
    public let stepCount: Int
    public let threads: Int
    private let bank: BankWorkload
    public var isDeterministic: Bool { false }

    public init(rounds: Int = 40, threads: Int = 8, accounts: Int = 100) {
        stepCount = rounds
        self.threads = threads
        bank = BankWorkload(transfers: rounds * threads, accounts: accounts)
    }

    public func setUp(_ store: Store) throws { try bank.setUp(store) }

    public func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        let seeds = (0..<threads).map { _ in random.next() }
        let failure = Locked<(any Error)?>(nil)
        let group = DispatchGroup()
        for thread in 0...threads {
            group.enter()
            Thread.detachNewThread { [bank] in
                defer { group.leave() }
                do {
                    if thread == threads {
                        // The reader: every snapshot must show the opening total.
                        try bank.checkInvariant(store)
                    } else {
                        var generator = SplitMix64(seed: seeds[thread])
                        try bank.run(step: index, on: store, random: &generator, retries: 10_000)
                    }
                } catch {
                    failure.withLock { $0 = $0 ?? error }
                }
            }
        }
        group.wait()
        if let error = failure.withLock({ $0 }) { throw error }
    }

    public func checkInvariant(_ store: Store) throws { try bank.checkInvariant(store) }
}

/// The built-in workloads by name.
public func builtInWorkload(named name: String, steps: Int? = nil) -> (any CrashWorkload)? {
    switch name {
    case "w1": steps.map { W1Workload(commits: $0) } ?? W1Workload()
    case "kv": steps.map { KeyValueWorkload(units: $0) } ?? KeyValueWorkload()
    case "bank": steps.map { BankWorkload(transfers: $0) } ?? BankWorkload()
    case "bank-concurrent": steps.map { ConcurrentBankWorkload(rounds: $0) } ?? ConcurrentBankWorkload()
    case "outbox": steps.map { OutboxWorkload(orders: $0) } ?? OutboxWorkload()
    default: nil
    }
}

/// The transactional outbox: every step places an order (a key) and publishes its event in
/// the same unit, one time in three with a nested unit that publishes a ghost event and is
/// rolled back; every third step a consumer handles up to two events, writing what it
/// handled and acknowledging in one unit. The invariant: the orders are exactly the events
/// handled plus the events still kept, in order, none twice, and no ghost exists.
public struct OutboxWorkload: CrashWorkload {
    public var name: String { "outbox" }
    public let stepCount: Int
    static let consumer = "shipper"

    /// An order's event (`number` -1: a ghost, never committed).
    public struct OrderPlaced: DomainEvent {
        public var number: Int
    }

    /// Publishes each event in a unit of its own after the order's (the bug the outbox
    /// exists to prevent): the harness's test that the invariant catches a lost event.
    var publishesAfterTheUnit = false

    public init(orders: Int = 120) { stepCount = orders }

    static func orderKey(_ number: Int) -> [UInt8] { Array("order/\(number)".utf8) }
    static func shippedKey(_ number: Int) -> [UInt8] { Array("shipped/\(number)".utf8) }

    public func setUp(_ store: Store) throws {
        try store.write { try $0.context.registerEventConsumer(Self.consumer, of: OrderPlaced.eventName) }
    }

    public func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        let ghost = random.next() % 3 == 0
        try store.write { unit in
            try unit.put(Self.orderKey(index), Array("placed".utf8))
            if publishesAfterTheUnit {
                unit.afterCommit { _ in _ = try? store.write { try $0.publish(OrderPlaced(number: index)) } }
            } else {
                try unit.publish(OrderPlaced(number: index))
            }
            guard ghost else { return }
            try? unit.child { nested in
                try nested.publish(OrderPlaced(number: -1))
                throw WorkloadViolation("rolled back on purpose")
            }
        }
        guard index % 3 == 2 else { return }
        try store.write { unit in
            for delivery in try unit.context.events(of: OrderPlaced.self, consumer: Self.consumer, limit: 2) {
                try unit.put(Self.shippedKey(delivery.event.number), Array("shipped".utf8))
                try unit.acknowledge(delivery)
            }
        }
    }

    public func checkInvariant(_ store: Store) throws {
        let context = store.makeContext()
        defer { context.discard() }
        let orders = try context.scan(prefix: Array("order/".utf8)).map { Int(String(decoding: $0.key.dropFirst(6), as: UTF8.self)) ?? -2 }
        let shipped = try context.scan(prefix: Array("shipped/".utf8)).map { Int(String(decoding: $0.key.dropFirst(8), as: UTF8.self)) ?? -2 }
        guard try !context.eventConsumers(of: OrderPlaced.eventName).isEmpty else {
            // Set-up never committed: nothing else may exist.
            guard orders.isEmpty, shipped.isEmpty else { throw WorkloadViolation("orders exist without the consumer") }
            return
        }
        let kept = try context.events(of: OrderPlaced.self, consumer: Self.consumer, limit: .max).map(\.event.number)
        if kept.contains(-1) { throw WorkloadViolation("a rolled-back unit's event was committed") }
        guard kept == kept.sorted() else { throw WorkloadViolation("events are out of commit order: \(kept)") }
        let handled = Set(shipped)
        if let twice = kept.first(where: handled.contains) {
            throw WorkloadViolation("order \(twice) was shipped and its event is still to be delivered")
        }
        guard Set(orders) == handled.union(kept), orders.count == shipped.count + kept.count else {
            throw WorkloadViolation("orders \(orders.sorted()) are not the shipped \(shipped.sorted()) plus the pending \(kept)")
        }
        if let last = shipped.max(), let first = kept.first, first < last {
            throw WorkloadViolation("event \(first) is pending after event \(last) was shipped")
        }
    }
}
