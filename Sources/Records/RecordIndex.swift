// Secondary indexes: declared on a record type's key paths, kept in the same commit as the
// record, used by `fetch` for equality and range terms (FORMAT.md, "Records").
//
// Invariants:
//  X1. After any staged write through a repository, every declared index of the entity
//      holds exactly one entry per record (for a unique index: per value), built from the
//      record as it is now; an index declared later is built on first use in a writable
//      context and noted in the entity's manifest.
import StrataContexts
import Foundation
import StrataCodec

/// A value an index can order: its bytes sort as the values do.
public protocol IndexableValue: Sendable {
    /// Order-preserving bytes, self-delimiting so that an id can follow them.
    var indexBytes: [UInt8] { get }
}

extension String: IndexableValue {
    /// The UTF-8 of its canonical composition (NFC) with each zero byte escaped as
    /// `00 FF`, ended by `00 00`. Strings equal under `==` (canonically equivalent) get
    /// the same bytes, and the bytes sort as `<` orders strings.
    public var indexBytes: [UInt8] {
        // ASCII without zero bytes (most keys) is its own composition and needs no escape.
        let plain: [UInt8]? = utf8.withContiguousStorageIfAvailable { utf8 in
            for byte in utf8 where byte == 0 || byte >= 0x80 { return nil }
            return [UInt8](unsafeUninitializedCapacity: utf8.count + 2) { buffer, count in
                if let base = utf8.baseAddress { buffer.baseAddress!.update(from: base, count: utf8.count) }
                buffer[utf8.count] = 0
                buffer[utf8.count + 1] = 0
                count = utf8.count + 2
            }
        } ?? nil
        if let plain { return plain }
        let composed = utf8.allSatisfy { $0 < 0x80 } ? self : precomposedStringWithCanonicalMapping
        var bytes: [UInt8] = []
        bytes.reserveCapacity(composed.utf8.count + 2)
        for byte in composed.utf8 {
            bytes.append(byte)
            if byte == 0 { bytes.append(0xFF) }
        }
        bytes.append(0)
        bytes.append(0)
        return bytes
    }
}

extension Int: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

extension Int64: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

extension UInt64: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

// Narrower and unsigned integers index as their 64-bit counterparts (8 bytes), so an
// index keeps its bytes if a field's integer type is widened.
extension Int8: IndexableValue { public var indexBytes: [UInt8] { Int64(self).keyBytes } }
extension Int16: IndexableValue { public var indexBytes: [UInt8] { Int64(self).keyBytes } }
extension Int32: IndexableValue { public var indexBytes: [UInt8] { Int64(self).keyBytes } }
extension UInt8: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }
extension UInt16: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }
extension UInt32: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }
extension UInt: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }

extension Date: IndexableValue {
    /// Its `timeIntervalSinceReferenceDate` as a `Double` index value.
    public var indexBytes: [UInt8] { timeIntervalSinceReferenceDate.indexBytes }
}

extension IndexableValue where Self: RawRepresentable, RawValue: IndexableValue {
    /// An enum with raw values indexes as its raw value: declare
    /// `extension Status: IndexableValue {}` to index a `Status` field.
    public var indexBytes: [UInt8] { rawValue.indexBytes }
}

extension Bool: IndexableValue {
    public var indexBytes: [UInt8] { [self ? 1 : 0] }
}

extension Double: IndexableValue {
    /// IEEE 754 bits, sign bit flipped for positives and every bit for negatives; -0.0
    /// is written as 0.0, which it equals.
    public var indexBytes: [UInt8] {
        let bits = self == 0 ? 0 : bitPattern
        return UInt64(bits & (1 << 63) == 0 ? bits | (1 << 63) : ~bits).keyBytes
    }
}

extension UUID: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

extension Optional: IndexableValue where Wrapped: IndexableValue {
    /// nil sorts first.
    public var indexBytes: [UInt8] { map { [1] + $0.indexBytes } ?? [0] }
}

/// Values whose `==` and `<` agree with the order and equality of their index bytes.
protocol ExactIndexOrder {}
extension Int: ExactIndexOrder {}
extension Int64: ExactIndexOrder {}
extension UInt64: ExactIndexOrder {}
extension Int8: ExactIndexOrder {}
extension Int16: ExactIndexOrder {}
extension Int32: ExactIndexOrder {}
extension UInt8: ExactIndexOrder {}
extension UInt16: ExactIndexOrder {}
extension UInt32: ExactIndexOrder {}
extension UInt: ExactIndexOrder {}
extension Bool: ExactIndexOrder {}
extension String: ExactIndexOrder {}
extension Optional: ExactIndexOrder where Wrapped: ExactIndexOrder {}

/// A secondary index of `R`, declared in `R.indexes`: on one key path, or compound on two
/// (entries ordered by the first value, then the second).
public struct RecordIndex<R: Record>: Sendable {
    /// One indexed key path and what the planner knows of its value type.
    struct Component: Sendable {
        /// The indexed key path, as the predicate planner sees it.
        let keyPath: AnyKeyPath & Sendable
        /// The key path's last component ("title" for `\Todo.title`), for `explain`.
        let name: String
        /// A predicate constant's index bytes, or nil when it is not of the value type.
        let constantBytes: @Sendable (Any) -> [UInt8]?
        /// Whether the value type's `==` and `<` agree exactly with its index bytes
        /// (integers, `Bool`, `String`, optionals of them; not `Double` or `Date`, whose
        /// NaNs do not, nor enums), so the entries of a value are exactly the records
        /// `==` holds for.
        let isExact: Bool
        /// Whether ranges (`<`, `>=`, …) are exact too: not for strings, whose `<` in the
        /// standard library does not always agree with canonical order when a string is
        /// not in NFC (`"e\u{301}" < "\u{E9}x"` is false though `"e\u{301}" == "\u{E9}"`):
        /// a string range is read from the index in canonical order and evaluated.
        let rangesExactly: Bool
        /// Whether a `SortDescriptor` on the key path orders as the index does: an exact
        /// integer (a string sort compares in a locale's order by default).
        let sortsExactly: Bool

        init<V: IndexableValue>(_ keyPath: KeyPath<R, V> & Sendable, _ type: V.Type) {
            self.keyPath = keyPath
            name = RecordIndex.lastName(keyPath)
            constantBytes = RecordIndex.constantBytes(V.self)
            isExact = V.self is any ExactIndexOrder.Type
            rangesExactly = isExact && V.self != String.self && V.self != String?.self
            sortsExactly = isExact && V.self is any FixedWidthInteger.Type
        }
    }

    /// Reads a predicate constant's index bytes. The common value types get closures of
    /// their own: one made here for any `V` runs unspecialized (a metadata lookup and a
    /// generic cast each time, ~700 instructions more per term).
    fileprivate static func constantBytes<V: IndexableValue>(_ type: V.Type) -> @Sendable (Any) -> [UInt8]? {
        switch type {
        case is String.Type: { ($0 as? String)?.indexBytes }
        case is Int.Type: { ($0 as? Int)?.indexBytes }
        case is Int64.Type: { ($0 as? Int64)?.indexBytes }
        case is UInt64.Type: { ($0 as? UInt64)?.indexBytes }
        case is Double.Type: { ($0 as? Double)?.indexBytes }
        case is Date.Type: { ($0 as? Date)?.indexBytes }
        case is Bool.Type: { ($0 as? Bool)?.indexBytes }
        case is UUID.Type: { ($0 as? UUID)?.indexBytes }
        default: { ($0 as? V)?.indexBytes }
        }
    }

    /// The index's name: part of its keys, so keep it stable.
    public let name: String
    /// Whether two records may not share a value.
    public let isUnique: Bool
    /// The indexed key paths, in entry order.
    let components: [Component]
    /// Where this index's entries start: `RecordKeys.indexPrefix` of the entity and `name`.
    let keyPrefix: [UInt8]
    /// A record's value bytes (each component's index bytes, in order).
    @usableFromInline let bytes: @Sendable (R) -> [UInt8]
    let render: @Sendable (R) -> String

    private init(name: String, isUnique: Bool, components: [Component], bytes: @escaping @Sendable (R) -> [UInt8],
                 render: @escaping @Sendable (R) -> String) {
        self.name = name
        self.isUnique = isUnique
        self.components = components
        keyPrefix = RecordKeys.indexPrefix(entity: RecordTypeCache.entityName(of: R.self), index: name)
        self.bytes = bytes
        self.render = render
    }

    /// The last component of a key path's description: `\Todo.title` is "title".
    static func lastName(_ keyPath: AnyKeyPath) -> String {
        let text = "\(keyPath)"
        return String(text.split(separator: ".").last ?? Substring(text))
    }

    /// An index on `keyPath` (named after it unless `name` is given).
    public static func index<V: IndexableValue>(_ keyPath: KeyPath<R, V> & Sendable, name: String? = nil,
                                                unique: Bool = false) -> RecordIndex<R> {
        let component = Component(keyPath, V.self)
        return RecordIndex(name: name ?? component.name, isUnique: unique, components: [component],
                    bytes: { $0[keyPath: keyPath].indexBytes }, render: { "\($0[keyPath: keyPath])" })
    }

    /// A compound index on `first`, then `second` (named "first+second" unless `name` is
    /// given). A query with `first == constant` reads only that value's entries, ordered by
    /// `second`: a range on `second` and a sort on it (`SortDescriptor(\.second)`) are
    /// read from the index, as is a range on `first` alone.
    public static func index<A: IndexableValue, B: IndexableValue>(_ first: KeyPath<R, A> & Sendable,
                                                                   _ second: KeyPath<R, B> & Sendable,
                                                                   name: String? = nil, unique: Bool = false) -> RecordIndex<R> {
        let components = [Component(first, A.self), Component(second, B.self)]
        return RecordIndex(name: name ?? components[0].name + "+" + components[1].name, isUnique: unique, components: components,
                    bytes: { $0[keyPath: first].indexBytes + $0[keyPath: second].indexBytes },
                    render: { "(\($0[keyPath: first]), \($0[keyPath: second]))" })
    }
}

extension Record {
    /// The secondary indexes of this type (none by default).
    public static var indexes: [RecordIndex<Self>] { [] }
}

extension RecordKeys {
    static let indexTag = UInt8(ascii: "i")
    static let manifestTag = UInt8(ascii: "m")

    static func varint(_ value: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var rest = UInt64(value)
        repeat {
            bytes.append(UInt8(rest & 0x7F) | (rest > 0x7F ? 0x80 : 0))
            rest >>= 7
        } while rest > 0
        return bytes
    }

    static func named(_ tag: UInt8, _ parts: [String]) -> [UInt8] {
        var key = [reservedByte, tag]
        for part in parts {
            let bytes = Array(part.utf8)
            key += varint(bytes.count) + bytes
        }
        return key
    }

    /// The keys of index `index` of `entity`: this prefix, the value's index bytes, then
    /// (non-unique indexes) the id's key bytes.
    static func indexPrefix(entity: String, index: String) -> [UInt8] { named(indexTag, [entity, index]) }

    /// Where the names of an entity's built indexes are kept.
    static func manifest(entity: String) -> [UInt8] { named(manifestTag, [entity]) }

    /// The entity part of a reserved key with `tag` (`0xFE`, the tag, the entity's name),
    /// or nil when `key` is not one.
    static func entityPrefix(of key: [UInt8], tag: UInt8) -> ArraySlice<UInt8>? {
        guard let name = entityNameRange(of: key, tag: tag) else { return nil }
        return key[0..<name.upperBound]
    }

    /// The record-key prefix of the entity an index entry's key names.
    static func recordPrefix(ofIndexKey key: [UInt8]) -> [UInt8]? {
        guard let name = entityNameRange(of: key, tag: indexTag),
              let text = String(validating: key[name], as: UTF8.self) else { return nil }
        return prefix(entity: text)
    }

    /// Where the entity name lies in a reserved key with `tag` (`0xFE`, the tag, a varint
    /// length, the name), or nil when `key` is not one.
    private static func entityNameRange(of key: [UInt8], tag: UInt8) -> Range<Int>? {
        guard key.count > 2, key[0] == reservedByte, key[1] == tag else { return nil }
        var reader = ByteReader(key, start: 2)
        guard let length = try? reader.readVarint(), length <= UInt64(reader.remaining) else { return nil }
        return reader.offset..<(reader.offset + Int(length))
    }

    /// The entity name of a record-key prefix made by `prefix(entity:)`.
    static func entityName(ofPrefix prefix: [UInt8]) -> String {
        entityNameRange(of: prefix, tag: recordTag).map { String(decoding: prefix[$0], as: UTF8.self) } ?? ""
    }
}
