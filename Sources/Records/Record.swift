// Records: `Codable`, `Identifiable` values stored under a key made of their entity name
// and their id (FORMAT.md, "Records"), reached through a repository bound to a context.
import StrataContexts
import Foundation

/// A type stored as records. Its entity name must stay stable: it is part of every key.
public protocol Record: Codable, Identifiable, Sendable where ID: RecordID {
    /// The name records of this type are stored under (default: the type's name).
    static var entityName: String { get }
    /// The secondary indexes kept for this type (default: none). See `RecordIndex`.
    static var indexes: [RecordIndex<Self>] { get }
    /// The relationships of this type (default: none). See `toOne` and `toMany`.
    static var relationships: [any RecordRelationship<Self>] { get }
}

extension Record {
    public static var entityName: String { String(describing: Self.self) }
}

/// An id type whose key bytes sort as its values do.
public protocol RecordID: Hashable, Sendable {
    /// The id's bytes in the record key (order-preserving).
    var keyBytes: [UInt8] { get }
    /// The id whose key bytes are `keyBytes`, or nil when they are not one.
    init?(keyBytes: [UInt8])
}

extension Int: RecordID {
    public var keyBytes: [UInt8] { Int64(self).keyBytes }
    public init?(keyBytes: [UInt8]) {
        guard let value = Int64(keyBytes: keyBytes) else { return nil }
        self.init(value)
    }
}

extension Int64: RecordID {
    /// Big-endian with the sign bit flipped, so negative ids sort first.
    public var keyBytes: [UInt8] { UInt64(bitPattern: self ^ Int64.min).keyBytes }
    public init?(keyBytes: [UInt8]) {
        guard let raw = UInt64(keyBytes: keyBytes) else { return nil }
        self = Int64(bitPattern: raw) ^ Int64.min
    }
}

extension UInt64: RecordID {
    public var keyBytes: [UInt8] { withUnsafeBytes(of: bigEndian) { Array($0) } }
    public init?(keyBytes: [UInt8]) {
        guard keyBytes.count == 8 else { return nil }
        self = keyBytes.reduce(0) { $0 << 8 | UInt64($1) }
    }
}

extension String: RecordID {
    public var keyBytes: [UInt8] { Array(utf8) }
    public init?(keyBytes: [UInt8]) { self.init(validating: keyBytes, as: UTF8.self) }
}

extension UUID: RecordID {
    public var keyBytes: [UInt8] { withUnsafeBytes(of: uuid) { Array($0) } }
    public init?(keyBytes: [UInt8]) {
        guard keyBytes.count == 16 else { return nil }
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyBytes(from: keyBytes) }
        self.init(uuid: uuid)
    }
}

/// Where records live among the keys (FORMAT.md, "Records"): `0xFE 'r'`, the entity
/// name's length as a varint and the name, then the id's key bytes. Keys starting with
/// `0xFE` are reserved for records.
package enum RecordKeys {
    static let reservedByte = Context.reservedKeyByte
    static let recordTag = UInt8(ascii: "r")

    static func prefix(entity: String) -> [UInt8] { named(recordTag, [entity]) }

    static func key<ID: RecordID>(entity: String, id: ID) -> [UInt8] { prefix(entity: entity) + id.keyBytes }

    /// Whether `key` is a record's key (of any entity).
    package static func isRecordKey(_ key: [UInt8]) -> Bool { key.count > 2 && key[0] == reservedByte && key[1] == recordTag }
}

/// Errors of records and repositories.
public enum RecordError: Error, Sendable, CustomStringConvertible, Equatable {
    /// `insert` found a record with this id already.
    case duplicate(entity: String, id: String)
    /// `update` or `delete` found no record with this id.
    case notFound(entity: String, id: String)
    /// Stored record bytes do not decode (the offset is within the record).
    case malformed(offset: Int, reason: String)
    /// A record written by a newer encoding version.
    case unsupportedVersion(found: UInt8, supported: UInt8)
    /// A query that cannot run as asked (the text says why).
    case invalidQuery(String)
    /// A unique index already holds this value for another record.
    case uniqueViolation(entity: String, index: String, value: String)
    /// A record's bytes hold a different shape than its type (a renamed field, a changed
    /// type): what the decoder said.
    case decoding(entity: String, key: String, reason: String)
    /// A sum of a field does not fit in its integer type.
    case overflow(entity: String, field: String, type: String)
    /// A record names, in a relationship it holds, a record that does not exist (insert the
    /// target first, in the same unit of work or before it).
    case relatedNotFound(entity: String, id: String, foreignKey: String, target: String, targetID: String)
    /// A delete rule `.deny` refused to delete a record: `count` records are related to it
    /// through `foreignKey`.
    case deleteDenied(entity: String, id: String, foreignKey: String, count: Int)
    /// A relationship is not declared as Strata needs it (the text says what to change).
    case invalidRelationship(String)
    /// `Repository.migrate(from:)` could not rewrite this record: it does not decode as
    /// the old type (the field names where, when the decoder knows), or its new value
    /// collides in a unique index.
    case migrationFailed(entity: String, id: String, field: String?, reason: String)

    public var description: String {
        switch self {
        case let .duplicate(entity, id): "A \(entity) with id \(id) already exists; use update or upsert."
        case let .notFound(entity, id): "No \(entity) with id \(id) exists; use insert or upsert."
        case let .malformed(offset, reason): "A stored record is damaged at byte \(offset): \(reason)."
        case let .unsupportedVersion(found, supported):
            "A stored record uses encoding version \(found); this build reads up to \(supported). Use a newer Strata."
        case let .invalidQuery(reason):
            "The query cannot run: \(reason)."
        case let .uniqueViolation(entity, index, value):
            "Another \(entity) already has \(value) in unique index \(index); change the value or update that record."
        case let .overflow(entity, field, type):
            "The sum of \(entity).\(field) does not fit in \(type); sum it as a wider type (map the records) or narrow the predicate."
        case let .relatedNotFound(entity, id, foreignKey, target, targetID):
            "\(entity) \(id) refers to \(target) \(targetID) through \(foreignKey), but there is no such \(target); insert it first, or refer to one that exists."
        case let .deleteDenied(entity, id, foreignKey, count):
            "\(entity) \(id) cannot be deleted: \(count) record(s) are related to it through \(foreignKey), whose delete rule is deny; delete or detach them first."
        case let .invalidRelationship(reason):
            "A relationship is declared incompletely: \(reason)."
        case let .migrationFailed(entity, id, field, reason):
            "Migrating \(entity) \(id) failed" + (field.map { " at field \($0)" } ?? "") + ": \(reason). Nothing was migrated."
        case let .decoding(entity, key, reason):
            "The \(entity) stored under \(key) does not decode as its type (\(reason)); migrate it with Repository.migrate."
        }
    }
}

extension RecordError: LocalizedError {
    public var errorDescription: String? { description }
}
