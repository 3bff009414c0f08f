// Durable consumers: `store.events(of:consumer:)` delivers a type's events in commit order,
// from the consumer's last acknowledged position, then live as commits publish more.
//
// Invariants:
//  EventDeliveries.D1. Deliveries come in commit order (Outbox.B1), each event once per
//      iteration; an event is read from a published version, so it never shows a commit a
//      crash could take away (in `.full` durability).
//  EventDeliveries.D2. A new iteration starts after the consumer's acknowledged position:
//      after a crash, kill or restart, what was delivered and not acknowledged comes again
//      (at least once), and nothing acknowledged does.
//  EventDeliveries.D3. A waiting iterator is woken only by a commit that puts an event of
//      its type (CommitWatch.W2), and stops waiting when the store closes or the task is
//      cancelled (the sequence then ends).
// Thread-safety: the sequence is `Sendable`; an iterator belongs to the task iterating.
import StrataContexts
import StrataEngine

/// One event handed to a consumer.
public struct EventDelivery<E: Codable & Sendable>: Sendable {
    /// The event as published.
    public let event: E
    /// Where it stands in commit order.
    public let position: EventPosition
    /// The consumer it was delivered to.
    public let consumer: String
    /// The event type's name.
    public let eventName: String
    let store: Store

    /// Moves the consumer past this event in a durable commit of its own (retried on a
    /// conflict with the consumer's other acknowledgements). Blocks for the fdatasync:
    /// from async code use `acknowledge() async`. To commit the consumer's own writes with
    /// the acknowledgement, acknowledge in its unit of work instead (`unit.acknowledge`).
    /// Acknowledging an event acknowledges every event before it; acknowledging one the
    /// consumer is past already changes nothing.
    public func acknowledge() throws {
        try store.write(retries: 8) { unit in try unit.context.acknowledgeIfBehind(self) }
    }

    /// `acknowledge()` for async code: suspends, never blocking, during the fdatasync.
    public func acknowledge(isolation: isolated (any Actor)? = #isolation) async throws {
        try await store.write(isolation: isolation, retries: 8) { (unit: UnitOfWork) throws in
            try unit.context.acknowledgeIfBehind(self)
        }
    }
}

extension Context {
    /// `acknowledge(_:)`, doing nothing when the consumer is past the event already: a
    /// standalone acknowledgement has no effects to keep from happening twice.
    func acknowledgeIfBehind<E>(_ delivery: EventDelivery<E>) throws {
        do { try acknowledge(delivery) } catch EventError.alreadyAcknowledged {}
    }
}

extension UnitOfWork {
    /// Moves `delivery`'s consumer past its event in this unit: the acknowledgement and
    /// the unit's other changes commit together or not at all (effectively once for what
    /// the consumer keeps in the store). See `Context.acknowledge(_:)`.
    public func acknowledge<E>(_ delivery: EventDelivery<E>) throws { try context.acknowledge(delivery) }
}

extension Store {
    /// The events of type `E` for consumer `consumer`, in commit order: every kept event
    /// after its last acknowledged position, then new ones as they are committed, until
    /// the store closes or the task is cancelled (EventDeliveries.D1–D3). The consumer is
    /// registered on the first iteration when it is not yet (from the oldest kept event);
    /// its position moves only when a delivery is acknowledged. Iterating throws
    /// `EventError.invalidConsumerName`, and `RecordError` for an event that does not
    /// decode as `E` (the sequence does not step over it).
    /// With `retention`, the consumer is registered with that limit (see
    /// `Context.registerEventConsumer(_:of:retention:)`): a consumer that falls further
    /// behind gets `EventError.fellBehind` naming the gap, instead of the events in it.
    public func events<E: Codable & Sendable>(of type: E.Type, consumer: String, retention: Int? = nil) -> EventDeliveries<E> {
        EventDeliveries(store: self, consumer: consumer, eventName: EventKeys.name(of: type), retention: retention)
    }
}

extension Context {
    /// The first `limit` events of type `E` after consumer `consumer`'s acknowledged
    /// position, as this context sees them: the pull form of `Store.events(of:consumer:)`
    /// for synchronous code, which acknowledges in the same context what it handled
    /// (`acknowledge(_:)`). Throws `EventError.unknownConsumer` for a consumer that is not
    /// registered (`registerEventConsumer`), and `EventError.fellBehind` when its
    /// retention limit had events deleted that it had not seen, `RecordError.invalidQuery`
    /// for a negative `limit`.
    public func events<E: Codable & Sendable>(of type: E.Type, consumer: String, limit: Int = 64) throws -> [EventDelivery<E>] {
        guard limit >= 0 else { throw RecordError.invalidQuery("limit \(limit) must not be negative") }
        let name = EventKeys.name(of: type)
        guard let position = try eventConsumerState(consumer, of: name)?.position else {
            throw EventError.unknownConsumer(event: name, consumer: consumer)
        }
        return try readEvents(of: type, named: name, consumer: consumer, after: position, limit: limit)
    }

    /// Up to `limit` committed events of `name` after `position`, decoded as `E`. Throws
    /// `EventError.fellBehind` when events after `position` were deleted for the
    /// consumer's retention limit, `.unknownConsumer` when it was removed.
    func readEvents<E: Codable & Sendable>(of type: E.Type, named name: String, consumer: String, after position: EventPosition,
                                           limit: Int) throws -> [EventDelivery<E>] {
        guard let state = try eventConsumerState(consumer, of: name) else {
            throw EventError.unknownConsumer(event: name, consumer: consumer)
        }
        try state.checkNoGap(after: position, event: name, consumer: consumer)
        let prefix = EventKeys.prefix(event: name)
        var read: [EventDelivery<E>] = []
        guard limit > 0 else { return read }
        // Committed events only: this context's own staged ones have version 0.
        let start = EventKeys.start(prefix: prefix, after: position)
        try forEach(from: start, prefix: prefix) { key, value in
            guard let position = EventKeys.position(of: key, prefix: prefix) else {
                throw EventError.malformed(key: renderKey(key), reason: "not an event's key")
            }
            let event = try RecordDecoder().decode(E.self, from: value)
            read.append(EventDelivery(event: event, position: position, consumer: consumer, eventName: name, store: store))
            return read.count < limit
        }
        return read
    }
}

/// The deliveries of one consumer (`Store.events(of:consumer:)`).
public struct EventDeliveries<E: Codable & Sendable>: AsyncSequence, Sendable {
    public typealias Element = EventDelivery<E>

    let store: Store
    let consumer: String
    let eventName: String
    let retention: Int?

    public func makeAsyncIterator() -> Iterator { Iterator(self) }

    /// Reads events a batch at a time and waits on a commit watch when it has none.
    public struct Iterator: AsyncIteratorProtocol {
        private let sequence: EventDeliveries
        private let watch: WatchLease
        /// The position of the last event read (nil before the first read).
        private var cursor: EventPosition?
        private var pending: [EventDelivery<E>] = []
        private var pendingIndex = 0
        private var finished = false

        init(_ sequence: EventDeliveries) {
            self.sequence = sequence
            watch = WatchLease(store: sequence.store, prefix: EventKeys.prefix(event: sequence.eventName))
        }

        public mutating func next() async throws -> EventDelivery<E>? {
            while !finished {
                if pendingIndex < pending.count {
                    defer { pendingIndex += 1 }
                    return pending[pendingIndex]
                }
                let generation = watch.watch.generation
                do {
                    if try await readMore() { continue }
                } catch EngineError.closed {
                    finished = true
                    break
                }
                // Nothing after the cursor at a version read after `generation`: a later
                // commit of this type moves the generation (CommitWatch.W1).
                if await !watch.watch.wait(beyond: generation) { finished = true }
            }
            return nil
        }

        /// Reads the next events after the cursor into `pending`; false when none is kept.
        private mutating func readMore() async throws -> Bool {
            let store = sequence.store
            if cursor == nil {
                let (consumer, event, retention) = (sequence.consumer, sequence.eventName, sequence.retention)
                cursor = try await store.write(retries: 8) { (unit: UnitOfWork) throws in
                    try unit.context.registerEventConsumer(consumer, of: event, retention: retention)
                }
            }
            let (sequence, after) = (sequence, cursor!)
            let read = try await store.read { (context: Context) throws -> [EventDelivery<E>] in
                try context.readEvents(of: E.self, named: sequence.eventName, consumer: sequence.consumer, after: after, limit: 64)
            }
            guard let last = read.last else { return false }
            cursor = last.position
            pending = read
            pendingIndex = 0
            return true
        }
    }
}

/// A commit watch held by an iterator and removed when the iterator goes.
final class WatchLease: Sendable {
    let store: Store
    let watch: CommitWatch

    init(store: Store, prefix: [UInt8]) {
        self.store = store
        watch = store.watchCommits(prefix: prefix)
    }

    deinit { store.removeWatch(watch) }
}
