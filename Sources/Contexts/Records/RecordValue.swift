// The record encoding (FORMAT.md, "Records"): a `Codable` value as a small self-describing
// tree of tagged values, written after a version byte. Keyed containers keep their field
// names, so a type that gains an optional field still reads old records, and a decoder
// can say which field is wrong.
//
// Invariants:
//  R1. Decoding is total: any bytes give a value or `RecordError.malformed` with the
//      offset; nesting is at most `maxDepth` deep and no count is trusted beyond the bytes
//      that remain, so hostile input cannot trap, hang or allocate much.
//  R2. A value tree has exactly one encoding (minimal varints, fields in the order they
//      were encoded), so `decode(encode(v)) == v`, and a decoded record re-encodes to the
//      same bytes unless its type encodes in an unstable order (a `Dictionary` field).
// Thread-safety: values are immutable.
import StrataCodec

/// A decoded record before it becomes a Swift value.
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

    private enum Tag: UInt8 {
        case null = 0, isFalse = 1, isTrue = 2, int = 3, uint = 4, double = 5, string = 6, bytes = 7, array = 8, keyed = 9
    }

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

    /// Decodes exactly `bytes` (R1). Throws `RecordError.malformed` or `.unsupportedVersion`.
    static func decode(_ bytes: [UInt8]) throws(RecordError) -> RecordValue {
        var reader = ByteReader(bytes)
        do {
            let version = try reader.readUInt8()
            guard version == formatVersion else { throw RecordError.unsupportedVersion(found: version, supported: formatVersion) }
            let value = try read(&reader, depth: 0)
            guard reader.isAtEnd else { throw RecordError.malformed(offset: reader.offset, reason: "bytes after the record") }
            return value
        } catch let error as RecordError {
            throw error
        } catch let error as CodecError {
            throw .malformed(offset: reader.offset, reason: "\(error)")
        } catch {
            throw .malformed(offset: reader.offset, reason: "\(error)")
        }
    }

    private static func read(_ reader: inout ByteReader, depth: Int) throws -> RecordValue {
        guard depth < maxDepth else { throw RecordError.malformed(offset: reader.offset, reason: "nested deeper than \(maxDepth)") }
        let tagOffset = reader.offset
        guard let tag = Tag(rawValue: try reader.readUInt8()) else {
            throw RecordError.malformed(offset: tagOffset, reason: "unknown value tag")
        }
        switch tag {
        case .null: return .null
        case .isFalse: return .bool(false)
        case .isTrue: return .bool(true)
        case .int:
            let zigzag = try reader.readVarint()
            return .int(Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1))
        case .uint: return .uint(try reader.readVarint())
        case .double: return .double(Double(bitPattern: try reader.readUInt64()))
        case .string:
            let utf8 = try reader.readBytes(count: try reader.readLength(limit: reader.remaining))
            guard let text = String(validating: utf8, as: UTF8.self) else {
                throw RecordError.malformed(offset: tagOffset, reason: "a string that is not UTF-8")
            }
            return .string(text)
        case .bytes: return .bytes(try reader.readBytes(count: try reader.readLength(limit: reader.remaining)))
        case .array:
            // Every element takes at least one byte: a larger count cannot be honest.
            let count = try reader.readLength(limit: reader.remaining)
            var values: [RecordValue] = []
            values.reserveCapacity(count)
            for _ in 0..<count { values.append(try read(&reader, depth: depth + 1)) }
            return .array(values)
        case .keyed:
            let count = try reader.readLength(limit: reader.remaining / 2)
            var fields: [(key: String, value: RecordValue)] = []
            fields.reserveCapacity(count)
            for _ in 0..<count {
                let keyOffset = reader.offset
                let utf8 = try reader.readBytes(count: try reader.readLength(limit: reader.remaining))
                guard let key = String(validating: utf8, as: UTF8.self) else {
                    throw RecordError.malformed(offset: keyOffset, reason: "a field name that is not UTF-8")
                }
                fields.append((key, try read(&reader, depth: depth + 1)))
            }
            return .keyed(fields)
        }
    }
}
