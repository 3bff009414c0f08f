// Encodes a `Codable` value straight into record bytes (RecordValue.swift), with no tree of
// nodes: containers write as the value encodes itself, each keeping one reserved byte for
// its count, patched when a write to an outer container (or the end) closes it.
//
// Invariants:
//  RecordStreamEncoder.S1. The bytes are exactly those `RecordValue.encoded()` writes for the same value (RecordValue.R2):
//      anything this encoder cannot write in order — a container written to after an inner
//      one was started and left, a key encoded twice, a container asked for twice in
//      different kinds, a super encoder — makes it give up (`fellBack`), and the caller
//      encodes the value again through the node tree.
import StrataContexts
import Foundation
import StrataCodec

/// What the streaming encoder could not do in order; the tree encoder does it.
struct StreamFallback: Error {}

/// The bytes being written and the containers still open, innermost last.
final class StreamState {
    // Exclusivity is not checked on these: one encoder on one thread owns the state, and
    // the checks cost more than the writes (eight per field).
    @exclusivity(unchecked) var writer = ByteWriter()
    /// Open containers: where their count byte lies, how many elements they hold, their id.
    @exclusivity(unchecked) private var open: [(slot: Int, count: Int, id: Int)] = []
    /// The keys each open container holds (empty for unkeyed ones), to catch a key
    /// encoded twice.
    @exclusivity(unchecked) private var names: [[String]] = []
    private var nextID = 0
    /// Set when a non-throwing method met something out of order.
    var fellBack = false

    /// Starts a container at the current position; returns its id.
    func startContainer(keyed: Bool) -> Int {
        writer.write(keyed ? RecordBytes.Tag.keyed.rawValue : RecordBytes.Tag.array.rawValue)
        let slot = writer.bytes.count
        writer.write(UInt8(0))
        nextID += 1
        open.append((slot, 0, nextID))
        var keys: [String] = []
        if keyed { keys.reserveCapacity(8) }
        names.append(keys)
        return nextID
    }

    /// Before a write into container `id`: closes every container inside it. Throws when
    /// `id` is closed already, or (`name`) already holds that key.
    func enter(_ id: Int, name: String? = nil) throws(StreamFallback) {
        // Almost always the innermost container.
        var position = open.count - 1
        while position >= 0 && open[position].id != id { position -= 1 }
        guard position >= 0 else { throw fallBack() }
        close(above: position + 1)
        open[position].count += 1
        if let name {
            if names[position].contains(name) { throw fallBack() }
            names[position].append(name)
        }
    }

    /// The id of a container that could not be started in order: none (writes to it fall
    /// back).
    func failedID() -> Int {
        fellBack = true
        return -1
    }

    /// A super encoder: where it writes is the tree encoder's business, so streaming
    /// gives up (what this one writes is thrown away).
    func superEncoder(_ codingPath: [any CodingKey]) -> any Encoder {
        fellBack = true
        return StreamEncoding(state: self, slot: StreamSlot(), codingPath: codingPath)
    }

    /// Gives up on streaming: marked here too, so that a value which swallows the error
    /// (`try?` in its `encode(to:)`) still ends in the tree encoder.
    func fallBack() -> StreamFallback {
        fellBack = true
        return StreamFallback()
    }

    /// How many containers are open.
    var depth: Int { open.count }

    /// Closes the containers from `depth` inward, patching their counts.
    func close(above depth: Int) {
        while open.count > depth {
            let container = open.removeLast()
            names.removeLast()
            if container.count < 0x80 {
                writer.bytes[container.slot] = UInt8(container.count)
            } else {
                var varint = ByteWriter()
                varint.writeVarint(UInt64(container.count))
                writer.bytes.replaceSubrange(container.slot..<(container.slot + 1), with: varint.bytes)
            }
        }
    }

    /// Writes `value`: a primitive as its tagged bytes, anything else by encoding itself
    /// here (an encoding that writes nothing is an empty keyed value, as in the tree).
    func write<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws {
        if isPrimitive(T.self), let primitive = primitive(value) {
            writePrimitive(primitive)
            return
        }
        if T.self == Data.self, let data = value as? Data {
            writer.write(RecordBytes.Tag.bytes.rawValue)
            writer.writeVarint(UInt64(data.count))
            writer.write(contentsOf: data)
            return
        }
        let start = writer.bytes.count
        let depth = open.count
        let slot = StreamSlot()
        try value.encode(to: StreamEncoding(state: self, slot: slot, codingPath: codingPath))
        guard !fellBack else { throw fallBack() }
        close(above: depth)
        if writer.bytes.count == start {
            writer.write(RecordBytes.Tag.keyed.rawValue)
            writer.write(UInt8(0))
        }
    }

    func writeNil() { writer.write(RecordBytes.Tag.null.rawValue) }

    // Primitives' tagged bytes, as `RecordValue.write` writes them (no `RecordValue` is
    // made: it is an indirect enum, one allocation per value).
    func write(_ flag: Bool) { writer.write(flag ? RecordBytes.Tag.isTrue.rawValue : RecordBytes.Tag.isFalse.rawValue) }

    func write(_ number: Int64) {
        writer.write(RecordBytes.Tag.int.rawValue)
        writer.writeVarint(UInt64(bitPattern: (number << 1) ^ (number >> 63)))
    }

    func write(_ number: UInt64) {
        writer.write(RecordBytes.Tag.uint.rawValue)
        writer.writeVarint(number)
    }

    func write(_ number: Double) {
        writer.write(RecordBytes.Tag.double.rawValue)
        writer.write(number.bitPattern)
    }

    func write(_ text: String) {
        writer.write(RecordBytes.Tag.string.rawValue)
        writeName(text)
    }

    func writeName(_ name: String) {
        let utf8 = name.utf8
        writer.writeVarint(UInt64(utf8.count))
        writer.write(contentsOf: utf8)
    }

    /// The tagged bytes of a primitive, as `RecordValue.write` writes them.
    func writePrimitive(_ value: RecordValue) {
        switch value {
        case let .bool(flag): write(flag)
        case let .int(number): write(number)
        case let .uint(number): write(number)
        case let .double(number): write(number)
        case let .string(text): write(text)
        default:
            // `primitive(_:)` makes only the cases above.
            writer.bytes.append(contentsOf: value.encoded().dropFirst())
        }
    }
}

/// What one value's encoder has started: nothing, a keyed or unkeyed container (its id),
/// or a single value.
final class StreamSlot {
    enum Use { case none, keyed(Int), unkeyed(Int), single }
    var use = Use.none
}

struct StreamEncoding: Encoder {
    let state: StreamState
    let slot: StreamSlot
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(KeyedStreamEncoding<Key>(state: state, id: containerID(keyed: true), codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        UnkeyedStreamEncoding(state: state, id: containerID(keyed: false), codingPath: codingPath)
    }

    /// The id of this value's container of that kind, started on first use; a fallback
    /// when the value already started something else.
    private func containerID(keyed: Bool) -> Int {
        switch slot.use {
        case .none:
            let id = state.startContainer(keyed: keyed)
            slot.use = keyed ? .keyed(id) : .unkeyed(id)
            return id
        case let .keyed(id) where keyed: return id
        case let .unkeyed(id) where !keyed: return id
        default: return state.failedID()
        }
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        if case .none = slot.use {} else { state.fellBack = true }
        return SingleStreamEncoding(state: state, slot: slot, codingPath: codingPath)
    }
}

struct KeyedStreamEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let state: StreamState
    let id: Int
    let codingPath: [any CodingKey]

    private func enter(_ key: Key) throws {
        guard !state.fellBack else { throw state.fallBack() }
        let name = key.stringValue
        try state.enter(id, name: name)
        state.writeName(name)
    }

    mutating func encodeNil(forKey key: Key) throws {
        try enter(key)
        state.writeNil()
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try enter(key)
        if isPrimitive(T.self), let primitive = primitive(value) { return state.writePrimitive(primitive) }
        try state.write(value, codingPath: codingPath + [key])
    }

    // The common primitives, written without the generic path's casts (synthesized
    // `encode(to:)` calls these for stored properties of these types).
    mutating func encode(_ value: String, forKey key: Key) throws {
        try enter(key)
        state.write(value)
    }

    mutating func encode(_ value: Int, forKey key: Key) throws {
        try enter(key)
        state.write(Int64(value))
    }

    mutating func encode(_ value: Int64, forKey key: Key) throws {
        try enter(key)
        state.write(value)
    }

    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        try enter(key)
        state.write(value)
    }

    mutating func encode(_ value: Bool, forKey key: Key) throws {
        try enter(key)
        state.write(value)
    }

    mutating func encode(_ value: Double, forKey key: Key) throws {
        try enter(key)
        state.write(value)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type,
                                                        forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested = (try? enter(key)) != nil ? state.startContainer(keyed: true) : state.failedID()
        return KeyedEncodingContainer(KeyedStreamEncoding<NestedKey>(state: state, id: nested, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = (try? enter(key)) != nil ? state.startContainer(keyed: false) : state.failedID()
        return UnkeyedStreamEncoding(state: state, id: nested, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { state.superEncoder(codingPath) }

    mutating func superEncoder(forKey key: Key) -> any Encoder { state.superEncoder(codingPath) }
}

struct UnkeyedStreamEncoding: UnkeyedEncodingContainer {
    let state: StreamState
    let id: Int
    let codingPath: [any CodingKey]
    private(set) var count = 0

    init(state: StreamState, id: Int, codingPath: [any CodingKey]) {
        self.state = state
        self.id = id
        self.codingPath = codingPath
    }

    private mutating func enter() throws {
        guard !state.fellBack else { throw state.fallBack() }
        try state.enter(id)
        count += 1
    }

    mutating func encodeNil() throws {
        try enter()
        state.writeNil()
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try enter()
        try state.write(value, codingPath: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = (try? enter()) != nil ? state.startContainer(keyed: true) : state.failedID()
        return KeyedEncodingContainer(KeyedStreamEncoding<NestedKey>(state: state, id: nested, codingPath: codingPath))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = (try? enter()) != nil ? state.startContainer(keyed: false) : state.failedID()
        return UnkeyedStreamEncoding(state: state, id: nested, codingPath: codingPath)
    }

    mutating func superEncoder() -> any Encoder { state.superEncoder(codingPath) }
}

struct SingleStreamEncoding: SingleValueEncodingContainer {
    let state: StreamState
    let slot: StreamSlot
    let codingPath: [any CodingKey]

    private func enter() throws {
        guard !state.fellBack, case .none = slot.use else { throw state.fallBack() }
        slot.use = .single
    }

    mutating func encodeNil() throws {
        try enter()
        state.writeNil()
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try enter()
        try state.write(value, codingPath: codingPath)
    }
}
