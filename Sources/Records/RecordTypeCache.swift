// Facts about record types that cost reflection to learn (an index's name from its key
// path's description, a type's `RecordShape` for the planner, its entity name), learned
// once per process and kept here. A memo of what each type says of itself, never a
// registry: no answer depends on which other types a process used, or on any store (what
// a store needs to know of the types written through it is its `RecordCatalog`).
//
// Thread-safety: behind a pthread lock; values are immutable once stored.
import StrataContexts
import StrataLocks

enum RecordTypeCache {
    private struct Entries {
        var indexes: [ObjectIdentifier: Any] = [:]
        /// A type's relationships, checked (`Result<[any RelationshipLink<R>], RecordError>`).
        var links: [ObjectIdentifier: Any] = [:]
        var shapes: [ObjectIdentifier: RecordShape] = [:]
        /// A type's `TypedRecordFacts<R>`, keyed by `R`.
        var typed: [ObjectIdentifier: AnyObject] = [:]
        var entityNames: [ObjectIdentifier: String] = [:]
        /// Decoded index manifests by their bytes (few: one per entity and index list).
        var manifests: [[UInt8]: Set<String>] = [:]
    }

    private static let entries = Locked(Entries())

    /// `R.indexes`, then the index of each foreign key `R` holds (`RelationshipLink.foreignKeyIndex`),
    /// evaluated once.
    static func indexes<R: Record>(of type: R.Type) -> [RecordIndex<R>] {
        if let cached = entries.withLock({ $0.indexes[ObjectIdentifier(type)] }) as? [RecordIndex<R>] { return cached }
        var indexes = R.indexes
        for relationship in R.relationships {
            if let index = relationship.declaration.link.foreignKeyIndex(), !indexes.contains(where: { $0.name == index.name }) {
                indexes.append(index)
            }
        }
        entries.withLock { $0.indexes[ObjectIdentifier(type)] = indexes }
        return indexes
    }

    /// `R.relationships`, each checked to be declared whole (`RelationshipLink.validate`), once.
    /// Throws `RecordError.invalidRelationship` saying what to change.
    static func links<R: Record>(of type: R.Type) throws -> [any RelationshipLink<R>] {
        if let cached = entries.withLock({ $0.links[ObjectIdentifier(type)] }) as? Result<[any RelationshipLink<R>], RecordError> { return try cached.get() }
        let result: Result<[any RelationshipLink<R>], RecordError>
        do {
            result = .success(try checkedLinks(of: type))
        } catch {
            result = .failure(error as? RecordError ?? .invalidRelationship("\(error)"))
        }
        entries.withLock { $0.links[ObjectIdentifier(type)] = result }
        return try result.get()
    }

    private static func checkedLinks<R: Record>(of type: R.Type) throws -> [any RelationshipLink<R>] {
        let links = R.relationships.map { $0.declaration.link }
        for link in links { try link.validate() }
        for index in R.indexes where links.contains(where: { $0.side == .via && $0.indexName == index.name }) {
            throw RecordError.invalidRelationship("\(R.self) declares an index named \(index.name), which Strata keeps for its relationship; rename the index")
        }
        return links
    }

    /// What the planner knows of `R`, learned once.
    static func shape<R: Record>(of type: R.Type) -> RecordShape {
        if let cached = entries.withLock({ $0.shapes[ObjectIdentifier(type)] }) { return cached }
        let shape = RecordShape(type, indexes: indexes(of: type))
        entries.withLock { $0.shapes[ObjectIdentifier(type)] = shape }
        return shape
    }

    /// What a repository of `R` needs, typed: one lookup, no dynamic cast.
    static func facts<R: Record>(of type: R.Type) -> TypedRecordFacts<R> {
        if let cached = entries.withLock({ $0.typed[ObjectIdentifier(type)] }) {
            // Stored under `R`'s identifier by the line below, so of this type.
            return unsafeDowncast(cached, to: TypedRecordFacts<R>.self)
        }
        let shape = shape(of: type)
        let facts = TypedRecordFacts(shape: shape, indexes: indexes(of: type),
                                     read: shape.reader as? RecordReading<R>)
        entries.withLock { $0.typed[ObjectIdentifier(type)] = facts }
        return facts
    }

    /// `R.entityName`, evaluated once (the default describes the type, which is slow).
    static func entityName<R: Record>(of type: R.Type) -> String {
        if let cached = entries.withLock({ $0.entityNames[ObjectIdentifier(type)] }) { return cached }
        let name = R.entityName
        entries.withLock { $0.entityNames[ObjectIdentifier(type)] = name }
        return name
    }

    /// The index names a manifest's `bytes` list, decoded by `decode` the first time these
    /// bytes are seen. At most 256 are kept; past that the cache starts over.
    static func manifest(_ bytes: [UInt8], decode: () throws -> Set<String>) throws -> Set<String> {
        if let cached = entries.withLock({ $0.manifests[bytes] }) { return cached }
        let names = try decode()
        entries.withLock { entries in
            if entries.manifests.count >= 256 { entries.manifests.removeAll() }
            entries.manifests[bytes] = names
        }
        return names
    }
}

/// One index entry a record implies.
struct IndexEntry {
    let index: String
    let isUnique: Bool
    let key: [UInt8]
    /// The record's id bytes.
    let value: [UInt8]
    /// The indexed value, for messages.
    let rendered: String
}

/// The entries a stored record's bytes imply for every index of its type.
typealias IndexDeriver = @Sendable ([UInt8]) throws -> [IndexEntry]

/// A record type's facts as its repositories use them (`RecordTypeCache.facts(of:)`).
final class TypedRecordFacts<R: Record>: Sendable {
    let shape: RecordShape
    let indexes: [RecordIndex<R>]
    let read: RecordReading<R>?

    init(shape: RecordShape, indexes: [RecordIndex<R>], read: RecordReading<R>?) {
        self.shape = shape
        self.indexes = indexes
        self.read = read
    }
}
