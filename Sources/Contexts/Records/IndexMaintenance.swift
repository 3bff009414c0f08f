// Keeping an entity's secondary indexes (RecordIndex.swift, X1) in step with its records:
// entries replaced on every write, removed on delete, and built for existing records the
// first time a writable context uses an index that the entity's manifest does not list.
import StrataEngine

/// The index work of one repository.
struct IndexMaintenance<R: Record> {
    let context: Context

    private var declared: [RecordIndex<R>] { RecordTypeCache.indexes(of: R.self) }

    /// Whether the entity declares no index.
    var isEmpty: Bool { declared.isEmpty }

    /// The key of `record`'s entry in `index`, and its value (the record's id bytes).
    private func entry(_ index: RecordIndex<R>, _ record: R) -> (key: [UInt8], value: [UInt8]) {
        let prefix = RecordKeys.indexPrefix(entity: RecordTypeCache.entityName(of: R.self), index: index.name) + index.bytes(record)
        let id = record.id.keyBytes
        return (index.isUnique ? prefix : prefix + id, id)
    }

    /// Replaces `old`'s entries (if any) with `new`'s. Throws `RecordError.uniqueViolation`.
    func replace(old: R?, with new: R) throws {
        for index in declared {
            let next = entry(index, new)
            if let old {
                let previous = entry(index, old)
                if previous.key != next.key { try context.stage(previous.key, nil) }
            }
            if index.isUnique, let holder = try context.get(next.key), holder != next.value {
                throw RecordError.uniqueViolation(entity: RecordTypeCache.entityName(of: R.self), index: index.name, value: index.render(new))
            }
            try context.stage(next.key, next.value)
        }
    }

    /// Removes `record`'s entries.
    func remove(_ record: R) throws {
        for index in declared { try context.stage(entry(index, record).key, nil) }
    }

    /// The names of the indexes built for this entity, from its manifest.
    private func built() throws -> Set<String> {
        guard let bytes = try context.get(RecordKeys.manifest(entity: RecordTypeCache.entityName(of: R.self))) else { return [] }
        return Set(try RecordDecoder().decode([String].self, from: bytes))
    }

    /// Builds every declared index the manifest does not list yet (X1), in this context.
    /// A read-only context cannot: its fetches then scan instead of using those indexes.
    func ensureBuilt() throws {
        guard !declared.isEmpty, !context.isReadOnly else { return }
        let have = try built()
        let missing = declared.filter { !have.contains($0.name) }
        guard !missing.isEmpty else { return }
        let records = try context.scan(prefix: RecordKeys.prefix(entity: RecordTypeCache.entityName(of: R.self)))
        for (_, bytes) in records {
            let record = try RecordDecoder().decode(R.self, from: bytes)
            for index in missing {
                let next = entry(index, record)
                if index.isUnique, let holder = try context.get(next.key), holder != next.value {
                    throw RecordError.uniqueViolation(entity: RecordTypeCache.entityName(of: R.self), index: index.name, value: index.render(record))
                }
                try context.stage(next.key, next.value)
            }
        }
        let names = (have.union(missing.map(\.name))).sorted()
        try context.stage(RecordKeys.manifest(entity: RecordTypeCache.entityName(of: R.self)), try RecordEncoder().encode(names))
    }

    /// The indexes a fetch may use: built ones (building missing ones first when it can).
    func usable() throws -> [RecordIndex<R>] {
        guard !declared.isEmpty else { return [] }
        try ensureBuilt()
        let have = try built()
        return declared.filter { have.contains($0.name) }
    }
}
