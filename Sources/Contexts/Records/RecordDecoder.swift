// Decodes record bytes (RecordValue.swift) into a `Codable` value. A missing field reads
// as nil for optionals (so types may gain optional fields), a wrong shape or a number out
// of range is a `DecodingError` naming the coding path.
import Foundation

/// Decodes record bytes into `Decodable` values.
public struct RecordDecoder {
    public init() {}

    /// The value of type `T` in `bytes`. Throws `RecordError.malformed` for bad bytes and
    /// `DecodingError` when they hold a different shape.
    public func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try RecordDecoding(value: try RecordValue.decode(bytes), codingPath: []).decodeValue(type)
    }
}

struct RecordDecoding: Decoder {
    let value: RecordValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if type == Data.self {
            guard case let .bytes(bytes) = value else { throw mismatch(type, "bytes") }
            return Data(bytes) as! T
        }
        if let primitive = try decodePrimitive(type) { return primitive }
        return try T(from: self)
    }

    /// `value` as a primitive type, or nil when `type` is not one.
    private func decodePrimitive<T>(_ type: T.Type) throws -> T? {
        func integer<I: FixedWidthInteger>(_ target: I.Type) throws -> I {
            let converted: I? = switch value {
            case let .int(number): I(exactly: number)
            case let .uint(number): I(exactly: number)
            default: throw mismatch(type, "an integer")
            }
            guard let converted else { throw mismatch(type, "an integer that fits") }
            return converted
        }
        let result: Any? = switch type {
        case is Bool.Type:
            try { () throws -> Bool in
                guard case let .bool(flag) = value else { throw mismatch(type, "a Boolean") }
                return flag
            }()
        case is String.Type:
            try { () throws -> String in
                guard case let .string(text) = value else { throw mismatch(type, "a string") }
                return text
            }()
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

    private func double() throws -> Double {
        switch value {
        case let .double(number): return number
        case let .int(number): return Double(number)
        case let .uint(number): return Double(number)
        default: throw mismatch(Double.self, "a number")
        }
    }

    func mismatch(_ type: Any.Type, _ expected: String) -> DecodingError {
        .typeMismatch(type, DecodingError.Context(codingPath: codingPath, debugDescription: "expected \(expected), found \(value.kind)"))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case let .keyed(fields) = value else { throw mismatch([String: Any].self, "a keyed value") }
        var byKey: [String: RecordValue] = [:]
        for (key, field) in fields { byKey[key] = field }
        return KeyedDecodingContainer(KeyedRecordDecoding<Key>(fields: byKey, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case let .array(values) = value else { throw mismatch([Any].self, "an array") }
        return UnkeyedRecordDecoding(values: values, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleRecordDecoding(decoder: self)
    }
}

extension RecordValue {
    /// What kind of value this is, for messages.
    var kind: String {
        switch self {
        case .null: "nil"
        case .bool: "a Boolean"
        case .int, .uint: "an integer"
        case .double: "a floating-point number"
        case .string: "a string"
        case .bytes: "bytes"
        case .array: "an array"
        case .keyed: "a keyed value"
        }
    }
}

struct KeyedRecordDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let fields: [String: RecordValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { fields.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { fields[key.stringValue] != nil }

    private func field(_ key: Key) throws -> RecordValue {
        guard let value = fields[key.stringValue] else {
            throw DecodingError.keyNotFound(key, DecodingError.Context(codingPath: codingPath, debugDescription: "no field \"\(key.stringValue)\""))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool { (fields[key.stringValue] ?? .null) == .null }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try RecordDecoding(value: try field(key), codingPath: codingPath + [key]).decodeValue(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try RecordDecoding(value: try field(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try RecordDecoding(value: try field(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        RecordDecoding(value: fields["super"] ?? .keyed([]), codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        RecordDecoding(value: fields[key.stringValue] ?? .keyed([]), codingPath: codingPath + [key])
    }
}

struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "\(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}

struct UnkeyedRecordDecoding: UnkeyedDecodingContainer {
    let values: [RecordValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(values: [RecordValue], codingPath: [any CodingKey]) {
        self.values = values
        self.codingPath = codingPath
    }

    var count: Int? { values.count }
    var isAtEnd: Bool { currentIndex >= values.count }

    private mutating func next() throws -> RecordDecoding {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, DecodingError.Context(codingPath: codingPath, debugDescription: "the array has ended"))
        }
        defer { currentIndex += 1 }
        return RecordDecoding(value: values[currentIndex], codingPath: codingPath + [IndexKey(intValue: currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, values[currentIndex] == .null else { return false }
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

    func decodeNil() -> Bool { decoder.value == .null }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(type) }
}
