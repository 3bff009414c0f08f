// A record type may read itself from its stored fields (`RecordReadable`) instead of
// through `init(from:)`. Decoding through `Decoder` costs a keyed container from the
// standard library per record (its generic type looked up at run time, a box allocated)
// and a dynamic call through that box per field; a `RecordReader` is the same field table
// (RecordBytes.swift) read by name with direct calls. The bytes and the rules are those of
// `RecordDecoder`: validated first (D1), the last field of a name counts (D2), a missing
// field throws `keyNotFound` unless read with `decodeIfPresent`, and a value of another
// shape throws `typeMismatch` naming the field.
import Foundation

/// A record type that reads its stored fields itself, in place of `init(from:)`.
///
/// Records are still written with `Encodable`; a repository reads a type that conforms
/// through `init(record:)`, which must read what `encode(to:)` writes, under the same
/// names. The synthesized `Codable` conformance names fields after the stored properties:
///
/// ```swift
/// extension Book: RecordReadable {
///     init(record: RecordReader) throws {
///         id = try record.decode(Int.self, forKey: "id")
///         title = try record.decode(String.self, forKey: "title")
///         subtitle = try record.decodeIfPresent(String.self, forKey: "subtitle")
///     }
/// }
/// ```
public protocol RecordReadable: Record {
    /// Reads the value from its record's fields.
    init(record: RecordReader) throws
}

/// The fields of one stored record, read by name (see `RecordReadable`).
public struct RecordReader {
    let container: KeyedRecordDecoding<RecordFieldName>

    /// Whether the record has a field named `key`.
    public func contains(_ key: String) -> Bool { container.contains(RecordFieldName(key)) }

    // The common kinds, read in place. Each throws `DecodingError.keyNotFound` when the
    // record has no field `key` and `.typeMismatch` when the field holds another kind (or an
    // integer that does not fit); a repository reports either as `RecordError.decoding`.

    /// The string in field `key`.
    public func decode(_ type: String.Type, forKey key: String) throws -> String {
        try container.decode(type, forKey: RecordFieldName(key))
    }

    /// The integer in field `key`.
    public func decode(_ type: Int.Type, forKey key: String) throws -> Int {
        try container.decode(type, forKey: RecordFieldName(key))
    }

    /// The integer in field `key`.
    public func decode(_ type: Int64.Type, forKey key: String) throws -> Int64 {
        try container.decode(type, forKey: RecordFieldName(key))
    }

    /// The unsigned integer in field `key`.
    public func decode(_ type: UInt64.Type, forKey key: String) throws -> UInt64 {
        try container.decode(type, forKey: RecordFieldName(key))
    }

    /// The number in field `key` (an integer reads as its `Double`).
    public func decode(_ type: Double.Type, forKey key: String) throws -> Double {
        try container.decode(type, forKey: RecordFieldName(key))
    }

    /// The Boolean in field `key`.
    public func decode(_ type: Bool.Type, forKey key: String) throws -> Bool {
        try container.decode(type, forKey: RecordFieldName(key))
    }

    /// Any other `Decodable` value (a `Date`, an enum, a nested struct, an array), read as
    /// `init(from:)` would read it.
    public func decode<T: Decodable>(_ type: T.Type, forKey key: String) throws -> T {
        try container.decode(type, forKey: RecordFieldName(key))
    }

    /// The value of `key`, or nil when the record has no such field or it holds nil.
    public func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: String) throws -> T? {
        let name = RecordFieldName(key)
        guard container.contains(name), try !container.decodeNil(forKey: name) else { return nil }
        return try container.decode(type, forKey: name)
    }
}

/// A field name as a coding key, for `RecordReader`'s lookups and errors.
struct RecordFieldName: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }

    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension RecordDecoding {
    /// The root value's fields for a `RecordReadable` type.
    func reader() throws -> RecordReader {
        try RecordReader(container: keyedContainer(RecordFieldName.self))
    }
}

extension RecordDecoder {
    /// The record in `bytes` as a `T`: through `read` (a `RecordReadable` type's
    /// `init(record:)`) when given, else through `init(from:)`.
    func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], reading read: ((RecordReader) throws -> T)?) throws -> T {
        guard let read else { return try decode(type, from: bytes) }
        let (root, fields) = try RecordBytes.validateRecord(bytes)
        return try read(RecordDecoding(bytes: bytes, offset: root, rootFields: fields).reader())
    }

    /// `init(record:)` of `type` as a function returning `R`, when `type` is `R` and
    /// conforms to `RecordReadable` (found once per type: `RecordShape`).
    static func reading<R>(_ type: R.Type) -> (@Sendable (RecordReader) throws -> R)? {
        guard let readable = type as? any RecordReadable.Type else { return nil }
        func reading<T: RecordReadable>(_ type: T.Type) -> Any {
            { @Sendable (reader: RecordReader) throws -> T in try T(record: reader) }
        }
        return reading(readable) as? @Sendable (RecordReader) throws -> R
    }
}
