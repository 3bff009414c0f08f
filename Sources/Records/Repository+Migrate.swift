// Schema changes: rewriting every record stored in an older shape as the current type,
// whatever indexes the old and new shapes declare. The old records are read as the old
// type; every index entry of the old entity is removed by its key prefix, without being
// derived from anything; the new records' entries are derived from the new values, which
// are exactly what is stored. Nothing is ever decoded as a shape it was not written in.
import StrataContexts
import StrataEngine
import Foundation

extension Repository {
    /// Rewrites every record stored as `Old` (its entity, in id order) as `R` with
    /// `transform`, inside this repository's context, and returns how many. Whatever the
    /// indexes of either shape, afterwards `R`'s indexes are exactly what the new records
    /// imply and no entry of an index `R` does not declare is left. When the entity names
    /// differ (a rename) the old records are removed and the new ones written as `upsert`
    /// writes them. Fields and types may change freely: `transform` says how.
    ///
    /// Throws `RecordError.migrationFailed` naming the record and the field when a stored
    /// record does not decode as `Old` or two new records share a unique index's value,
    /// and what `transform` throws; nothing is staged then. Run it in a unit of work or a
    /// migrator step (`Migrator.migrate(from:to:_:)`).
    @discardableResult
    public func migrate<Old: Record>(from old: Old.Type, _ transform: (Old) throws -> R) throws -> Int {
        // In a child, so that a failure part way leaves this context as it was.
        let child = try context.makeChild()
        do {
            let count = try Repository(context: child).rewrite(from: old, transform)
            try child.commit()
            return count
        } catch {
            child.discard()
            throw error
        }
    }

    /// `migrate(from:_:)`'s work, staged in this repository's context.
    private func rewrite<Old: Record>(from old: Old.Type, _ transform: (Old) throws -> R) throws -> Int {
        let oldEntity = RecordTypeCache.entityName(of: Old.self)
        let oldPrefix = RecordKeys.prefix(entity: oldEntity)
        let read = RecordDecoder.reading(Old.self)
        var rewritten: [R] = []
        try context.forEach(prefix: oldPrefix) { key, bytes in
            let record: Old
            do {
                record = try RecordDecoder().decode(Old.self, from: bytes, reading: read)
            } catch {
                throw RecordError.migrationFailed(entity: oldEntity, id: Self.renderID(key.dropFirst(oldPrefix.count), as: Old.ID.self),
                                                  field: Self.field(of: error), reason: Self.reason(error))
            }
            rewritten.append(try transform(record))
            return true
        }
        if oldEntity != shape.entityName {
            // A rename: the old entity goes, index entries and all; the new records join
            // whatever the new entity holds as any upsert would.
            try removeIndexEntries(of: oldEntity)
            try context.forEach(prefix: oldPrefix) { key, _ in
                try context.stage(key, nil, tracksInsert: true)
                return true
            }
            for record in rewritten { try upsert(record) }
            return rewritten.count
        }
        try rewriteInPlace(rewritten)
        return rewritten.count
    }

    /// Replaces every record of the entity with `records` (their ids are the stored ones)
    /// and every index entry with theirs, checking unique values among them first.
    private func rewriteInPlace(_ records: [R]) throws {
        var entries: [[UInt8]: (id: R.ID, index: RecordIndex<R>)] = [:]
        for record in records {
            for index in indexes.declared {
                let (key, _) = IndexMaintenance<R>.entry(index, record)
                if index.isUnique, let holder = entries[key] {
                    throw RecordError.migrationFailed(entity: shape.entityName, id: "\(record.id)",
                                                      field: index.components.map(\.name).joined(separator: "+"),
                                                      reason: "its value \(index.render(record)) is also \(shape.entityName) \(holder.id)'s, "
                                                          + "and index \(index.name) is unique: give the records distinct values in the transform")
                }
                entries[key] = (record.id, index)
            }
        }
        try removeIndexEntries(of: shape.entityName)
        for record in records {
            try context.stage(recordPrefix + record.id.keyBytes, try RecordEncoder().encode(record), tracksInsert: true)
        }
        for (key, entry) in entries { try context.stage(key, entry.id.keyBytes) }
        if !indexes.declared.isEmpty {
            try context.stage(shape.manifestKey, try RecordEncoder().encode(indexes.declared.map(\.name).sorted()), isChecked: false)
        }
    }

    /// Stages the removal of every index entry of `entity`, under any index name, and of
    /// its manifest: found by their key prefix, never derived from a record.
    private func removeIndexEntries(of entity: String) throws {
        var keys: [[UInt8]] = []
        try context.forEach(prefix: RecordKeys.named(RecordKeys.indexTag, [entity])) { key, _ in
            keys.append(key)
            return true
        }
        for key in keys { try context.stage(key, nil) }
        if try context.contains(RecordKeys.manifest(entity: entity)) { try context.stage(RecordKeys.manifest(entity: entity), nil, isChecked: false) }
    }

    /// An id's key bytes as the id, for messages.
    static func renderID<ID: RecordID>(_ bytes: ArraySlice<UInt8>, as type: ID.Type) -> String {
        ID(keyBytes: Array(bytes)).map { "\($0)" } ?? renderKey(Array(bytes))
    }

    /// The coding path a decoding error names ("address.city"), or nil.
    static func field(of error: any Error) -> String? {
        let path: [any CodingKey]
        switch error as? DecodingError {
        case let .keyNotFound(key, context)?: path = context.codingPath + [key]
        case let .typeMismatch(_, context)?, let .valueNotFound(_, context)?, let .dataCorrupted(context)?: path = context.codingPath
        default: return nil
        }
        return path.isEmpty ? nil : path.map(\.stringValue).joined(separator: ".")
    }

    /// What a decoding error says, in a few words.
    static func reason(_ error: any Error) -> String {
        switch error as? DecodingError {
        case .keyNotFound?: "the field is missing"
        case let .typeMismatch(_, context)?, let .valueNotFound(_, context)?, let .dataCorrupted(context)?: context.debugDescription
        default: "\(error)"
        }
    }
}
