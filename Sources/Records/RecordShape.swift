// What the query planner knows of a record type, without the type: its entity's key
// prefixes, its indexes and what a key path in a predicate is to it. Learned once per
// type (RecordTypeCache.shape) so that planning runs in code that is not generic over the
// app's record type: generic code in this module is not specialized for it, and every
// generic type it touches costs a runtime metadata lookup (~300 instructions each;
// measured at ~9,000 per fetch before planning left the generic code).
//
// Thread-safety: immutable but for three caches, each behind its `Mutex`.
import StrataContexts
import StrataEngine
import Foundation
import Synchronization

/// A record type as the planner sees it.
@usableFromInline
final class RecordShape: Sendable {
    let entityName: String
    /// Where the entity's records lie (`RecordKeys.prefix`).
    @usableFromInline let recordPrefix: [UInt8]
    /// Where the names of its built indexes are kept (empty when it declares none).
    let manifestKey: [UInt8]
    /// Its declared indexes, in `R.indexes` order.
    let indexes: [PlannedIndex]
    /// `init(record:)` of a `RecordReadable` type, as a `RecordReading<R>`.
    let reader: (any Sendable)?
    /// A predicate constant's id key bytes, or nil when it is not of the id type.
    let idBytes: @Sendable (Any) -> [UInt8]?
    /// Whether ids are integers, whose key bytes order and compare as the ids do (a String
    /// id's key bytes are its UTF-8 as given, while `==` is canonical equivalence).
    let exactIDs: Bool
    /// Whether the type declares relationships (their links: `RecordTypeCache.links`).
    let hasRelationships: Bool
    /// Whether an index has an entry per element of an array (a to-many relationship's ids).
    let hasElementIndexes: Bool
    /// Whether ids sort as their key bytes do (integers and `UUID`: a `String` id's key
    /// bytes are its UTF-8 as given, not in canonical order), so an id sort reads in key order.
    let idsSortExactly: Bool
    /// Whether a key path is the record's id, from its description (slow: cached below).
    private let describesID: @Sendable (AnyKeyPath) -> Bool
    /// The indexed key paths, each once: a component's `field` is a position here.
    private let fields: [AnyKeyPath & Sendable]
    /// Facts by key path object, holding the object so that its identifier stays its own.
    /// Key path literals are made once per place in the source, so few are ever seen; a
    /// literal in generic code (`\T.name`) is made anew each time it runs, and is found by
    /// its value in `factsByValue` (hashing a key path costs more than its identity).
    private let facts = Mutex<[ObjectIdentifier: (keyPath: HeldKeyPath, facts: KeyPathFacts)]>([:])
    private let factsByValue = Mutex<[HeldKeyPath: KeyPathFacts]>([:])
    /// A manifest whose bytes list every declared index (then every index is usable).
    private let completeManifest = Mutex<[UInt8]?>(nil)

    /// What a key path in a predicate or sort is to this type.
    struct KeyPathFacts {
        let isID: Bool
        /// The indexed key path it equals (a position in `fields`), if any.
        let field: Int?
        /// Whether its value type is one Strata sorts in index-byte order (`StrataOrdered`).
        let sortsAsStrata: Bool
    }

    init<R: Record>(_ type: R.Type, indexes: [RecordIndex<R>]) {
        entityName = RecordTypeCache.entityName(of: type)
        recordPrefix = RecordKeys.prefix(entity: entityName)
        manifestKey = indexes.isEmpty ? [] : RecordKeys.manifest(entity: entityName)
        var fields: [AnyKeyPath & Sendable] = []
        var planned: [PlannedIndex] = []
        for (position, index) in indexes.enumerated() {
            let components = index.components.map { component in
                let field = fields.firstIndex(of: component.keyPath) ?? {
                    fields.append(component.keyPath)
                    return fields.count - 1
                }()
                return PlannedIndex.Component(field: field, traits: component.traits)
            }
            planned.append(PlannedIndex(position: position, name: index.name, isUnique: index.isUnique,
                                        keyPrefix: index.keyPrefix, components: components))
        }
        self.fields = fields
        self.indexes = planned
        reader = RecordDecoder.reading(R.self)
        idBytes = { ($0 as? R.ID)?.keyBytes }
        exactIDs = R.ID.self == Int.self || R.ID.self == Int64.self || R.ID.self == UInt64.self
        idsSortExactly = exactIDs || R.ID.self == UUID.self
        hasRelationships = !R.relationships.isEmpty
        hasElementIndexes = indexes.contains { $0.isMultiValued }
        let typeName = String(describing: R.self)
        // `\Book.id` written for the concrete type is recognised by its last component; in
        // generic code (`#Predicate<T> { $0.id == id }`) the key path goes through the
        // protocol requirement, describes itself as computed, and equals this one.
        let requirement = HeldKeyPath(keyPath: \R.id)
        describesID = { keyPath in
            if keyPath == requirement.keyPath { return true }
            let text = "\(keyPath)"
            return text.hasSuffix(".id") && text.dropLast(3).hasSuffix(typeName)
        }
    }

    /// What `keyPath` is to this type, learned once per key path object.
    func facts(_ keyPath: AnyKeyPath) -> KeyPathFacts {
        let id = ObjectIdentifier(keyPath)
        if let known = facts.withLock({ $0[id]?.facts }) { return known }
        let held = HeldKeyPath(keyPath: keyPath)
        if let known = factsByValue.withLock({ $0[held] }) { return known }
        let learned = KeyPathFacts(isID: describesID(keyPath), field: fields.firstIndex { $0 == keyPath },
                                   sortsAsStrata: type(of: keyPath).valueType is any StrataOrdered.Type)
        facts.withLock { facts in
            if facts.count >= 1_024 { facts.removeAll() }   // objects made at run time, many
            facts[id] = (held, learned)
        }
        factsByValue.withLock { facts in
            if facts.count >= 1_024 { facts.removeAll() }   // key paths built at run time, many
            facts[held] = learned
        }
        return learned
    }

    /// The indexes a fetch may use, given the entity's manifest bytes: all of them when it
    /// lists every one (`names` decodes it, the first time these bytes are seen), else
    /// nil: the caller decides from the names.
    func allUsable(manifest bytes: [UInt8], names: () throws -> Set<String>) rethrows -> [PlannedIndex]? {
        if completeManifest.withLock({ $0 == bytes }) { return indexes }
        let listed = try names()
        for index in indexes where !listed.contains(index.name) { return nil }
        completeManifest.withLock { $0 = bytes }
        return indexes
    }
}

/// A key path kept only to be compared. Key path objects are immutable; `AnyKeyPath` is
/// just not marked `Sendable`.
struct HeldKeyPath: @unchecked Sendable, Hashable {
    let keyPath: AnyKeyPath
}

/// A secondary index as the planner sees it: `RecordIndex` without its record type.
@usableFromInline
final class PlannedIndex: Sendable {
    /// Its position in `R.indexes`.
    @usableFromInline let position: Int
    let name: String
    let isUnique: Bool
    let keyPrefix: [UInt8]
    /// The first key after every entry (`keyAfterPrefix(keyPrefix)`), made once.
    let keysEnd: [UInt8]?
    let components: [Component]

    /// An indexed key path (see `RecordIndex.Component`), its traits read as its own
    /// properties.
    @dynamicMemberLookup
    struct Component: Sendable {
        /// Which of the type's indexed key paths (`RecordShape.KeyPathFacts.field`).
        let field: Int
        let traits: IndexComponentTraits

        subscript<T>(dynamicMember member: KeyPath<IndexComponentTraits, T>) -> T { traits[keyPath: member] }
    }

    init(position: Int, name: String, isUnique: Bool, keyPrefix: [UInt8], components: [Component]) {
        self.position = position
        self.name = name
        self.isUnique = isUnique
        self.keyPrefix = keyPrefix
        keysEnd = keyAfterPrefix(keyPrefix)
        self.components = components
    }
}
