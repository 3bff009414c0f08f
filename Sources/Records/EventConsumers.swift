// Outbox consumers: each named consumer of an event type keeps the position of the last
// event it acknowledged (FORMAT.md, "Events"). Acknowledging moves it forward in the
// acknowledging context, and deletes the events every consumer of the type is past
// (Outbox.B3), so the store keeps only what some consumer still has to see.
import StrataContexts
import StrataCodec
import StrataEngine

/// What a consumer keeps: the position of the last event it acknowledged, its retention
/// limit, and the last event deleted before it saw it (the limit's doing).
struct EventConsumerState: Codable, Equatable {
    var version: UInt64
    var sequence: UInt64
    /// At most this many events are kept for the consumer (nil: all it has not acknowledged).
    var retention: Int?
    var lostVersion: UInt64?
    var lostSequence: UInt64?

    init(_ position: EventPosition, retention: Int? = nil) {
        version = position.version
        sequence = position.sequence
        self.retention = retention
    }

    var position: EventPosition {
        get { EventPosition(version: version, sequence: sequence) }
        set {
            (version, sequence) = (newValue.version, newValue.sequence)
            // Moving past the gap settles it.
            if let lost = lostThrough, lost <= newValue { (lostVersion, lostSequence) = (nil, nil) }
        }
    }

    /// The last event deleted while the consumer had not acknowledged it, when that is
    /// after its position: the gap `EventError.fellBehind` names.
    var lostThrough: EventPosition? {
        get { lostVersion.map { EventPosition(version: $0, sequence: lostSequence ?? 0) } }
        set { (lostVersion, lostSequence) = (newValue?.version, newValue?.sequence) }
    }

    /// Throws `EventError.fellBehind` when events after the position were deleted.
    func checkNoGap(after position: EventPosition, event: String, consumer: String) throws(EventError) {
        guard let lost = lostThrough, lost > position else { return }
        throw .fellBehind(event: event, consumer: consumer, acknowledged: position, lostThrough: lost, retention: retention ?? 0)
    }
}

/// One consumer of one event type, as `Context.eventConsumers()` reports it.
public struct EventConsumerStatus: Sendable, Equatable {
    /// The event type's name (`DomainEvent.eventName`, or the type's name).
    public let event: String
    /// The consumer's name.
    public let consumer: String
    /// The last event it acknowledged (`EventPosition.start`: none).
    public let acknowledged: EventPosition
    /// How many kept events come after that position: what it still has to see.
    public let pending: Int
    /// Its retention limit (nil: every event it has not acknowledged is kept).
    public let retention: Int?
    /// The last event deleted before it saw it, when its retention limit left a gap it has
    /// not accepted yet (`EventError.fellBehind`).
    public let lostThrough: EventPosition?
}

/// One event type in the outbox, as `Context.eventTypes()` reports it.
public struct EventTypeStatus: Sendable, Equatable {
    /// The event type's name.
    public let event: String
    /// How many of its events are kept.
    public let count: Int
    /// The oldest and newest kept event (nil when none is kept).
    public let oldest: EventPosition?
    public let newest: EventPosition?
}

/// Events deleted by one acknowledgement at most; the next one deletes the rest.
let reclaimedPerAcknowledgement = 256

extension Context {
    /// Moves `delivery`'s consumer past its event (and every event before it) in this
    /// context, to be committed with the context's other changes: the consumer's own writes
    /// and its acknowledgement commit together, or neither does. Throws
    /// `EventError.alreadyAcknowledged` when the consumer is at or past the event already
    /// (another instance of it handled the event: this unit must not apply its effects
    /// again), `.unknownConsumer` when the consumer was removed.
    public func acknowledge<E>(_ delivery: EventDelivery<E>) throws {
        try acknowledge(event: delivery.eventName, consumer: delivery.consumer, through: delivery.position)
    }

    /// Moves consumer `consumer` of `event` past `position` (see `acknowledge(_:)`).
    public func acknowledge(event: String, consumer: String, through position: EventPosition) throws {
        let key = EventKeys.consumer(event: event, name: consumer)
        guard var state = try consumerState(key) else { throw EventError.unknownConsumer(event: event, consumer: consumer) }
        guard position > state.position else {
            throw EventError.alreadyAcknowledged(event: event, consumer: consumer, position: position, acknowledged: state.position)
        }
        state.position = position
        try stage(key, try RecordEncoder().encode(state))
        try reclaimEvents(of: event)
    }

    /// Registers consumer `consumer` of `event` at `EventPosition.start` (it receives every
    /// kept event) unless it is registered, and returns its position. With `retention`,
    /// at most that many of the newest events are kept for it: older ones it has not
    /// acknowledged are deleted once another consumer's acknowledgement finds them beyond
    /// the limit, and it is then told so (`EventError.fellBehind`) instead of reading past
    /// the gap. nil keeps every event until it acknowledges it. Given for a registered
    /// consumer, the limit replaces the one it had.
    @discardableResult
    public func registerEventConsumer(_ consumer: String, of event: String, retention: Int? = nil) throws -> EventPosition {
        try EventKeys.checkConsumerName(consumer)
        if let retention, retention < 1 { throw EventError.invalidRetention(retention) }
        let key = EventKeys.consumer(event: event, name: consumer)
        if var state = try consumerState(key) {
            if let retention, state.retention != retention {
                state.retention = retention
                try stage(key, try RecordEncoder().encode(state))
            }
            return state.position
        }
        try stage(key, try RecordEncoder().encode(EventConsumerState(.start, retention: retention)))
        try markConsumersChanged(of: event)
        return .start
    }

    /// Sets the position of consumer `consumer` of `event` (registering it), forward or
    /// back: it next receives the first kept event after `position`. Moving it to or past
    /// the last event its retention limit deleted (`EventError.fellBehind` names it)
    /// accepts that gap.
    public func positionEventConsumer(_ consumer: String, of event: String, at position: EventPosition) throws {
        try EventKeys.checkConsumerName(consumer)
        let key = EventKeys.consumer(event: event, name: consumer)
        let current = try consumerState(key)
        var state = current ?? EventConsumerState(.start)
        state.position = position
        try stage(key, try RecordEncoder().encode(state))
        if current.map({ position < $0.position }) ?? true { try markConsumersChanged(of: event) }
        try reclaimEvents(of: event)
    }

    /// Writes `event`'s marker: a consumer was registered or moved back, which a reclaim
    /// that did not see it must conflict with (`reclaimEvents`).
    private func markConsumersChanged(of event: String) throws {
        try stage(EventKeys.consumersChanged(event: event), [])
    }

    /// Removes consumer `consumer` of `event`; the events only it still had to see are
    /// deleted once the remaining consumers are past them (all are kept when none
    /// remains). Throws `EventError.unknownConsumer` when it is not registered.
    public func removeEventConsumer(_ consumer: String, of event: String) throws {
        let key = EventKeys.consumer(event: event, name: consumer)
        guard try consumerState(key) != nil else { throw EventError.unknownConsumer(event: event, consumer: consumer) }
        try stage(key, nil)
        try reclaimEvents(of: event)
    }

    /// The consumers of `event` (of every event type when nil), by event and name.
    public func eventConsumers(of event: String? = nil) throws -> [EventConsumerStatus] {
        var found: [(event: String, consumer: String, state: EventConsumerState)] = []
        let prefix = event.map(EventKeys.consumersPrefix) ?? [Self.reservedKeyByte, EventKeys.consumerTag]
        try forEach(prefix: prefix) { key, value in
            guard let names = EventKeys.consumerNames(of: key) else {
                throw EventError.malformed(key: renderKey(key), reason: "not a consumer's key")
            }
            found.append((names.event, names.consumer, try Self.decodeState(value, key: key)))
            return true
        }
        return try found.map { entry in
            let prefix = EventKeys.prefix(event: entry.event)
            let pending = try countKeys(from: EventKeys.start(prefix: prefix, after: entry.state.position), prefix: prefix)
            let lost = entry.state.lostThrough.flatMap { $0 > entry.state.position ? $0 : nil }
            return EventConsumerStatus(event: entry.event, consumer: entry.consumer, acknowledged: entry.state.position,
                                       pending: pending, retention: entry.state.retention, lostThrough: lost)
        }
    }

    /// The event types with kept events, by name.
    public func eventTypes() throws -> [EventTypeStatus] {
        var types: [EventTypeStatus] = []
        var start: [UInt8]? = nil
        let all: [UInt8] = [Self.reservedKeyByte, EventKeys.eventTag]
        while let first = try scan(from: start, prefix: all, limit: 1).first {
            guard let nameRange = RecordKeys.entityNameRange(of: first.key, tag: EventKeys.eventTag),
                  let name = String(validating: first.key[nameRange], as: UTF8.self) else {
                throw EventError.malformed(key: renderKey(first.key), reason: "not an event's key")
            }
            let prefix = EventKeys.prefix(event: name)
            let newest = try scan(prefix: prefix, reverse: true, limit: 1).first.flatMap { EventKeys.position(of: $0.key, prefix: prefix) }
            types.append(EventTypeStatus(event: name, count: try countKeys(prefix: prefix),
                                         oldest: EventKeys.position(of: first.key, prefix: prefix), newest: newest))
            start = keyAfterPrefix(prefix)
            guard start != nil else { break }
        }
        return types
    }

    /// Deletes, unchecked, the events of `event` that every registered consumer is past
    /// (Outbox.B3), at most `reclaimedPerAcknowledgement` at a time. Unchecked, so
    /// consumers acknowledging side by side never conflict over them: deleting a deleted
    /// event changes nothing. A consumer registered meanwhile starts with the events kept
    /// when it commits.
    private func reclaimEvents(of event: String) throws {
        let prefix = EventKeys.prefix(event: event)
        let consumersPrefix = EventKeys.consumersPrefix(event: event)
        var consumers: [(key: [UInt8], state: EventConsumerState, position: EventPosition)] = []
        try forEach(prefix: consumersPrefix) { key, value in
            let state = try Self.decodeState(value, key: key)
            consumers.append((key, state, state.position))
            return true
        }
        // A consumer with a retention limit keeps only the newest events: the one before them
        // counts as its position here.
        for index in consumers.indices {
            if let retention = consumers[index].state.retention, let floor = try newestBeyond(retention, prefix: prefix),
               floor > consumers[index].position {
                consumers[index].position = floor
            }
        }
        guard let oldest = consumers.map(\.position).min(), oldest > .start else { return }
        // Staged events (version 0) are this context's own: never reclaimed.
        var doomed: [(key: [UInt8], position: EventPosition)] = []
        try forEach(from: EventKeys.key(prefix: prefix, EventPosition(version: 1, sequence: 0)),
                    to: EventKeys.key(prefix: prefix, oldest) + [0], prefix: prefix) { key, _ in
            if let position = EventKeys.position(of: key, prefix: prefix) { doomed.append((key, position)) }
            return doomed.count < reclaimedPerAcknowledgement
        }
        guard let lastDoomed = doomed.last?.position else { return }
        // What is deleted depends on who consumes the type: a consumer registered or moved
        // back meanwhile by another commit (which writes the type's marker) makes this one
        // conflict, rather than lose events. Acknowledgements only move consumers forward,
        // so they leave the marker alone and never conflict with this.
        try addReadRange(key: EventKeys.consumersChanged(event: event))
        for (key, _) in doomed { try stage(key, nil, isChecked: false) }
        // A limited consumer that had not seen some of them is told of the gap.
        for (key, var state, _) in consumers where state.position < lastDoomed {
            let lost = doomed.last { $0.position > state.position }!.position
            guard state.lostThrough.map({ $0 < lost }) ?? true else { continue }
            state.lostThrough = lost
            try stage(key, try RecordEncoder().encode(state))
        }
    }

    /// The position of the newest committed event of `prefix` but `count` (nil: there are
    /// not that many).
    private func newestBeyond(_ count: Int, prefix: [UInt8]) throws -> EventPosition? {
        var seen = 0
        var found: EventPosition?
        try forEach(from: EventKeys.key(prefix: prefix, EventPosition(version: 1, sequence: 0)), prefix: prefix,
                    reverse: true) { key, _ in
            seen += 1
            guard seen > count else { return true }
            found = EventKeys.position(of: key, prefix: prefix)
            return false
        }
        return found
    }

    /// The state of consumer `consumer` of `event`, for the readers of events.
    func eventConsumerState(_ consumer: String, of event: String) throws -> EventConsumerState? {
        try consumerState(EventKeys.consumer(event: event, name: consumer))
    }

    private func consumerState(_ key: [UInt8]) throws -> EventConsumerState? {
        try get(key).map { try Self.decodeState($0, key: key) }
    }

    private static func decodeState(_ bytes: [UInt8], key: [UInt8]) throws -> EventConsumerState {
        do { return try RecordDecoder().decode(EventConsumerState.self, from: bytes) } catch {
            throw EventError.malformed(key: renderKey(key), reason: "\(error)")
        }
    }
}

extension EventKeys {
    /// The event and consumer names in a consumer's key.
    static func consumerNames(of key: [UInt8]) -> (event: String, consumer: String)? {
        guard let eventRange = RecordKeys.entityNameRange(of: key, tag: consumerTag),
              let event = String(validating: key[eventRange], as: UTF8.self) else { return nil }
        let rest = Array(key[eventRange.upperBound...])
        var reader = ByteReader(rest, start: 0)
        guard let length = try? reader.readVarint(), length == UInt64(reader.remaining),
              let consumer = String(validating: rest[reader.offset...], as: UTF8.self) else { return nil }
        return (event, consumer)
    }
}
