// What the records layer keeps for one store: the record types written through it, by
// entity, so that after a merge or refresh settled conflicting keys one by one it can find
// the type behind a key and make the records' index entries exactly what their values
// imply (RecordIndex.swift, RecordIndex.X1), and keep relationships whole where the other side wrote
// in a range a relationship read (RelationshipLink.swift). It is attached to the store (`StoreLayers`) by the first
// repository made on a writable context of it, and dies with the store: nothing is kept
// per process.
//
// Every key a merge can settle was staged by a repository of the same store (a context
// refuses plain writes of records' keys), and making that repository registered its type
// here first, so the catalog knows the type of every key it is asked about.
//
// Thread-safety: the table is behind a `Mutex`; what it holds is immutable.
import StrataContexts
import StrataEngine
import Synchronization

/// The record types a store's writable contexts have used, by entity.
final class RecordCatalog: ContextSettling {
    /// What the catalog can do with a record of an entity without its type.
    private struct TypeOps {
        /// The type it was learned from: the last one registered for the entity (two shapes
        /// of one entity meet only in a migration, which writes the newer one last).
        let type: ObjectIdentifier
        /// What a stored record implies for its entity's indexes (nil: it has none).
        let derive: IndexDeriver?
        /// `RelationshipLink.settleDeleted` for each inverse relationship, given an id's key bytes.
        let settleDeleted: @Sendable ([UInt8], Context, () throws -> Void) throws -> Void
        /// `RelationshipLink.settleTargets` for each relationship the record holds, given its key.
        let settleTargets: @Sendable ([UInt8], Context, () throws -> Void) throws -> Void
    }

    private let types = Mutex<[[UInt8]: TypeOps]>([:])

    /// The catalog of `store`, attached on first use.
    static func of(_ store: Store) -> RecordCatalog {
        store.layers.attached(RecordCatalog.self) { RecordCatalog() }
    }

    /// Notes `type` (whose planner facts are `shape`) as one written through this store,
    /// and the types its relationships reach. A type without indexes or relationships
    /// needs nothing settled and is not kept.
    func register<R: Record>(_ type: R.Type, shape: RecordShape) {
        guard !shape.indexes.isEmpty || shape.hasRelationships else { return }
        let prefix = shape.recordPrefix
        guard types.withLock({ $0[prefix]?.type != ObjectIdentifier(type) }) else { return }
        let links = (try? RecordTypeCache.links(of: R.self)) ?? []
        types.withLock { $0[prefix] = Self.ops(R.self, links: links, prefix: prefix) }
        // After this type is kept, so that a relationship back to it ends the walk.
        for link in links { link.register(in: self) }
    }

    private static func ops<R: Record>(_ type: R.Type, links: [any RelationshipLink<R>], prefix: [UInt8]) -> TypeOps {
        let indexes = RecordTypeCache.indexes(of: type)
        let read = RecordDecoder.reading(R.self)
        var derive: IndexDeriver?
        if !indexes.isEmpty {
            derive = { bytes in
                let record = try RecordDecoder().decode(R.self, from: bytes, reading: read)
                var entries: [IndexEntry] = []
                for index in indexes {
                    for entry in IndexMaintenance<R>.entries(index, record) {
                        entries.append(IndexEntry(index: index.name, isUnique: index.isUnique, key: entry.key, value: entry.value,
                                                  rendered: index.render(record)))
                    }
                }
                return entries
            }
        }
        let held = HeldLinks(links: links)
        return TypeOps(type: ObjectIdentifier(type), derive: derive, settleDeleted: { idBytes, context, change in
            guard let id = R.ID(keyBytes: idBytes), try !context.contains(prefix + idBytes) else { return }
            for link in held.links where link.side == .inverse { try link.settleDeleted(id, in: context, change: change) }
        }, settleTargets: { key, context, change in
            for link in held.links where link.side == .via {
                // Read for each: the one before may have changed or deleted the record.
                guard let bytes = try context.get(key) else { return }
                let record = try RecordDecoder().decode(R.self, from: bytes, reading: read)
                try link.settleTargets(of: record, in: context, change: change)
            }
        })
    }

    /// What the catalog knows of a record key's entity.
    private func ops(forRecordKey key: [UInt8]) -> (prefix: [UInt8], ops: TypeOps)? {
        guard let prefix = RecordKeys.entityPrefix(of: key, tag: RecordKeys.recordTag) else { return nil }
        let record = Array(prefix)
        return types.withLock { $0[record] }.map { (record, $0) }
    }

    func settle(_ context: Context, conflicts: [[UInt8]], readConflicts: [[UInt8]], policy: MergePolicy,
                sides: [([UInt8]) throws -> [UInt8]?]) throws {
        if !conflicts.isEmpty { try repairIndexes(context, after: conflicts, sides: sides) }
        if !readConflicts.isEmpty { try keepRelationships(context, after: readConflicts, policy: policy, sides: sides) }
    }

    /// After the other side of a merge or refresh wrote in ranges a relationship's check or
    /// delete rule read (RelationshipLink.L1, RelationshipLink.L2): a record this side relied on that
    /// is gone gets its delete rules applied to the records still naming it, and a record
    /// the other side made refer to one this side deleted gets that record's rule. Under
    /// `.error`, any such change is a merge conflict instead, naming the keys.
    private func keepRelationships(_ context: Context, after readConflicts: [[UInt8]], policy: MergePolicy,
                                   sides: [([UInt8]) throws -> [UInt8]?]) throws {
        let change: () throws -> Void = {
            if policy == .error { throw ContextError.mergeConflict(keys: readConflicts) }
        }
        var referrers = Set<[UInt8]>()
        for key in readConflicts {
            if let (prefix, ops) = ops(forRecordKey: key) {
                try ops.settleDeleted(Array(key[prefix.count...]), context, change)
            } else if let records = RecordKeys.recordPrefix(ofIndexKey: key) {
                for side in sides { if let id = try side(key) { referrers.insert(records + id) } }
            }
        }
        for key in referrers.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            try ops(forRecordKey: key)?.ops.settleTargets(key, context, change)
        }
    }

    /// After a merge or refresh settled `conflicts` key by key, makes the index entries of
    /// every record behind them (a conflicting record key, or the records a conflicting
    /// index entry named on any side) exactly those its value now implies: entries any
    /// side's version left that the value does not imply are removed, and its own are
    /// staged. Throws `RecordError.uniqueViolation` when another record holds one of them,
    /// a record's decoding error when its value cannot be read as its type.
    private func repairIndexes(_ context: Context, after conflicts: [[UInt8]], sides: [([UInt8]) throws -> [UInt8]?]) throws {
        var records = Set<[UInt8]>()
        for key in conflicts {
            if RecordKeys.entityPrefix(of: key, tag: RecordKeys.recordTag) != nil {
                records.insert(key)
            } else if let prefix = RecordKeys.recordPrefix(ofIndexKey: key) {
                for side in sides { if let id = try side(key) { records.insert(prefix + id) } }
            }
        }
        for record in records.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            guard let derive = ops(forRecordKey: record)?.ops.derive else { continue }
            let implied = try context.get(record).map(derive) ?? []
            let keep = Set(implied.map(\.key))
            for side in sides {
                // A version that no longer decodes as the type cannot have been indexed by it.
                guard let bytes = try side(record), let entries = try? derive(bytes) else { continue }
                for entry in entries where !keep.contains(entry.key) {
                    if try context.get(entry.key) == entry.value { try context.stage(entry.key, nil) }
                }
            }
            for entry in implied {
                let holder = try context.get(entry.key)
                guard holder != entry.value else { continue }
                if let holder, let prefix = RecordKeys.entityPrefix(of: record, tag: RecordKeys.recordTag),
                   let other = try context.get(Array(prefix) + holder),
                   (try? derive(other))?.contains(where: { $0.key == entry.key }) == true {
                    throw RecordError.uniqueViolation(entity: Self.entityName(of: record), index: entry.index, value: entry.rendered)
                }
                try context.stage(entry.key, entry.value)
            }
        }
    }

    private static func entityName(of recordKey: [UInt8]) -> String {
        guard let prefix = RecordKeys.entityPrefix(of: recordKey, tag: RecordKeys.recordTag) else { return "record" }
        return RecordKeys.entityName(ofPrefix: Array(prefix))
    }
}

/// A type's relationships, held by closures that run on any thread: they are immutable
/// once declared.
private struct HeldLinks<R: Record>: @unchecked Sendable {
    let links: [any RelationshipLink<R>]
}
