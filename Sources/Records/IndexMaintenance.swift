// Keeping an entity's secondary indexes (RecordIndex.swift, RecordIndex.X1) in step with its records:
// entries replaced on every write, removed on delete, and built for existing records the
// first time a context writes the entity while its manifest does not list an index.
// Reads never stage anything: a fetch uses only indexes the manifest lists.
import StrataContexts
import StrataEngine

/// The index work of one repository.
@usableFromInline
struct IndexMaintenance<R: Record> {
    let context: Context
    /// `R.indexes`.
    @usableFromInline let declared: [RecordIndex<R>]
    private let shape: RecordShape
    /// Where the entity's manifest lies (empty when it declares no index).
    private var manifestKey: [UInt8] { shape.manifestKey }

    /// `declared.isEmpty`, kept apart. This code runs unspecialized for the application's
    /// record type, where each use of the array looks its type's metadata up in the
    /// runtime (about 900 instructions for `isEmpty`, callgrind, records-insert); a write
    /// asks twice.
    let isEmpty: Bool
    /// `declared.count`, kept apart for the same reason.
    private let declaredCount: Int

    init(context: Context, shape: RecordShape, declared: [RecordIndex<R>]) {
        self.context = context
        self.shape = shape
        self.declared = declared
        isEmpty = declared.isEmpty
        declaredCount = declared.count
    }

    /// The key of `record`'s entry in `index`, and its value (the record's id bytes).
    static func entry(_ index: RecordIndex<R>, _ record: R) -> (key: [UInt8], value: [UInt8]) {
        let value = index.bytes(record)
        let id = record.id.keyBytes
        // One array of the key's final size: built by `+`, a non-unique key took two
        // arrays and two copies of the prefix.
        var key: [UInt8] = []
        key.reserveCapacity(index.keyPrefix.count + value.count + (index.isUnique ? 0 : id.count))
        key.append(contentsOf: index.keyPrefix)
        key.append(contentsOf: value)
        if !index.isUnique { key.append(contentsOf: id) }
        return (key, id)
    }

    private func entry(_ index: RecordIndex<R>, _ record: R) -> (key: [UInt8], value: [UInt8]) { Self.entry(index, record) }

    /// Every entry `record` has in `index`: one, or one per distinct element of an array.
    static func entries(_ index: RecordIndex<R>, _ record: R) -> [(key: [UInt8], value: [UInt8])] {
        guard let elementBytes = index.elementBytes else { return [entry(index, record)] }
        let id = record.id.keyBytes
        var seen = Set<[UInt8]>()
        return elementBytes(record).compactMap { bytes in
            seen.insert(bytes).inserted ? (index.isUnique ? index.keyPrefix + bytes : index.keyPrefix + bytes + id, id) : nil
        }
    }

    /// Replaces `old`'s entries (if any) with `new`'s. Throws `RecordError.uniqueViolation`
    /// before staging anything. An entry `old` already had (its indexed values unchanged)
    /// is neither checked nor staged again: the stored one stands.
    func replace(old: R?, with new: R) throws {
        if shape.hasElementIndexes { try replaceElements(old: old, with: new) }
        // This code runs generic (unspecialized for the application's record type), where
        // each copy of a `RecordIndex<R>`, or of a tuple holding one, goes through the
        // runtime's value witnesses, and each use of a type built from `R` looks its
        // metadata up. So the changes name their index by position, not by holding it
        // (callgrind, nested and records-update at N = 100,000: 25.69G → 21.32G
        // instructions in all); each index is copied out of the array once, over a range
        // of plain integers (`declared.indices` and `enumerated()` are generic calls here,
        // the latter dearer than all the copies it saved); and the old record is unwrapped
        // once, outside the loop.
        var changes: [IndexEntryChange] = []
        changes.reserveCapacity(declaredCount)
        if let old {
            for position in 0..<declaredCount {
                let index = declared[position]
                guard !index.isMultiValued else { continue }
                changes.append(IndexEntryChange(index: position, isUnique: index.isUnique, next: entry(index, new),
                                                previous: entry(index, old)))
            }
        } else {
            for position in 0..<declaredCount {
                let index = declared[position]
                guard !index.isMultiValued else { continue }
                changes.append(IndexEntryChange(index: position, isUnique: index.isUnique, next: entry(index, new), previous: nil))
            }
        }
        for change in changes where change.isUnique && change.previous?.key != change.next.key {
            if let holder = try context.get(change.next.key), holder != change.next.value {
                let index = declared[change.index]
                throw RecordError.uniqueViolation(entity: RecordTypeCache.entityName(of: R.self), index: index.name, value: index.render(new))
            }
        }
        for change in changes {
            if let previous = change.previous {
                if previous == change.next { continue }
                if previous.key != change.next.key { try context.stage(previous.key, nil) }
            }
            try context.stage(change.next.key, change.next.value)
        }
    }

    /// The entries of indexes with one per element (or none, for a unique optional key
    /// that is nil): those `old` had and `new` has not are removed, the new ones staged,
    /// after every unique one was checked.
    private func replaceElements(old: R?, with new: R) throws {
        let changes = declared.compactMap { index in
            index.isMultiValued ? (index: index, next: Self.entries(index, new), previous: Set((old.map { Self.entries(index, $0) } ?? []).map { $0.key })) : nil
        }
        for change in changes where change.index.isUnique {
            for entry in change.next where !change.previous.contains(entry.key) {
                if let holder = try context.get(entry.key), holder != entry.value {
                    throw RecordError.uniqueViolation(entity: RecordTypeCache.entityName(of: R.self), index: change.index.name,
                                                      value: change.index.render(new))
                }
            }
        }
        for change in changes {
            let kept = Set(change.next.map { $0.key })
            for key in change.previous where !kept.contains(key) { try context.stage(key, nil) }
            for entry in change.next where !change.previous.contains(entry.key) { try context.stage(entry.key, entry.value) }
        }
    }

    /// Removes `record`'s entries.
    func remove(_ record: R) throws {
        for index in declared {
            for entry in Self.entries(index, record) { try context.stage(entry.key, nil) }
        }
    }

    private func names(manifest bytes: [UInt8]) throws -> Set<String> {
        try RecordTypeCache.manifest(bytes) { Set(try RecordManifest(bytes).indexes) }
    }

    /// Before a write: builds every declared index the manifest does not list yet (RecordIndex.X1), in
    /// this context, and lists it. When the entity has no record yet there is nothing to
    /// build, and the manifest write is unchecked: it is the same for every writer of the
    /// type, so concurrent first writers never conflict over it.
    func ensureBuilt() throws {
        guard !isEmpty else { return }
        // The usual case, a manifest that lists every declared index: known by its bytes.
        guard let manifest = try context.get(manifestKey) else { return try build(having: []) }
        if try shape.allUsable(manifest: manifest, names: { try names(manifest: manifest) }) != nil { return }
        try build(having: try names(manifest: manifest))
    }

    /// Builds the declared indexes not in `have` for the entity's records, and lists them.
    private func build(having have: Set<String>) throws {
        let missing = declared.filter { !have.contains($0.name) }
        guard !missing.isEmpty else { return }
        let records = try context.scan(prefix: RecordKeys.prefix(entity: RecordTypeCache.entityName(of: R.self)))
        let read = RecordDecoder.reading(R.self)
        for (_, bytes) in records {
            let record = try RecordDecoder().decode(R.self, from: bytes, reading: read)
            for index in missing {
                for next in Self.entries(index, record) {
                    if index.isUnique, let holder = try context.get(next.key), holder != next.value {
                        throw RecordError.uniqueViolation(entity: RecordTypeCache.entityName(of: R.self), index: index.name, value: index.render(record))
                    }
                    try context.stage(next.key, next.value)
                }
            }
        }
        let built = have.union(missing.map { $0.name })
        try context.stage(manifestKey, try RecordManifest(indexes: built, declared: declared).encoded(), isChecked: false)
    }

    /// The indexes a fetch may use: those the manifest lists as built, or all of them
    /// while the entity has no record (nothing can be missing from them). Stages nothing.
    @usableFromInline
    func usable() throws -> [PlannedIndex] {
        guard !shape.indexes.isEmpty else { return [] }
        // A read-only context sees its snapshot and nothing else: the answer holds for
        // every query at that version (its last answer is kept, per record type).
        if context.isReadOnly {
            try context.checkOpen()
            let version = context.version
            let kept = context.attachment as? UsableIndexes ?? UsableIndexes()
            if kept.version == version, kept.shape === shape { return kept.indexes }
            let indexes = try listedUsable()
            (kept.version, kept.shape, kept.indexes) = (version, shape, indexes)
            context.attachment = kept
            return indexes
        }
        return try listedUsable()
    }

    /// `usable()` read from the manifest.
    private func listedUsable() throws -> [PlannedIndex] {
        let manifest = try context.get(manifestKey)
        if let manifest, let all = try shape.allUsable(manifest: manifest, names: { try names(manifest: manifest) }) { return all }
        let have = try manifest.map { try names(manifest: $0) } ?? []
        let entity = shape.recordPrefix
        if try context.scan(prefix: entity, limit: 1).isEmpty { return shape.indexes }
        var listed: [PlannedIndex] = []
        for index in shape.indexes where have.contains(index.name) { listed.append(index) }
        return listed
    }

    /// `usable()` as the declared indexes themselves.
    func usableIndexes() throws -> [RecordIndex<R>] {
        try usable().map { declared[$0.position] }
    }
}

/// A read-only context's last answer to which of a record type's indexes a query may use,
/// and the version it holds for (`IndexMaintenance.usable`), kept as the context's
/// attachment. Belongs to the context's task, as the context does.
final class UsableIndexes {
    var version: UInt64 = 0
    var shape: RecordShape?
    var indexes: [PlannedIndex] = []
}

/// How one index's entry changes when a record is replaced (`IndexMaintenance.replace`):
/// the index's position among the declared ones, whether it is unique, the entry the new
/// record has and the one the old record had.
struct IndexEntryChange {
    let index: Int
    let isUnique: Bool
    let next: (key: [UInt8], value: [UInt8])
    let previous: (key: [UInt8], value: [UInt8])?
}
