// A repository: a typed view of one entity's records through a context. It sees the
// context's overlays exactly as the context does, and its writes are the context's
// staged writes, committed or discarded with it. Cheap to make; make one per unit of work.
import StrataContexts
@_spi(EngineInlinable) import StrataEngine
import Foundation

/// Records of type `R` as seen by one context.
public struct Repository<R: Record> {
    /// The context the repository reads and writes through.
    public let context: Context
    /// What the planner knows of `R`.
    @usableFromInline let shape: RecordShape
    @usableFromInline let indexes: IndexMaintenance<R>
    @usableFromInline var prefix: [UInt8] { shape.recordPrefix }
    /// How records are read when `R` is `RecordReadable`.
    @usableFromInline let read: RecordReading<R>?

    @usableFromInline
    init(context: Context) {
        self.context = context
        let facts = RecordTypeCache.facts(of: R.self)
        shape = facts.shape
        indexes = IndexMaintenance(context: context, shape: shape, declared: facts.indexes)
        read = facts.read
        // A writable context may merge: its store's catalog must know the type behind the
        // keys it stages.
        if !context.isReadOnly { RecordCatalog.of(context.store).register(R.self, shape: shape) }
    }

    private func key(_ id: R.ID) -> [UInt8] { prefix + id.keyBytes }

    /// Throws `RecordError.invalidRelationship` when `R`'s relationships are not declared
    /// whole (checked once per type).
    @usableFromInline
    func checkRelationshipsDeclared() throws {
        _ = try RecordTypeCache.links(of: R.self)
    }

    private func describe(_ id: R.ID) -> String { "\(id)" }

    // MARK: Writing

    /// Stages a new record and its index entries. Throws `RecordError.duplicate` when its
    /// id exists, `.uniqueViolation` when a unique index already holds its value.
    public func insert(_ record: R) throws {
        try write(record) { exists in
            guard !exists else { throw RecordError.duplicate(entity: RecordTypeCache.entityName(of: R.self), id: describe(record.id)) }
        }
    }

    /// Stages a changed record and its index entries. Throws `RecordError.notFound` when
    /// its id does not exist, `.uniqueViolation` as `insert` does.
    public func update(_ record: R) throws {
        try write(record) { exists in
            guard exists else { throw RecordError.notFound(entity: RecordTypeCache.entityName(of: R.self), id: describe(record.id)) }
        }
    }

    /// Stages the record, whether or not its id exists.
    public func upsert(_ record: R) throws {
        try write(record) { _ in }
    }

    /// Stages the removal of the record with `id` and its index entries, and applies the
    /// delete rules of its type's relationships (cascades, nullifications; RelationshipLink.swift,
    /// RelationshipLink.L2), all or nothing. Throws `RecordError.notFound` when there is none,
    /// `.deleteDenied` when a `.deny` rule refuses it.
    public func delete(_ id: R.ID) throws {
        guard try context.contains(key(id)) else { throw RecordError.notFound(entity: RecordTypeCache.entityName(of: R.self), id: describe(id)) }
        if shape.hasRelationships {
            _ = try RecordTypeCache.links(of: R.self)
            // In a child, so that a rule refusing part way (a cascade reaching a `.deny`)
            // leaves this context as it was.
            let child = try context.makeChild()
            do {
                try Repository(context: child).deleteApplyingRules(id)
                try child.commit()
            } catch {
                child.discard()
                throw error
            }
            return
        }
        if indexes.isEmpty {
            // No entries to find: the record need not even decode.
            return try context.stage(key(id), nil, tracksInsert: true)
        }
        try indexes.ensureBuilt()
        if let old = try get(id) { try indexes.remove(old) }
        try context.stage(key(id), nil, tracksInsert: true)
    }

    /// Deletes the record with `id` with its index entries and applies its type's delete
    /// rules (RelationshipLink.L2): every `.deny` first, then the record, then cascades and nullifications.
    /// Reads the record as the context holds it now (a rule applied before, in the same
    /// cascade, may have changed it, or deleted it: then there is nothing to do).
    func deleteApplyingRules(_ id: R.ID) throws {
        guard let record = try get(id) else { return }
        let links = try RecordTypeCache.links(of: R.self)
        for link in links where link.deleteRule == .deny {
            let count = try link.blockingCount(record, in: context)
            if count > 0 {
                throw RecordError.deleteDenied(entity: RecordTypeCache.entityName(of: R.self), id: describe(record.id),
                                               foreignKey: link.foreignKeyName, count: count)
            }
        }
        if !indexes.isEmpty {
            try indexes.ensureBuilt()
            try indexes.remove(record)
        }
        try context.stage(key(record.id), nil, tracksInsert: true)
        for link in links { try link.applyDeleteRule(to: record, in: context) }
    }

    /// Stages `record` after `check` saw whether it existed (decoded only when index
    /// entries must be replaced, so records of an older shape can be overwritten), after
    /// the targets of its relationships were checked (RelationshipLink.L1).
    /// What this write's read of the record's key learned of the snapshot is staged with
    /// it, so that the commit need not look the key up again (Context.C6).
    private func write(_ record: R, check: (Bool) throws -> Void) throws {
        let key = key(record.id)
        let snapshotHolds: Bool?
        if indexes.isEmpty {
            let found = try context.getNotingSnapshot(key)
            try check(found.value != nil)
            snapshotHolds = found.snapshotHolds
        } else {
            try indexes.ensureBuilt()
            let found = try context.getNotingSnapshot(key)
            let old = try found.value.map { try decode($0, key: key) }
            try check(old != nil)
            if shape.hasRelationships {
                for link in try RecordTypeCache.links(of: R.self) { try link.checkTargets(old: old, new: record, in: context) }
            }
            try indexes.replace(old: old, with: record)
            snapshotHolds = found.snapshotHolds
        }
        try context.stage(key, try RecordEncoder().encode(record), tracksInsert: true, snapshotHolds: snapshotHolds)
    }

    // MARK: Reading

    /// The record with `id`, or nil.
    public func get(_ id: R.ID) throws -> R? {
        let key = key(id)
        return try context.get(key).map { try decode($0, key: key) }
    }

    /// Every record, in id order.
    public func all() throws -> [R] { try fetch() }

    // `fetch`, `first`, `count` and `exists` are inlinable, so that they are specialized
    // for the app's record type where they are called: unspecialized, their arrays and
    // optionals of records cost a runtime metadata lookup each time.

    /// The records for which `predicate` holds (all when nil), sorted by `sortBy` (id
    /// order when empty), skipping `offset`, at most `limit` (a negative one of either is
    /// `RecordError.invalidQuery`). An `id == constant` term anded at the top of the
    /// predicate becomes a point lookup, id range terms a key range and terms on an
    /// indexed key path an index range; the rest is evaluated on each record. Sorts are in
    /// Strata's order (RecordOrder.swift: by index bytes for the scalars Strata defines,
    /// NaN last), stable, ties in id order; a sort whose key paths an index holds in that
    /// order (after the components an equality fixes) reads that index in order (backwards
    /// for `.reverse`), and a sort on the id reads the ids in order, so `limit` stops the
    /// read early. `explain` shows which is which.
    ///
    /// `after` pages by key (keyset pagination): only records that come after it in this
    /// order (ties in id order) are returned, so the last record of one page fetches the
    /// next page without counting through the earlier ones. In id order and with a sort
    /// read forwards from an index, the read starts right after it.
    @inlinable
    public func fetch(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = [],
                      after anchor: R? = nil, limit: Int? = nil, offset: Int = 0) throws -> [R] {
        guard offset >= 0, (limit ?? 0) >= 0 else {
            throw RecordError.invalidQuery("offset \(offset) and limit \(limit.map(String.init) ?? "none") must not be negative")
        }
        let unsorted = sortBy.isEmpty
        var plan = try queryPlan(predicate, sortBy: sortBy)
        if let anchor {
            plan.startAfter(idBytes: anchor.id.keyBytes, inIDOrder: unsorted, entryBytes: { indexes.declared[$0.position].bytes(anchor) })
        }
        // Without a sort the result is in id order. Key-range plans read in id order, so a
        // limit can stop them early; an index plan reads in index order and is put back
        // in id order first. A pushed-down sort reads in the sort's order.
        let inIndexOrder = if case .index = plan.access { true } else { false }
        let sortedByRead = plan.isSortedByRead
        let orderedByRead = sortedByRead || (unsorted && !inIndexOrder)
        let stopAfter = orderedByRead ? limit.map { offset + $0 } : nil
        if stopAfter == 0 { return [] }
        var records: [R] = []
        // A limit read in order is what the result grows to, unless fewer match.
        if let stopAfter { records.reserveCapacity(Swift.min(stopAfter, 256)) }
        // Index order is put back in id order (only needed with more than one match),
        // before any in-memory sort too: ties keep id order, as the sort is stable.
        var keys: [[UInt8]] = []
        let keepKeys = inIndexOrder && !sortedByRead
        let filter = plan.isExact ? nil : predicate
        // Tested once here: `if let` in the loop copied the optional predicate and
        // record for every candidate, nil or not.
        let (filtered, anchored) = (filter != nil, anchor != nil)
        // The order, when a comparison needs it: a sort done here, or an anchor to follow.
        let order = unsorted || (sortedByRead && !anchored) ? nil : RecordOrder(sortBy)
        try forEachCandidate(plan, expected: stopAfter) { key, bytes in
            let record = try decode(bytes, key: key)
            if filtered, try !filter!.evaluate(record) { return true }
            if anchored, !Self.follows(record, anchor!, order) { return true }
            records.append(consume record)
            if keepKeys { keys.append(Array(key)) }
            return stopAfter.map { records.count < $0 } ?? true
        }
        if keys.count > 1 {
            let order = keys.indices.sorted { keys[$0].lexicographicallyPrecedes(keys[$1]) }
            let unordered = records
            for (position, index) in order.enumerated() { records[position] = unordered[index] }
        }
        if !sortedByRead, let order { order.sort(&records) }
        if offset == 0 && records.count <= limit ?? .max { return records }
        return Array(records.dropFirst(offset).prefix(limit ?? .max))
    }

    /// Whether `record` comes after `anchor` in `order` (id order when nil), ties in id order.
    @usableFromInline
    static func follows(_ record: R, _ anchor: R, _ order: RecordOrder<R>?) -> Bool {
        if let order { return order.follows(record, anchor) }
        let (mine, theirs) = (record.id.keyBytes, anchor.id.keyBytes)
        return mine != theirs && !mine.lexicographicallyPrecedes(theirs)
    }

    /// How many records `predicate` holds for (all when nil). When the plan is exact
    /// (`explain` says so) only keys or index entries are counted, no record is read.
    @inlinable
    public func count(_ predicate: Predicate<R>? = nil) throws -> Int {
        try countMatches(predicate, upTo: .max)
    }

    /// Whether any record holds `predicate` (any record at all when nil); stops at the
    /// first, and reads no record when the plan is exact.
    @inlinable
    public func exists(_ predicate: Predicate<R>? = nil) throws -> Bool {
        try countMatches(predicate, upTo: 1) > 0
    }

    /// The first record `predicate` holds for, in `sortBy` order (id order when empty).
    @inlinable
    public func first(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = []) throws -> R? {
        try fetch(predicate, sortBy: sortBy, after: nil, limit: 1).first
    }

    /// How `fetch` would run `predicate` with `sortBy`: the key range or index it reads,
    /// whether the sort is done by reading an index in order, and what it evaluates on
    /// each candidate.
    public func explain(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = []) throws -> String {
        let plan = try queryPlan(predicate, sortBy: sortBy)
        var text = plan.description(entity: shape.entityName, predicate: predicate.map { "\($0)" })
        if !sortBy.isEmpty && !plan.isSortedByRead { text += "; sorted in memory" }
        return text
    }

    // MARK: Internals

    /// Inlinable, so that it is specialized where it is called: run unspecialized, it
    /// looked up the metadata of `Predicate<R>`, `SortDescriptor<R>` and their optionals at
    /// run time on every query.
    @inlinable
    func queryPlan(_ predicate: Predicate<R>?, sortBy: [SortDescriptor<R>]) throws -> QueryPlan {
        let usable = try indexes.usable()
        // Not `if let`: binding the predicate copies it.
        let terms = predicate.map { PredicateShapes.terms(of: $0) }
        var plan = QueryPlan(terms, shape: shape, indexes: usable)
        if !sortBy.isEmpty, let sorts = RecordOrder.readable(sortBy, shape: shape) {
            _ = plan.pushDown(sorts, shape: shape, indexes: usable)
        }
        return plan
    }

    /// How many records hold `predicate`, counting no further than `limit`.
    @inlinable
    func countMatches(_ predicate: Predicate<R>?, upTo limit: Int) throws -> Int {
        let plan = try queryPlan(predicate, sortBy: [])
        var count = 0
        guard predicate != nil, !plan.isExact else {
            // Every key or entry the plan reads is a match: count them, read no record.
            switch plan.access {
            case let .point(id): return try context.contains(prefix + id) ? 1 : 0
            case let .indexEntry(_, entry): return try context.contains(entry) ? 1 : 0
            case let .range(lower, upper):
                return try context.countKeys(from: lower.map { prefix + $0 }, to: upper.map { prefix + $0 }, prefix: prefix, limit: limit)
            case let .index(_, lower, upper): return try context.countKeys(from: lower, to: upper, limit: limit)
            case .scan: return try context.countKeys(prefix: prefix, limit: limit)
            }
        }
        let predicate = predicate!
        try forEachCandidate(plan, expected: limit) { key, bytes in
            if try predicate.evaluate(try decode(bytes, key: key)) { count += 1 }
            return count < limit
        }
        return count
    }

    /// Hands `body` each candidate record's key and bytes that `plan` reads, in the plan's
    /// order, until it returns false. `expected`: how many candidates the caller means to
    /// take at most (nil: all it can), so that records found through an index are read
    /// that many at a time (`Snapshot.withValues`: their lookups overlap their cache
    /// misses) without reading many past the last one taken. The key and the bytes are
    /// lent for the call: a caller that keeps the key copies it.
    @usableFromInline
    func forEachCandidate(_ plan: QueryPlan, expected: Int?,
                          _ body: (_ key: UnsafeRawBufferPointer, _ bytes: UnsafeRawBufferPointer) throws -> Bool) throws {
        // Records are handed over where their bytes lie: with nothing staged, in the
        // memtable or a page of the snapshot (no copy); else as the context reads them.
        // Keys too are lent where they lie, not copied into an array per record.
        let snapshot = try context.snapshotWhenUnstaged()
        func read(_ key: [UInt8]) throws -> Bool {
            try key.withUnsafeBytes { keyBytes in
                // Not `if let`: binding the snapshot retained it per record.
                if snapshot != nil {
                    return try snapshot.unsafelyUnwrapped.withValue(forKey: key) { value in try value.withUnsafeBytes { try body(keyBytes, $0) } } ?? true
                }
                guard let bytes = try context.get(key) else { return true }
                return try bytes.withUnsafeBytes { try body(keyBytes, $0) }
            }
        }
        switch plan.access {
        case let .point(id):
            _ = try read(prefix + id)
        case let .range(lower, upper):
            try context.forEachLent(from: lower.map { prefix + $0 }, to: upper.map { prefix + $0 }, prefix: prefix,
                                    reverse: plan.sortedByID ?? false) { key, value in
                try key.withUnsafeBytes { key in try value.withUnsafeBytes { try body(key, $0) } }
            }
        case let .index(index, lower, upper):
            // Each entry's value is a record id; the records are read in index order.
            guard let sorted = plan.sortedBy, sorted.reverse, !index.isUnique else {
                var batchSize = Swift.min(expected ?? .max, Self.largestReadBatch)
                if let batchSnapshot = snapshot, batchSize > 1 {
                    // The records of `batchSize` entries at a time, read side by side.
                    // (Locals, not `self.prefix` and the optional, in the per-entry
                    // closure: each access there retained and released them.)
                    let prefix = self.prefix
                    var batch = KeyBatch(keys: batchSize, bytes: batchSize * (prefix.count + 16))
                    var going = true
                    // Candidates still expected: a batch after the first reads no more
                    // than those (at least a batch's lanes, for candidates `body` passes
                    // over), where a full batch read and looked up records past the last
                    // one taken (28 of 128 for a limit of 100).
                    var wanted = expected ?? .max
                    try context.forEachLent(from: lower, to: upper, reverse: plan.sortedBy?.reverse ?? false) { _, id in
                        batch.append(prefix, id)
                        if batch.count == batchSize {
                            wanted -= batchSize
                            going = try readRecords(&batch, from: batchSnapshot, body)
                            batchSize = Swift.min(Swift.max(wanted, Snapshot.batchLanes), Self.largestReadBatch)
                        }
                        return going
                    }
                    if going && !batch.isEmpty { _ = try readRecords(&batch, from: batchSnapshot, body) }
                    return
                }
                // One record key, rewritten for each entry.
                var key = prefix
                return try context.forEachLent(from: lower, to: upper, reverse: plan.sortedBy?.reverse ?? false) { _, id in
                    id.withUnsafeBytes { key.replaceSubrange(prefix.count..., with: $0) }
                    return try read(key)
                }
            }
            // Backwards, records with equal values still come in id order, as a stable
            // sort of the id-ordered records would leave them: entries are gathered per
            // value (the key without its id) and each group is read forwards.
            var group: [[UInt8]] = []
            var groupValue: ArraySlice<UInt8> = []
            var going = true
            func flush() throws {
                for id in group.reversed() where going { going = try read(prefix + id) }
                group.removeAll(keepingCapacity: true)
            }
            try context.forEach(from: lower, to: upper, reverse: true) { key, id in
                let value = key[..<(key.count - id.count)]
                if value != groupValue {
                    try flush()
                    groupValue = value
                }
                group.append(id)
                return going
            }
            if going { try flush() }
        case let .indexEntry(_, entry):
            guard let id = try context.get(entry) else { return }
            _ = try read(prefix + id)
        case .scan:
            try context.forEachLent(prefix: prefix, reverse: plan.sortedByID ?? false) { key, value in
                try key.withUnsafeBytes { key in try value.withUnsafeBytes { try body(key, $0) } }
            }
        }
    }

    /// Hands `body` the records `batch` names (record keys, lent from the batch), read
    /// side by side, in order until it returns false, and empties the batch; returns
    /// whether `body` asked for more.
    private func readRecords(_ batch: inout KeyBatch, from snapshot: Snapshot,
                             _ body: (_ key: UnsafeRawBufferPointer, _ bytes: UnsafeRawBufferPointer) throws -> Bool) throws -> Bool {
        var going = true
        try snapshot.withValues(forKeys: batch) { _, key, value in
            guard let value else { return true }
            going = try value.withUnsafeBytes { try body(key, $0) }
            return going
        }
        batch.removeAll()
        return going
    }

    /// The most records an index walk reads at a time.
    static var largestReadBatch: Int { 64 }

    /// The record-key prefix of `R`'s entity.
    var recordPrefix: [UInt8] { prefix }

    /// A walked key and value as a candidate record's key and bytes: itself, or for an
    /// index entry (`throughIndex`) the record its value names; nil when there is none.
    func candidate(key: [UInt8], value: [UInt8], throughIndex: Bool) throws -> (key: [UInt8], bytes: [UInt8])? {
        guard throughIndex else { return (key, value) }
        let recordKey = prefix + value
        return try context.get(recordKey).map { (recordKey, $0) }
    }

    func decodeRecord(_ bytes: [UInt8], key: [UInt8]) throws -> R { try decode(bytes, key: key) }

    @usableFromInline
    func decode(_ bytes: [UInt8], key: [UInt8]) throws -> R {
        try bytes.withUnsafeBytes { try decode($0, key: key) }
    }

    /// The record in `bytes`, read where they lie when `R` is `RecordReadable`.
    /// Inlinable, so that it is specialized where it is called: run unspecialized, its
    /// reader's result cost a run-time metadata lookup per record.
    @inlinable
    func decode(_ bytes: UnsafeRawBufferPointer, key: [UInt8]) throws -> R {
        try key.withUnsafeBytes { try decode(bytes, key: $0) }
    }

    /// `decode(_:key:)` with the key lent where it lies (copied only for an error).
    @inlinable
    func decode(_ bytes: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer) throws -> R {
        do {
            if let read { return try RecordReader.read(bytes) { try read.read($0) } }
            return try RecordDecoder().decode(R.self, from: Array(bytes))
        } catch {
            throw decodingError(error, key: Array(key))
        }
    }

    /// What a failed decode of the record at `key` throws: a `RecordError` as it is, any
    /// other error as `RecordError.decoding` naming the entity and key.
    @usableFromInline
    func decodingError(_ error: any Error, key: [UInt8]) -> any Error {
        if let error = error as? RecordError { return error }
        return RecordError.decoding(entity: RecordTypeCache.entityName(of: R.self), key: renderKey(key), reason: "\(error)")
    }
}

extension Context {
    /// A repository of `type`'s records that reads and writes through this context.
    public func repository<R: Record>(_ type: R.Type) -> Repository<R> { Repository(context: self) }
}

extension UnitOfWork {
    /// A repository of `type`'s records in this unit of work.
    public func repository<R: Record>(_ type: R.Type) -> Repository<R> { Repository(context: context) }
}

extension Repository: CustomStringConvertible, CustomReflectable {
    public var description: String { "Repository<\(R.entityName)>(\(context))" }

    public var customMirror: Mirror {
        Mirror(self, children: ["entity": R.entityName, "context": context], displayStyle: .struct)
    }
}
