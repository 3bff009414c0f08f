// What the records layer keeps for one store: the record types written through it, by
// entity, so that after a merge or refresh settled conflicting keys one by one it can find
// the type behind a key and make the records' index entries exactly what their values
// imply (RecordIndex.swift, X1). It is attached to the store (`StoreLayers`) by the first
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
    /// What a stored record implies for its entity's indexes, by the entity's record-key
    /// prefix, and the type that says so: the last one registered for the entity (two
    /// shapes of one entity meet only in a migration, which writes the newer one last).
    private let derivers = Mutex<[[UInt8]: (type: ObjectIdentifier, derive: IndexDeriver)]>([:])

    /// The catalog of `store`, attached on first use.
    static func of(_ store: Store) -> RecordCatalog {
        store.layers.attached(RecordCatalog.self) { RecordCatalog() }
    }

    /// Notes `type` (whose planner facts are `shape`) as one written through this store. A
    /// type without indexes needs no repair and is not kept.
    func register<R: Record>(_ type: R.Type, shape: RecordShape) {
        guard !shape.indexes.isEmpty else { return }
        let prefix = shape.recordPrefix
        guard derivers.withLock({ $0[prefix]?.type != ObjectIdentifier(type) }) else { return }
        let indexes = RecordTypeCache.indexes(of: type)
        let read = RecordDecoder.reading(R.self)
        let deriver: IndexDeriver = { bytes in
            let record = try RecordDecoder().decode(R.self, from: bytes, reading: read)
            return indexes.map { index in
                let (key, value) = IndexMaintenance<R>.entry(index, record)
                return IndexEntry(index: index.name, isUnique: index.isUnique, key: key, value: value, rendered: index.render(record))
            }
        }
        derivers.withLock { $0[prefix] = (ObjectIdentifier(type), deriver) }
    }

    /// The index deriver of a record key, when a type of its entity was registered.
    private func deriver(forRecordKey key: [UInt8]) -> IndexDeriver? {
        guard let prefix = RecordKeys.entityPrefix(of: key, tag: RecordKeys.recordTag) else { return nil }
        let record = Array(prefix)
        return derivers.withLock { $0[record]?.derive }
    }

    /// After a merge or refresh settled `conflicts` key by key, makes the index entries of
    /// every record behind them (a conflicting record key, or the records a conflicting
    /// index entry named on any side) exactly those its value now implies: entries any
    /// side's version left that the value does not imply are removed, and its own are
    /// staged. Throws `RecordError.uniqueViolation` when another record holds one of them,
    /// a record's decoding error when its value cannot be read as its type.
    func settle(_ context: Context, conflicts: [[UInt8]], readConflicts: [[UInt8]], policy: MergePolicy,
                sides: [([UInt8]) throws -> [UInt8]?]) throws {
        var records = Set<[UInt8]>()
        for key in conflicts {
            if RecordKeys.entityPrefix(of: key, tag: RecordKeys.recordTag) != nil {
                records.insert(key)
            } else if let prefix = RecordKeys.recordPrefix(ofIndexKey: key) {
                for side in sides { if let id = try side(key) { records.insert(prefix + id) } }
            }
        }
        for record in records.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            guard let derive = deriver(forRecordKey: record) else { continue }
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
