// Decodes record bytes (RecordValue.swift, FORMAT.md "Record encoding") into a `Codable`
// value, reading straight from the bytes: one pass checks the whole record (RecordValue.R1 of
// RecordValue.swift), then containers find their fields in a table of offsets
// (RecordBytes.swift; the field after the last one found is tried first) and primitives
// are read where they lie, with no intermediate tree of values.
// A missing field reads as nil for optionals (so types may gain optional fields); a wrong
// shape or a number out of range is a `DecodingError` naming the coding path.
//
// Invariants:
//  RecordDecoder.D1. Nothing is decoded from bytes that `RecordBytes.validate` has not accepted, so
//      every offset a container holds starts a well-formed value inside the buffer, and a
//      string is copied without checking its UTF-8 again (`RecordBytes.validatedString`).
//      The bytes are often read where they lie, in a page of the mapped data file or in a
//      memtable, so they must not change between the check and the read: a memtable's bytes
//      never change, and no page a snapshot can reach is rewritten while it is pinned
//      (another program writing into a live store's file is outside this guarantee).
//  RecordDecoder.D2. A field name that occurs twice (no encoder writes that) reads as its last value.
import StrataContexts
import Foundation
import StrataCodec

/// Decodes record bytes into `Decodable` values.
public struct RecordDecoder {
    public init() {}

    /// The value of type `T` in `bytes`. Throws `RecordError.malformed` for bad bytes and
    /// `DecodingError` when they hold a different shape.
    public func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        let (root, fields) = try RecordBytes.validateRecord(bytes)
        return try RecordDecoding(bytes: bytes, offset: root, rootFields: fields).decodeValue(type)
    }
}

struct RecordDecoding: Decoder {
    let bytes: [UInt8]
    /// Where this value's tag lies.
    let offset: Int
    /// Where this value lies: below the root, the step of the coding path that leads to
    /// it (a `CodingPathLink`, a chain put together into a path only when asked for: an
    /// error); at the root, nil or the root's field table when validation made one (a
    /// `RecordFields`). One reference either way, so a decoder is three words and fits an
    /// existential's inline buffer when it is handed to `init(from:)`.
    private let place: AnyObject?
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(bytes: [UInt8], offset: Int, link: CodingPathLink? = nil) {
        self.bytes = bytes
        self.offset = offset
        self.place = link
    }

    /// A decoder of the root value, with its field table.
    init(bytes: [UInt8], offset: Int, rootFields: RecordFields?) {
        self.bytes = bytes
        self.offset = offset
        self.place = rootFields
    }

    var link: CodingPathLink? { place as? CodingPathLink }

    var codingPath: [any CodingKey] { link?.path ?? [] }

    private var tag: RecordBytes.Tag { RecordBytes.tag(bytes, offset) }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        // Most values decoded here are structs: identifier comparisons spare them the
        // dozen dynamic type tests of `decodePrimitive`, and keeping those in a function
        // of their own spares them the run-time metadata of its optionals.
        guard ObjectIdentifier(type) == ObjectIdentifier(Data.self) || isPrimitive(type) else { return try T(from: self) }
        return try decodeLeaf(type)
    }

    /// A primitive value or `Data`.
    @inline(never)
    private func decodeLeaf<T: Decodable>(_ type: T.Type) throws -> T {
        if ObjectIdentifier(type) == ObjectIdentifier(Data.self) {
            guard tag == .bytes else { throw mismatch(type, "bytes") }
            return Data(bytes[try RecordBytes.run(bytes, offset)]) as! T
        }
        if let primitive = try decodePrimitive(type) { return primitive }
        return try T(from: self)
    }

    /// The value as a primitive type, or nil when `type` is not one.
    private func decodePrimitive<T>(_ type: T.Type) throws -> T? {
        let result: Any? = switch type {
        case is Bool.Type: try bool()
        case is String.Type: try string()
        case is Double.Type: try double()
        case is Float.Type: Float(try double())
        case is Int.Type: try integer(Int.self)
        case is Int8.Type: try integer(Int8.self)
        case is Int16.Type: try integer(Int16.self)
        case is Int32.Type: try integer(Int32.self)
        case is Int64.Type: try integer(Int64.self)
        case is UInt.Type: try integer(UInt.self)
        case is UInt8.Type: try integer(UInt8.self)
        case is UInt16.Type: try integer(UInt16.self)
        case is UInt32.Type: try integer(UInt32.self)
        case is UInt64.Type: try integer(UInt64.self)
        default: nil
        }
        return result.map { $0 as! T }
    }

    func bool() throws -> Bool {
        switch tag {
        case .isTrue: true
        case .isFalse: false
        default: throw mismatch(Bool.self, "a Boolean")
        }
    }

    func string() throws -> String {
        guard tag == .string else { throw mismatch(String.self, "a string") }
        let run = try RecordBytes.run(bytes, offset)
        return bytes.withUnsafeBytes { RecordBytes.validatedString(UnsafeRawBufferPointer(rebasing: $0[run])) }
    }

    func integer<I: FixedWidthInteger>(_ target: I.Type) throws -> I {
        var reader = ByteReader(bytes, start: offset + 1)
        let converted: I?
        switch tag {
        case .int:
            let zigzag = try reader.readVarint()
            converted = I(exactly: Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1))
        case .uint: converted = I(exactly: try reader.readVarint())
        default: throw mismatch(target, "an integer")
        }
        guard let converted else { throw mismatch(target, "an integer that fits") }
        return converted
    }

    func double() throws -> Double {
        var reader = ByteReader(bytes, start: offset + 1)
        switch tag {
        case .double: return Double(bitPattern: try reader.readUInt64())
        case .int: return Double(try integer(Int64.self))
        case .uint: return Double(try integer(UInt64.self))
        default: throw mismatch(Double.self, "a number")
        }
    }

    var isNull: Bool { tag == .null }

    func mismatch(_ type: Any.Type, _ expected: String) -> DecodingError {
        .typeMismatch(type, DecodingError.Context(codingPath: codingPath,
                                                  debugDescription: "expected \(expected), found \(RecordBytes.kind(bytes, offset))"))
    }

    /// The value at `offset` one level down, at `key`.
    func child(_ offset: Int, key: any CodingKey) -> RecordDecoding {
        RecordDecoding(bytes: bytes, offset: offset, link: CodingPathLink(parent: link, key: key))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(try keyedContainer(type))
    }

    /// The value's fields, read by `Key`s.
    func keyedContainer<Key: CodingKey>(_ type: Key.Type) throws -> KeyedRecordDecoding<Key> {
        guard tag == .keyed else { throw mismatch([String: Any].self, "a keyed value") }
        if let fields = place as? RecordFields { return KeyedRecordDecoding<Key>(fields: fields) }
        return KeyedRecordDecoding<Key>(fields: try RecordBytes.fields(self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard tag == .array else { throw mismatch([Any].self, "an array") }
        var reader = ByteReader(bytes, start: offset + 1)
        let count = try reader.readLength(limit: reader.remaining)
        return UnkeyedRecordDecoding(decoder: self, count: count, position: reader.offset)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleRecordDecoding(decoder: self)
    }
}

struct KeyedRecordDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    /// The fields and the value's decoder, in one reference: a container is copied for
    /// every field it reads.
    let fields: RecordFields

    var decoder: RecordDecoding { fields.decoder }

    var codingPath: [any CodingKey] { decoder.codingPath }

    var allKeys: [Key] {
        (0..<fields.count).compactMap { Key(stringValue: String(decoding: fields.bytes[fields[$0].name], as: UTF8.self)) }
    }

    /// Where the value of `key` lies (the last field of that name: RecordDecoder.D2), or nil.
    private func offset(_ key: Key) -> Int? {
        fields.valueOffset(of: key.stringValue)
    }

    func contains(_ key: Key) -> Bool { offset(key) != nil }

    private func field(_ key: Key) throws -> RecordDecoding {
        decoder.child(try valueOffset(key), key: key)
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        guard let offset = offset(key) else { return true }
        return RecordBytes.tag(fields.bytes, offset) == .null
    }

    /// Where the value of `key` lies; throws `keyNotFound` when there is none.
    private func valueOffset(_ key: Key) throws -> Int {
        guard let offset = offset(key) else {
            throw DecodingError.keyNotFound(key, DecodingError.Context(codingPath: codingPath, debugDescription: "no field \"\(key.stringValue)\""))
        }
        return offset
    }

    // The common primitives, read in place without the generic path's type tests and
    // without a decoder for the field; a value of another kind goes the decoder's way,
    // which throws the precise error.
    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        let at = try valueOffset(key)
        if let value = RecordBytes.string(fields.bytes, at) { return value }
        return try decoder.child(at, key: key).string()
    }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try field(key).bool() }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
        let at = try valueOffset(key)
        return try RecordBytes.integer(fields.bytes, at, as: Int.self) ?? decoder.child(at, key: key).integer(Int.self)
    }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
        let at = try valueOffset(key)
        return try RecordBytes.integer(fields.bytes, at, as: Int64.self) ?? decoder.child(at, key: key).integer(Int64.self)
    }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 {
        let at = try valueOffset(key)
        return try RecordBytes.integer(fields.bytes, at, as: UInt64.self) ?? decoder.child(at, key: key).integer(UInt64.self)
    }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try field(key).double() }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try field(key).decodeValue(type) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try field(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try field(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        try lenientDecoder(named: "super", key: nil)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        try lenientDecoder(named: key.stringValue, key: key)
    }

    /// The value of the field `name`, or an empty keyed value when there is none.
    private func lenientDecoder(named name: String, key: Key?) throws -> any Decoder {
        let link = key.map { CodingPathLink(parent: decoder.link, key: $0) } ?? decoder.link
        if let offset = fields.valueOffset(of: name) {
            return RecordDecoding(bytes: fields.bytes, offset: offset, link: link)
        }
        return RecordDecoding(bytes: RecordValue.keyed([]).encoded(), offset: 1, link: link)
    }
}

/// One step of a coding path: a key and the step above it.
final class CodingPathLink {
    let parent: CodingPathLink?
    let key: any CodingKey

    init(parent: CodingPathLink?, key: any CodingKey) {
        self.parent = parent
        self.key = key
    }

    /// The keys from the root down to this one.
    var path: [any CodingKey] {
        var keys: [any CodingKey] = []
        var link: CodingPathLink? = self
        while let step = link {
            keys.append(step.key)
            link = step.parent
        }
        return keys.reversed()
    }
}

struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "\(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}

struct UnkeyedRecordDecoding: UnkeyedDecodingContainer {
    let decoder: RecordDecoding
    let elementCount: Int
    /// Where the next element's tag lies.
    private var position: Int
    var currentIndex = 0

    init(decoder: RecordDecoding, count: Int, position: Int) {
        self.decoder = decoder
        self.elementCount = count
        self.position = position
    }

    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { elementCount }
    var isAtEnd: Bool { currentIndex >= elementCount }

    /// The next element, and moves past it.
    private mutating func next() throws -> RecordDecoding {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, DecodingError.Context(codingPath: codingPath, debugDescription: "the array has ended"))
        }
        let element = decoder.child(position, key: IndexKey(intValue: currentIndex))
        try skip()
        return element
    }

    /// Moves past the next element.
    private mutating func skip() throws {
        position = try RecordBytes.end(of: position, in: decoder.bytes)
        currentIndex += 1
    }

    // Strings and integers read in place, without a decoder (and a coding path step) for
    // each element; anything else goes the decoder's way, which throws the precise error.
    mutating func decode(_ type: String.Type) throws -> String {
        guard !isAtEnd, let value = RecordBytes.string(decoder.bytes, position) else { return try next().string() }
        try skip()
        return value
    }

    mutating func decode(_ type: Int.Type) throws -> Int { try integer(Int.self) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self) }

    private mutating func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        guard !isAtEnd, let value = RecordBytes.integer(decoder.bytes, position, as: type) else { return try next().integer(type) }
        try skip()
        return value
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, RecordBytes.tag(decoder.bytes, position) == .null else { return false }
        position += 1
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decodeValue(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }

    mutating func superDecoder() throws -> any Decoder { try next() }
}

struct SingleRecordDecoding: SingleValueDecodingContainer {
    let decoder: RecordDecoding
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.isNull }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(type) }
}
