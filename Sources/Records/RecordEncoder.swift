// Encodes a `Codable` value into the record encoding (RecordValue.swift). `Data` becomes
// bytes; every other type encodes itself through the usual containers. Values are written
// straight into bytes (RecordStreamEncoder.swift); the node tree here is for values that
// encode themselves out of order.
import StrataContexts
import Foundation

/// Encodes `Encodable` values to record bytes.
public struct RecordEncoder {
    public init() {}

    /// The record bytes of `value`. Throws `EncodingError` when the value refuses.
    public func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        // Straight into bytes (RecordStreamEncoder.swift); through the node tree when the
        // value encodes itself out of order (RecordStreamEncoder.S1).
        let state = StreamState()
        state.writer.write(RecordValue.formatVersion)
        do {
            try state.write(value, codingPath: [])
            state.close(above: 0)
            if !state.fellBack { return state.writer.bytes }
        } catch is StreamFallback {}
        return try encodeThroughTree(value)
    }

    /// The record bytes of `value`, built as a tree of nodes first.
    func encodeThroughTree<T: Encodable>(_ value: T) throws -> [UInt8] {
        let node = EncodingNode()
        try node.store(value, codingPath: [])
        return node.value.encoded()
    }
}

/// A value being built; containers write into it.
final class EncodingNode {
    enum Content {
        case empty
        case single(RecordValue)
        case keyed([(key: String, node: EncodingNode)])
        case unkeyed([EncodingNode])
    }

    var content = Content.empty

    var value: RecordValue {
        switch content {
        case .empty: .keyed([])
        case let .single(value): value
        case let .keyed(fields): .keyed(fields.map { ($0.key, $0.node.value) })
        case let .unkeyed(nodes): .array(nodes.map(\.value))
        }
    }

    /// Stores `value` here: primitives directly, others by encoding themselves.
    func store<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws {
        if let data = value as? Data {
            content = .single(.bytes(Array(data)))
        } else {
            try value.encode(to: RecordEncoding(node: self, codingPath: codingPath))
        }
    }

    func child(forKey key: String) -> EncodingNode {
        let node = EncodingNode()
        var fields: [(key: String, node: EncodingNode)] = []
        if case let .keyed(existing) = content { fields = existing }
        if let index = fields.firstIndex(where: { $0.key == key }) { fields[index].node = node } else { fields.append((key, node)) }
        content = .keyed(fields)
        return node
    }

    func appendChild() -> EncodingNode {
        let node = EncodingNode()
        var nodes: [EncodingNode] = []
        if case let .unkeyed(existing) = content { nodes = existing }
        nodes.append(node)
        content = .unkeyed(nodes)
        return node
    }
}

struct RecordEncoding: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .keyed = node.content {} else { node.content = .keyed([]) }
        return KeyedEncodingContainer(KeyedRecordEncoding<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .unkeyed = node.content {} else { node.content = .unkeyed([]) }
        return UnkeyedRecordEncoding(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleRecordEncoding(node: node, codingPath: codingPath)
    }
}

/// Whether `type` is one `primitive(_:)` stores as it is (the decoder reads the same ones
/// itself): identifier comparisons, far cheaper than the casts that fail for every other type.
func isPrimitive<T>(_ type: T.Type) -> Bool {
    // Identifiers, not `==` on metatypes, which would look up `Optional<Any.Type>`'s
    // metadata at run time for every comparison.
    switch ObjectIdentifier(type) {
    case ObjectIdentifier(Bool.self), ObjectIdentifier(String.self), ObjectIdentifier(Double.self), ObjectIdentifier(Float.self),
         ObjectIdentifier(Int.self), ObjectIdentifier(Int8.self), ObjectIdentifier(Int16.self), ObjectIdentifier(Int32.self),
         ObjectIdentifier(Int64.self), ObjectIdentifier(UInt.self), ObjectIdentifier(UInt8.self), ObjectIdentifier(UInt16.self),
         ObjectIdentifier(UInt32.self), ObjectIdentifier(UInt64.self):
        true
    default:
        false
    }
}

/// The primitive values the format stores as they are.
func primitive(_ value: Any) -> RecordValue? {
    switch value {
    case let value as Bool: .bool(value)
    case let value as String: .string(value)
    case let value as Double: .double(value)
    case let value as Float: .double(Double(value))
    case let value as Int: .int(Int64(value))
    case let value as Int8: .int(Int64(value))
    case let value as Int16: .int(Int64(value))
    case let value as Int32: .int(Int64(value))
    case let value as Int64: .int(value)
    case let value as UInt: .uint(UInt64(value))
    case let value as UInt8: .uint(UInt64(value))
    case let value as UInt16: .uint(UInt64(value))
    case let value as UInt32: .uint(UInt64(value))
    case let value as UInt64: .uint(value)
    default: nil
    }
}

struct KeyedRecordEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    mutating func encodeNil(forKey key: Key) throws { node.child(forKey: key.stringValue).content = .single(.null) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        let child = node.child(forKey: key.stringValue)
        if let primitive = primitive(value) { child.content = .single(primitive) } else {
            try child.store(value, codingPath: codingPath + [key])
        }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type,
                                                        forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let child = node.child(forKey: key.stringValue)
        return RecordEncoding(node: child, codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        RecordEncoding(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key]).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        RecordEncoding(node: node.child(forKey: "super"), codingPath: codingPath)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        RecordEncoding(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key])
    }
}

struct UnkeyedRecordEncoding: UnkeyedEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    var count: Int {
        if case let .unkeyed(nodes) = node.content { return nodes.count }
        return 0
    }

    mutating func encodeNil() throws { node.appendChild().content = .single(.null) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = node.appendChild()
        if let primitive = primitive(value) { child.content = .single(primitive) } else {
            try child.store(value, codingPath: codingPath)
        }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        RecordEncoding(node: node.appendChild(), codingPath: codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        RecordEncoding(node: node.appendChild(), codingPath: codingPath).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { RecordEncoding(node: node.appendChild(), codingPath: codingPath) }
}

struct SingleRecordEncoding: SingleValueEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { node.content = .single(.null) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        if let primitive = primitive(value) { node.content = .single(primitive) } else {
            try node.store(value, codingPath: codingPath)
        }
    }
}
