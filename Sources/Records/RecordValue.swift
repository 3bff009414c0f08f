// The record encoding (FORMAT.md, "Records"): a `Codable` value as a small self-describing
// tree of tagged values, written after a version byte. Keyed containers keep their field
// names, so a type that gains an optional field still reads old records, and a decoder
// can say which field is wrong.
//
// Invariants:
//  RecordValue.R1. Decoding is total: any bytes give a value or `RecordError.malformed` with the
//      offset (`RecordBytes.validate` in RecordDecoder.swift checks a record before any
//      of it is read); nesting is at most `maxDepth` deep and no count is trusted beyond
//      the bytes that remain, so hostile input cannot trap, hang or allocate much.
//  RecordValue.R2. A value tree has exactly one encoding (minimal varints, fields in the order they
//      were encoded), so `decode(encode(v)) == v`, and a decoded record re-encodes to the
//      same bytes unless its type encodes in an unstable order (a `Dictionary` field).
// Thread-safety: values are immutable.
import StrataContexts
import StrataCodec

/// A record's value tree, as the encoder builds it before writing its bytes.
indirect enum RecordValue: Equatable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case string(String)
    case bytes([UInt8])
    case array([RecordValue])
    case keyed([(key: String, value: RecordValue)])

    static func == (lhs: RecordValue, rhs: RecordValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case let (.bool(a), .bool(b)): a == b
        case let (.int(a), .int(b)): a == b
        case let (.uint(a), .uint(b)): a == b
        case let (.double(a), .double(b)): a.bitPattern == b.bitPattern
        case let (.string(a), .string(b)): a == b
        case let (.bytes(a), .bytes(b)): a == b
        case let (.array(a), .array(b)): a == b
        case let (.keyed(a), .keyed(b)): a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// The format version written first (FORMAT.md, "Records").
    static let formatVersion: UInt8 = 1
    /// The deepest nesting a record may have.
    static let maxDepth = 64

    private typealias Tag = RecordBytes.Tag

    /// The bytes of this value, version byte first.
    func encoded() -> [UInt8] {
        var writer = ByteWriter()
        writer.write(Self.formatVersion)
        write(into: &writer)
        return writer.bytes
    }

    private func write(into writer: inout ByteWriter) {
        switch self {
        case .null: writer.write(Tag.null.rawValue)
        case let .bool(value): writer.write(value ? Tag.isTrue.rawValue : Tag.isFalse.rawValue)
        case let .int(value):
            writer.write(Tag.int.rawValue)
            writer.writeVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
        case let .uint(value):
            writer.write(Tag.uint.rawValue)
            writer.writeVarint(value)
        case let .double(value):
            writer.write(Tag.double.rawValue)
            writer.write(value.bitPattern)
        case let .string(value):
            writer.write(Tag.string.rawValue)
            let utf8 = Array(value.utf8)
            writer.writeVarint(UInt64(utf8.count))
            writer.write(contentsOf: utf8)
        case let .bytes(value):
            writer.write(Tag.bytes.rawValue)
            writer.writeVarint(UInt64(value.count))
            writer.write(contentsOf: value)
        case let .array(values):
            writer.write(Tag.array.rawValue)
            writer.writeVarint(UInt64(values.count))
            for value in values { value.write(into: &writer) }
        case let .keyed(fields):
            writer.write(Tag.keyed.rawValue)
            writer.writeVarint(UInt64(fields.count))
            for (key, value) in fields {
                let utf8 = Array(key.utf8)
                writer.writeVarint(UInt64(utf8.count))
                writer.write(contentsOf: utf8)
                value.write(into: &writer)
            }
        }
    }
}
