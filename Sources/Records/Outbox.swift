// The transactional outbox: `publish` stages a domain event in the unit of work's own
// commit, so the event exists if and only if the changes it describes do (FORMAT.md,
// "Events"). Consumers read events in commit order (EventDeliveries.swift).
//
// Invariants:
//  Outbox.B1. An event's key is its type's prefix, then its commit's version and its
//      place among the commit's events (all types, in key order), big-endian: a type's
//      keys sort in commit order, and within a commit in the order `publish` was called. Both are written by the commit itself
//      (`WALBatch.versionStampedOperations`); staged, the version is zero and a
//      process-wide counter keeps the keys apart in publish order.
//  Outbox.B2. An event is staged like any write of its context: a rolled-back unit, a
//      discarded child or a failed commit leaves none; a child's events reach its parent
//      only when it merges.
//  Outbox.B3. A consumer's position only moves forward, and only by its acknowledgements
//      (or `positionEventConsumer`); events at or before every registered consumer's
//      position may be deleted, others never are. While a type has no consumer, all its
//      events are kept.
// Thread-safety: as for contexts; the sequence counter is atomic.
import StrataContexts
import Synchronization

/// A type published through the outbox may name itself; otherwise its type name is used
/// (as `Record.entityName` is). The name is part of every key of its events: keep it stable.
public protocol DomainEvent: Codable, Sendable {
    static var eventName: String { get }
}

extension DomainEvent {
    public static var eventName: String { String(describing: Self.self) }
}

/// Where an event stands in commit order: the version of the commit that published it,
/// then its place among that commit's events.
public struct EventPosition: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The version of the commit that published the event.
    public var version: UInt64
    /// The event's place in its commit: among the commit's events in key order, so that a
    /// type's events of one commit come in the order they were published (their numbers
    /// need not start at 0 when the commit published several types).
    public var sequence: UInt64

    public init(version: UInt64, sequence: UInt64) {
        self.version = version
        self.sequence = sequence
    }

    /// Before every event.
    public static let start = EventPosition(version: 0, sequence: 0)

    public static func < (lhs: Self, rhs: Self) -> Bool { (lhs.version, lhs.sequence) < (rhs.version, rhs.sequence) }

    public var description: String { "\(version).\(sequence)" }
}

/// Errors of the outbox and its consumers.
public enum EventError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The consumer is not registered for the event (it was removed): register it again
    /// with `Store.events(of:consumer:)`.
    case unknownConsumer(event: String, consumer: String)
    /// A consumer name is empty or longer than 256 bytes.
    case invalidConsumerName(String)
    /// A stored event or consumer does not decode (the key and what the decoder said).
    case malformed(key: String, reason: String)
    /// A retention limit is not positive.
    case invalidRetention(Int)
    /// The consumer is at or past the event already: another instance of it handled it.
    case alreadyAcknowledged(event: String, consumer: String, position: EventPosition, acknowledged: EventPosition)
    /// The consumer kept more than its retention limit of events unacknowledged, and the
    /// events after `acknowledged` through `lostThrough` were deleted before it saw them.
    case fellBehind(event: String, consumer: String, acknowledged: EventPosition, lostThrough: EventPosition, retention: Int)

    public var description: String {
        switch self {
        case let .unknownConsumer(event, consumer):
            "No consumer \"\(consumer)\" of \(event) events is registered (it was removed); start it again with store.events(of:consumer:)."
        case let .invalidConsumerName(name):
            "The consumer name \"\(name)\" is not usable: give 1 to 256 bytes of UTF-8."
        case let .malformed(key, reason):
            "The outbox entry under \(key) is damaged: \(reason)."
        case let .alreadyAcknowledged(event, consumer, position, acknowledged):
            "Consumer \"\(consumer)\" of \(event) events acknowledged \(acknowledged) already, which is at or past \(position): "
                + "another instance of it handled the event; this unit of work was not committed, so its effects are not applied twice."
        case let .invalidRetention(retention):
            "A retention limit of \(retention) events keeps nothing: give 1 or more, or nil to keep every event."
        case let .fellBehind(event, consumer, acknowledged, lostThrough, retention):
            "Consumer \"\(consumer)\" of \(event) events fell more than \(retention) events behind: the events after "
                + "\(acknowledged) through \(lostThrough) were deleted before it saw them. Accept the gap with "
                + "positionEventConsumer(\"\(consumer)\", of: \"\(event)\", at: \(lostThrough)) "
                + "(strata events --move \(consumer) --event \(event) --to \(lostThrough)), or raise its retention."
        }
    }
}

/// The outbox's keys (FORMAT.md, "Events").
package enum EventKeys {
    static let eventTag = UInt8(ascii: "e")
    static let consumerTag = UInt8(ascii: "c")
    static let consumersChangedTag = UInt8(ascii: "k")

    /// A process-wide counter that keeps staged events apart, in publish order, until their
    /// commit numbers them (Outbox.B1).
    private static let nextSequence = Atomic<UInt64>(1)

    static func name<E>(of type: E.Type) -> String {
        (type as? any DomainEvent.Type)?.eventName ?? String(describing: type)
    }

    static func prefix(event: String) -> [UInt8] { RecordKeys.named(eventTag, [event]) }

    static func key(prefix: [UInt8], _ position: EventPosition) -> [UInt8] {
        prefix + position.version.keyBytes + position.sequence.keyBytes
    }

    /// The first key after `position` a reader of committed events starts at: never among
    /// a context's own staged events (version 0).
    static func start(prefix: [UInt8], after position: EventPosition) -> [UInt8] {
        position.version == 0 ? key(prefix: prefix, EventPosition(version: 1, sequence: 0)) : key(prefix: prefix, position) + [0]
    }

    /// The key a new event is staged under (Outbox.B1): its version still zero.
    static func stagedKey(prefix: [UInt8]) -> [UInt8] {
        key(prefix: prefix, EventPosition(version: 0, sequence: nextSequence.wrappingAdd(1, ordering: .relaxed).oldValue))
    }

    /// The position in an event's key, or nil when the key is not one under `prefix`.
    static func position(of key: [UInt8], prefix: [UInt8]) -> EventPosition? {
        guard key.count == prefix.count + 16, key.starts(with: prefix) else { return nil }
        let tail = key[prefix.count...]
        guard let version = UInt64(keyBytes: Array(tail.prefix(8))),
              let sequence = UInt64(keyBytes: Array(tail.suffix(8))) else { return nil }
        return EventPosition(version: version, sequence: sequence)
    }

    static func consumersPrefix(event: String) -> [UInt8] { RecordKeys.named(consumerTag, [event]) }

    static func consumer(event: String, name: String) -> [UInt8] { RecordKeys.named(consumerTag, [event, name]) }

    /// Written when a consumer of `event` is registered or moved back (Outbox.B3).
    static func consumersChanged(event: String) -> [UInt8] { RecordKeys.named(consumersChangedTag, [event]) }

    static func checkConsumerName(_ name: String) throws(EventError) {
        guard !name.isEmpty, name.utf8.count <= 256 else { throw .invalidConsumerName(name) }
    }
}

extension Context {
    /// Stages `event` in this context's outbox: it is committed with this context's
    /// changes, at their version, or not at all (Outbox.B2). Consumers receive it in
    /// commit order (`Store.events(of:consumer:)`). Throws `ContextError.readOnly` or
    /// `.finished`, `EngineError.valueTooLarge`, or what encoding the event throws.
    public func publish<E: Codable & Sendable>(_ event: E) throws {
        let prefix = EventKeys.prefix(event: EventKeys.name(of: E.self))
        try stage(EventKeys.stagedKey(prefix: prefix), try RecordEncoder().encode(event), isChecked: false, stampsVersion: true)
    }
}

extension UnitOfWork {
    /// Stages `event` in the unit's outbox: it exists if and only if the unit's changes
    /// do (a nested unit's events reach the outermost unit only when it merges). See
    /// `Context.publish(_:)`.
    public func publish<E: Codable & Sendable>(_ event: E) throws { try context.publish(event) }
}
