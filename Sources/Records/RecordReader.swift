// A record type may read itself from its stored fields (`RecordReadable`) instead of
// through `init(from:)`. Decoding through `Decoder` costs a keyed container from the
// standard library per record (its generic type looked up at run time, a box allocated)
// and a dynamic call through that box per field; a `RecordReader` reads the record's field
// table (RecordBytes.swift) by name with direct calls, where the bytes lie: in the
// memtable, a page, or a value already copied out. The rules are those of
// `RecordDecoder`: the whole record is validated first (RecordDecoder.D1), the last field of a name
// counts (RecordDecoder.D2), a missing field throws `keyNotFound` unless read with `decodeIfPresent`,
// and a value of another shape throws `typeMismatch` naming the field.
//
// Invariant: a reader lives only for the call it is lent to. It is `~Copyable` and lent
// `borrowing`, so `init(record:)` can neither keep it nor let a closure that outlives the
// call capture it: the bytes and the field table it points to (on the reading call's
// stack) are never reached after the call returns.
import StrataContexts
import Foundation

/// A record type that reads its stored fields itself, in place of `init(from:)`.
///
/// Records are still written with `Encodable`; a repository reads a type that conforms
/// through `init(record:)`, which must read what `encode(to:)` writes, under the same
/// names. The synthesized `Codable` conformance names fields after the stored properties:
///
/// ```swift
/// extension Book: RecordReadable {
///     init(record: borrowing RecordReader) throws {
///         id = try record.decode(Int.self, forKey: "id")
///         title = try record.decode(String.self, forKey: "title")
///         subtitle = try record.decodeIfPresent(String.self, forKey: "subtitle")
///     }
/// }
/// ```
public protocol RecordReadable: Record {
    /// Reads the value from its record's fields. The reader is lent for this call only.
    init(record: borrowing RecordReader) throws
}

/// The fields of one stored record, read by name (see `RecordReadable`). Lent to
/// `init(record:)` for the call; it cannot be copied or kept.
public struct RecordReader: ~Copyable {
    private let lookup: FieldLookup
    private let state: UnsafeMutablePointer<State>

    /// What reads change: where the next lookup starts, and the record's bytes copied out
    /// once for values read through `init(from:)`.
    private struct State {
        var lookup = FieldLookupState()
        var copy: [UInt8]?
    }

    private init(lookup: FieldLookup, state: UnsafeMutablePointer<State>) {
        self.lookup = lookup
        self.state = state
    }

    /// Checks the record in `raw` as `RecordDecoder` does (RecordDecoder.D1) and calls `body` with a
    /// reader of its root's fields. Throws `RecordError.malformed` or
    /// `.unsupportedVersion` for bad bytes, `DecodingError.typeMismatch` when the root is
    /// not a keyed value, and what `body` throws.
    @inlinable
    static func read<T>(_ raw: UnsafeRawBufferPointer, _ body: (borrowing RecordReader) throws -> T) throws -> T {
        // The work is done by a function that is not generic: run unspecialized, a generic
        // one looked up `Result`'s metadata at run time, four times per record; this part
        // is specialized where it is called.
        var result: T?
        try lend(raw) { result = try body($0) }
        // Moved out, not copied: a copy retained the record's strings and the optional's
        // end released them again, two atomic operations each.
        return result.take()!
    }

    /// `read` with no result, the reader lent to `body`.
    @usableFromInline
    static func lend(_ raw: UnsafeRawBufferPointer, _ body: (borrowing RecordReader) throws -> Void) throws {
        var scanner = RecordScanner(raw, at: 0)
        let version = try scanner.byte()
        guard version == RecordValue.formatVersion else {
            throw RecordError.unsupportedVersion(found: version, supported: RecordValue.formatVersion)
        }
        guard scanner.remaining > 0, raw[1] == RecordBytes.Tag.keyed.rawValue else {
            // Not a keyed value: checked whole, then reported as `init(from:)` would.
            try scanner.skipValue(depth: 0, validating: true)
            guard scanner.offset == raw.count else { throw RecordError.malformed(offset: scanner.offset, reason: "bytes after the record") }
            let found = RecordBytes.kind(RecordBytes.Tag(rawValue: raw[1]) ?? .null)
            throw DecodingError.typeMismatch([String: Any].self, DecodingError.Context(codingPath: [], debugDescription: "expected a keyed value, found \(found)"))
        }
        _ = try scanner.byte()
        let count = try scanner.length(limit: scanner.remaining / 2)
        // The table on the stack when small (`withUnsafeTemporaryAllocation` goes to the
        // heap past its limit); its fields are plain values, nothing to deinitialize.
        try withUnsafeTemporaryAllocation(of: RecordField.self, capacity: max(count, 1)) { fields in
            let table = fields.baseAddress!
            let alike = try RecordBytes.readFields(&scanner, count: count, into: table, validating: true)
            guard scanner.offset == raw.count else { throw RecordError.malformed(offset: scanner.offset, reason: "bytes after the record") }
            var state = State()
            let lookup = FieldLookup(raw: raw, fields: table, count: count)
            if alike || count > FieldLookup.scanned { lookup.findDuplicates(&state.lookup) }
            try withUnsafeMutablePointer(to: &state) { try body(RecordReader(lookup: lookup, state: $0)) }
        }
    }

    /// Whether the record has a field named `key`.
    public func contains(_ key: String) -> Bool { lookup.position(of: key, &state.pointee.lookup) != nil }

    // The common kinds, read in place. Each throws `DecodingError.keyNotFound` when the
    // record has no field `key` and `.typeMismatch` when the field holds another kind (or an
    // integer that does not fit); a repository reports either as `RecordError.decoding`.

    /// The string in field `key`.
    public func decode(_ type: String.Type, forKey key: String) throws -> String {
        try string(at: offset(key), key)
    }

    /// The integer in field `key`.
    public func decode(_ type: Int.Type, forKey key: String) throws -> Int {
        let at = try offset(key)
        if let value = RecordBytes.shortInt(lookup.raw, at) { return Int(truncatingIfNeeded: value) }
        return try integer(at: at, key, as: type)
    }

    /// The integer in field `key`.
    public func decode(_ type: Int64.Type, forKey key: String) throws -> Int64 {
        try integer(at: offset(key), key, as: type)
    }

    /// The unsigned integer in field `key`.
    public func decode(_ type: UInt64.Type, forKey key: String) throws -> UInt64 {
        try integer(at: offset(key), key, as: type)
    }

    /// The number in field `key` (an integer reads as its `Double`).
    public func decode(_ type: Double.Type, forKey key: String) throws -> Double {
        try double(at: offset(key), key)
    }

    /// The Boolean in field `key`.
    public func decode(_ type: Bool.Type, forKey key: String) throws -> Bool {
        try bool(at: offset(key), key)
    }

    /// Any other `Decodable` value (a `Date`, an enum, a nested struct, an array), read as
    /// `init(from:)` would read it.
    public func decode<T: Decodable>(_ type: T.Type, forKey key: String) throws -> T {
        try value(type, at: offset(key), key)
    }

    /// The value of `key`, or nil when the record has no such field or it holds nil.
    public func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: String) throws -> T? {
        guard let at = lookup.valueOffset(of: key, &state.pointee.lookup), tag(at) != .null else { return nil }
        return try value(type, at: at, key)
    }

    // MARK: Reading a field's value

    /// Where the value of field `key` lies; throws `keyNotFound` when there is none.
    private func offset(_ key: String) throws -> Int {
        guard let at = lookup.valueOffset(of: key, &state.pointee.lookup) else {
            throw DecodingError.keyNotFound(RecordFieldName(key), DecodingError.Context(codingPath: [], debugDescription: "no field \"\(key)\""))
        }
        return at
    }

    /// The tag of the value at `at` (validated: RecordDecoder.D1).
    private func tag(_ at: Int) -> RecordBytes.Tag { RecordBytes.Tag(rawValue: lookup.raw[at]) ?? .null }

    private func string(at: Int, _ key: String) throws -> String {
        guard let value = RecordBytes.string(lookup.raw, at) else { throw mismatch(String.self, at, key, "a string") }
        return value
    }

    private func integer<I: FixedWidthInteger>(at: Int, _ key: String, as type: I.Type) throws -> I {
        if let value = RecordBytes.integer(lookup.raw, at, as: type) { return value }
        throw mismatch(type, at, key, tag(at) == .int || tag(at) == .uint ? "an integer that fits" : "an integer")
    }

    private func double(at: Int, _ key: String) throws -> Double {
        switch tag(at) {
        // Validated (RecordDecoder.D1): the eight bytes are there.
        case .double: return Double(bitPattern: UInt64(littleEndian: lookup.raw.loadUnaligned(fromByteOffset: at + 1, as: UInt64.self)))
        case .int: return Double(try integer(at: at, key, as: Int64.self))
        case .uint: return Double(try integer(at: at, key, as: UInt64.self))
        default: throw mismatch(Double.self, at, key, "a number")
        }
    }

    private func bool(at: Int, _ key: String) throws -> Bool {
        switch tag(at) {
        case .isTrue: return true
        case .isFalse: return false
        default: throw mismatch(Bool.self, at, key, "a Boolean")
        }
    }

    /// A value of any type: the kinds above read in place, anything else through
    /// `init(from:)` over a copy of the record's bytes (made once per reader).
    private func value<T: Decodable>(_ type: T.Type, at: Int, _ key: String) throws -> T {
        switch ObjectIdentifier(type) {
        // `unsafeBitCast` after the identity test: `T` is that very type.
        case ObjectIdentifier(String.self): return unsafeBitCast(try string(at: at, key), to: T.self)
        case ObjectIdentifier(Int.self): return unsafeBitCast(try integer(at: at, key, as: Int.self), to: T.self)
        case ObjectIdentifier(Int64.self): return unsafeBitCast(try integer(at: at, key, as: Int64.self), to: T.self)
        case ObjectIdentifier(UInt64.self): return unsafeBitCast(try integer(at: at, key, as: UInt64.self), to: T.self)
        case ObjectIdentifier(Double.self): return unsafeBitCast(try double(at: at, key), to: T.self)
        case ObjectIdentifier(Bool.self): return unsafeBitCast(try bool(at: at, key), to: T.self)
        default:
            let bytes: [UInt8]
            if let copy = state.pointee.copy {
                bytes = copy
            } else {
                bytes = Array(lookup.raw)
                state.pointee.copy = bytes
            }
            return try RecordDecoding(bytes: bytes, offset: at, link: CodingPathLink(parent: nil, key: RecordFieldName(key))).decodeValue(type)
        }
    }

    private func mismatch(_ type: Any.Type, _ at: Int, _ key: String, _ expected: String) -> DecodingError {
        .typeMismatch(type, DecodingError.Context(codingPath: [RecordFieldName(key)],
                                                  debugDescription: "expected \(expected), found \(RecordBytes.kind(tag(at)))"))
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

extension RecordDecoder {
    /// The record in `bytes` as a `T`: through `read` (a `RecordReadable` type's
    /// `init(record:)`) when given, else through `init(from:)`.
    func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], reading read: RecordReading<T>?) throws -> T {
        guard let read else { return try decode(type, from: bytes) }
        return try bytes.withUnsafeBytes { raw in try RecordReader.read(raw) { try read.read($0) } }
    }

    /// The record in `bytes` read through `T`'s `init(record:)`, as a repository reads it
    /// (the fuzz targets' way in).
    package func decode<T: RecordReadable>(reading type: T.Type, from bytes: [UInt8]) throws -> T {
        try decode(type, from: bytes, reading: ReadableRecordReading<T>())
    }

    /// `init(record:)` of `type` as a `RecordReading` of `R`, when `type` is `R` and
    /// conforms to `RecordReadable` (found once per type: `RecordShape`).
    static func reading<R>(_ type: R.Type) -> RecordReading<R>? {
        guard let readable = type as? any RecordReadable.Type else { return nil }
        func reading<T: RecordReadable>(_ type: T.Type) -> AnyObject { ReadableRecordReading<T>() }
        return reading(readable) as? RecordReading<R>
    }
}

/// How a repository reads its records of `Record` from a `RecordReader`: a
/// `RecordReadable` type's `init(record:)` (`ReadableRecordReading`), found once per type.
/// A class called through its table, not a closure kept as `Any` and cast back to its
/// function type: such a closure was called through four reabstraction thunks, and a
/// record's read cost 252 instructions beside `init(record:)` itself, 142 through this
/// class (records-sort-text's profile).
@usableFromInline
class RecordReading<Record>: @unchecked Sendable {
    @usableFromInline init() {}

    /// The record `reader` holds. (Only the subclass is ever made.)
    @usableFromInline func read(_ reader: borrowing RecordReader) throws -> Record {
        preconditionFailure("RecordReading is made only as ReadableRecordReading")
    }
}

/// `T.init(record:)` as a `RecordReading`.
@usableFromInline
final class ReadableRecordReading<T: RecordReadable>: RecordReading<T>, @unchecked Sendable {
    @usableFromInline override init() {}

    @usableFromInline override func read(_ reader: borrowing RecordReader) throws -> T { try T(record: reader) }
}
