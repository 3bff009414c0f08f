// Secondary indexes: declared on a record type's key paths, kept in the same commit as the
// record, used by `fetch` for equality and range terms (FORMAT.md, "Records").
//
// Invariants:
//  RecordIndex.X1. After any staged write through a repository, every declared index of the entity
//      holds exactly one entry per record (for a unique index: per value), built from the
//      record as it is now; an index declared later is built on first use in a writable
//      context and noted in the entity's manifest.
import StrataContexts
import Foundation
import StrataCodec

/// A string constant's index bytes for a range term, nil unless it is ASCII
/// (`ExactIndexRanges`). Made here, not in `RecordIndex.Component.init`: a closure made
/// there ran in its generic context, unspecialized.
private let asciiStringRangeBytes: @Sendable (Any) -> [UInt8]? = { constant in
    guard let text = constant as? String, text.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
    return text.indexBytes
}

/// What the planner knows of an indexed key path's value type: the same for an index of
/// any record type (`RecordIndex.Component`) and for its plan (`PlannedIndex.Component`).
struct IndexComponentTraits: Sendable {
    /// The key path's last component ("title" for `\Todo.title`), for `explain`.
    let name: String
    /// A predicate constant's index bytes, or nil when it is not of the value type.
    let constantBytes: @Sendable (Any) -> [UInt8]?
    /// A range term's constant's index bytes, or nil when a range against it is not read
    /// from the index (a string that is not ASCII: `ExactIndexRanges`).
    let rangeBytes: @Sendable (Any) -> [UInt8]?
    /// Whether the value type's `==` agrees exactly with its index bytes (the scalars of
    /// IndexableValue.swift and optionals of them; not enums or an app's own types), so the
    /// entries of a value are exactly the records `==` holds for.
    let isExact: Bool
    /// Whether ranges (`<`, `>=`, …) are exact too (`ExactIndexRanges`: not strings).
    let rangesExactly: Bool
    /// Whether the value type sorts in the order of its index bytes (`StrataOrdered`), so
    /// that a sort on the key path can be read from the index.
    let sortsExactly: Bool
    /// How ranges of the value type treat NaNs, which sort last in an index.
    let nanRanges: NaNRanges
}

/// A secondary index of `R`, declared in `R.indexes`: on one key path, or compound on two
/// or three (entries ordered by the first value, then the second, then the third).
public struct RecordIndex<R: Record>: Sendable {
    /// One indexed key path and what the planner knows of its value type (its `traits`,
    /// read as its own properties).
    @dynamicMemberLookup
    struct Component: Sendable {
        /// The indexed key path, as the predicate planner sees it.
        let keyPath: AnyKeyPath & Sendable
        let traits: IndexComponentTraits

        subscript<T>(dynamicMember member: KeyPath<IndexComponentTraits, T>) -> T { traits[keyPath: member] }

        init(keyPath: AnyKeyPath & Sendable, constantBytes: @escaping @Sendable (Any) -> [UInt8]?,
             rangeBytes: @escaping @Sendable (Any) -> [UInt8]?, isExact: Bool, rangesExactly: Bool, sortsExactly: Bool) {
            self.keyPath = keyPath
            traits = IndexComponentTraits(name: RecordIndex.lastName(keyPath), constantBytes: constantBytes, rangeBytes: rangeBytes,
                                          isExact: isExact, rangesExactly: rangesExactly, sortsExactly: sortsExactly, nanRanges: .none)
        }

        init<V: IndexableValue>(_ keyPath: KeyPath<R, V> & Sendable, _ type: V.Type) {
            self.keyPath = keyPath
            let constantBytes = RecordIndex.constantBytes(V.self)
            let rangeBytes: @Sendable (Any) -> [UInt8]?
            if V.self == String.self {
                rangeBytes = asciiStringRangeBytes
            } else {
                rangeBytes = constantBytes
            }
            traits = IndexComponentTraits(
                name: RecordIndex.lastName(keyPath), constantBytes: constantBytes, rangeBytes: rangeBytes,
                isExact: V.self is any ExactIndexEquality.Type, rangesExactly: V.self is any ExactIndexRanges.Type,
                sortsExactly: V.self is any StrataOrdered.Type,
                nanRanges: V.self == Date.self ? .comparableDefaults : V.self is any FloatingIndexValue.Type ? .ieee : .none)
        }
    }

    /// Reads a predicate constant's index bytes. The common value types get closures of
    /// their own: one made here for any `V` runs unspecialized (a metadata lookup and a
    /// generic cast each time, ~700 instructions more per term).
    fileprivate static func constantBytes<V: IndexableValue>(_ type: V.Type) -> @Sendable (Any) -> [UInt8]? {
        // A NaN equals nothing and is in no range: it is never read from an index (the
        // term is evaluated on each candidate instead).
        switch type {
        case is String.Type: { ($0 as? String)?.indexBytes }
        case is Int.Type: { ($0 as? Int)?.indexBytes }
        case is Int64.Type: { ($0 as? Int64)?.indexBytes }
        case is UInt64.Type: { ($0 as? UInt64)?.indexBytes }
        case is Double.Type: { ($0 as? Double).flatMap { $0.isNaN ? nil : $0.indexBytes } }
        case is Float.Type: { ($0 as? Float).flatMap { $0.isNaN ? nil : $0.indexBytes } }
        case is Date.Type: { ($0 as? Date).flatMap { $0.timeIntervalSinceReferenceDate.isNaN ? nil : $0.indexBytes } }
        case is Bool.Type: { ($0 as? Bool)?.indexBytes }
        case is UUID.Type: { ($0 as? UUID)?.indexBytes }
        default: { constant in (constant as? V).flatMap { isNaN($0) ? nil : $0.indexBytes } }
        }
    }

    /// Whether `value` is a floating-point NaN, or an optional holding one.
    private static func isNaN(_ value: Any) -> Bool {
        if let value = value as? Double { return value.isNaN }
        if let value = value as? Float { return value.isNaN }
        if let value = value as? Date { return value.timeIntervalSinceReferenceDate.isNaN }
        return false
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
    /// For an index with an entry per element of an array (a to-many relationship's ids):
    /// a record's value bytes, one per element (`bytes` is then unused).
    let elementBytes: (@Sendable (R) -> [[UInt8]])?
    let render: @Sendable (R) -> String
    /// For a relationship's index: what its entries refer to (the manifest lists it).
    let reference: ManifestReference?

    init(name: String, isUnique: Bool, components: [Component], bytes: @escaping @Sendable (R) -> [UInt8],
         elementBytes: (@Sendable (R) -> [[UInt8]])? = nil, render: @escaping @Sendable (R) -> String,
         reference: ManifestReference? = nil) {
        self.name = name
        self.isUnique = isUnique
        self.components = components
        keyPrefix = RecordKeys.indexPrefix(entity: RecordTypeCache.entityName(of: R.self), index: name)
        self.bytes = bytes
        self.elementBytes = elementBytes
        self.render = render
        self.reference = reference
    }

    /// Whether a record has an entry per element of an array here.
    var isMultiValued: Bool { elementBytes != nil }

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
    /// read from the index, as are a range on `first` alone and a sort on both.
    public static func index<A: IndexableValue, B: IndexableValue>(_ first: KeyPath<R, A> & Sendable,
                                                                   _ second: KeyPath<R, B> & Sendable,
                                                                   name: String? = nil, unique: Bool = false) -> RecordIndex<R> {
        let components = [Component(first, A.self), Component(second, B.self)]
        return RecordIndex(name: name ?? components[0].name + "+" + components[1].name, isUnique: unique, components: components,
                    bytes: { $0[keyPath: first].indexBytes + $0[keyPath: second].indexBytes },
                    render: { "(\($0[keyPath: first]), \($0[keyPath: second]))" })
    }

    /// A compound index on `first`, `second`, then `third` (named "first+second+third"
    /// unless `name` is given): equalities on leading key paths narrow the read to one
    /// value's entries, ordered by the key paths after them, as for two.
    public static func index<A: IndexableValue, B: IndexableValue, C: IndexableValue>(
        _ first: KeyPath<R, A> & Sendable, _ second: KeyPath<R, B> & Sendable, _ third: KeyPath<R, C> & Sendable,
        name: String? = nil, unique: Bool = false
    ) -> RecordIndex<R> {
        let components = [Component(first, A.self), Component(second, B.self), Component(third, C.self)]
        return RecordIndex(name: name ?? components.map(\.name).joined(separator: "+"), isUnique: unique, components: components,
                    bytes: { $0[keyPath: first].indexBytes + $0[keyPath: second].indexBytes + $0[keyPath: third].indexBytes },
                    render: { "(\($0[keyPath: first]), \($0[keyPath: second]), \($0[keyPath: third]))" })
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
        var writer = ByteWriter(capacity: 10)
        writer.writeVarint(UInt64(value))
        return writer.bytes
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
    static func entityNameRange(of key: [UInt8], tag: UInt8) -> Range<Int>? {
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
