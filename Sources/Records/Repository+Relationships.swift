// Reading through relationships: a record's related records, a page of records with their
// related records read in one pass (no query per record), and records filtered by what
// their related records hold.
import StrataContexts
import StrataEngine
import Foundation

extension Record {
    /// The record `relationship` relates this one to, as `context` sees it, or nil. Throws
    /// `RecordError.invalidRelationship` when the relationship is not declared whole.
    @inlinable
    public func related<Target>(_ relationship: ToOne<Self, Target>, in context: Context) throws -> Target? {
        try context.repository(Self.self).related(of: [self], through: relationship.link)[0].first
    }

    /// The record `relationship` relates this one to in `unit`, or nil.
    @inlinable
    public func related<Target>(_ relationship: ToOne<Self, Target>, in unit: UnitOfWork) throws -> Target? {
        try related(relationship, in: unit.context)
    }

    /// The records `relationship` relates this one to, as `context` sees them, sorted by
    /// `sortBy` (for an inverse: id order when empty; for ids the record holds: their order
    /// there), at most `limit`.
    @inlinable
    public func related<Target>(_ relationship: ToMany<Self, Target>, in context: Context, sortBy: [SortDescriptor<Target>] = [],
                                limit: Int? = nil) throws -> [Target] {
        var records = try context.repository(Self.self).related(of: [self], through: relationship.link)[0]
        if !sortBy.isEmpty { RecordOrder(sortBy).sort(&records) }
        return Array(records.prefix(limit ?? .max))
    }

    /// The records `relationship` relates this one to in `unit`.
    @inlinable
    public func related<Target>(_ relationship: ToMany<Self, Target>, in unit: UnitOfWork, sortBy: [SortDescriptor<Target>] = [],
                                limit: Int? = nil) throws -> [Target] {
        try related(relationship, in: unit.context, sortBy: sortBy, limit: limit)
    }
}

extension Repository {
    /// The records `fetch(predicate, sortBy:, limit:)` returns, each with the records
    /// `relationship` relates it to, read in one pass over the page: every related record
    /// is read once, through the foreign key's index, however many records share it.
    @inlinable
    public func fetch<Target>(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = [], limit: Int? = nil,
                              including relationship: ToMany<R, Target>) throws -> [(record: R, related: [Target])] {
        let records = try fetch(predicate, sortBy: sortBy, limit: limit)
        return zip(records, try related(of: records, through: relationship.link)).map { ($0, $1) }
    }

    /// The records `fetch(predicate, sortBy:, limit:)` returns, each with the record
    /// `relationship` relates it to (nil: none), read in one pass over the page.
    @inlinable
    public func fetch<Target>(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = [], limit: Int? = nil,
                              including relationship: ToOne<R, Target>) throws -> [(record: R, related: Target?)] {
        let records = try fetch(predicate, sortBy: sortBy, limit: limit)
        return zip(records, try related(of: records, through: relationship.link)).map { ($0, $1.first) }
    }

    /// The records `predicate` holds for (all when nil) whose record related through
    /// `relationship` matches `related`, sorted and limited as `fetch` does.
    public func fetch<Target>(_ predicate: Predicate<R>? = nil, related relationship: ToOne<R, Target>, matching related: Predicate<Target>,
                              sortBy: [SortDescriptor<R>] = [], limit: Int? = nil) throws -> [R] {
        try fetchRelated(predicate, relationship.link, matching: related, sortBy: sortBy, limit: limit)
    }

    /// The records `predicate` holds for (all when nil) with at least one record related
    /// through `relationship` that matches `related`, sorted and limited as `fetch` does.
    public func fetch<Target>(_ predicate: Predicate<R>? = nil, related relationship: ToMany<R, Target>, matching related: Predicate<Target>,
                              sortBy: [SortDescriptor<R>] = [], limit: Int? = nil) throws -> [R] {
        try fetchRelated(predicate, relationship.link, matching: related, sortBy: sortBy, limit: limit)
    }

    /// How many records `fetch(predicate, related:matching:)` would return.
    public func count<Target>(_ predicate: Predicate<R>? = nil, related relationship: ToMany<R, Target>,
                              matching related: Predicate<Target>) throws -> Int {
        try fetchRelated(predicate, relationship.link, matching: related, sortBy: [], limit: nil).count
    }

    /// How many records `fetch(predicate, related:matching:)` would return.
    public func count<Target>(_ predicate: Predicate<R>? = nil, related relationship: ToOne<R, Target>,
                              matching related: Predicate<Target>) throws -> Int {
        try fetchRelated(predicate, relationship.link, matching: related, sortBy: [], limit: nil).count
    }

    /// The records related to a record `related` matches, through `link` seen from the
    /// target's side: the targets are fetched first (through their own plan), then the
    /// records that name them (`via`: through the foreign key's index; inverse: the ids
    /// the targets hold), then `predicate`, the sort and the limit.
    private func fetchRelated<Target>(_ predicate: Predicate<R>?, _ link: Link<R, Target>, matching related: Predicate<Target>,
                                      sortBy: [SortDescriptor<R>], limit: Int?) throws -> [R] {
        _ = try RecordTypeCache.links(of: R.self)
        let targets = try Repository<Target>(context: context).fetch(related)
        var ids = Set<[UInt8]>()
        switch link.side {
        case .via:
            guard let back = link.counterpart else { return [] }
            for target in targets {
                for record in try back.referrers(of: target.id, in: context) { ids.insert(record.id.keyBytes) }
            }
        case .inverse:
            for target in targets { for id in link.heldSourceIDs(target) { ids.insert(id.keyBytes) } }
        }
        var records = try ids.sorted { $0.lexicographicallyPrecedes($1) }.compactMap { try get(keyBytes: $0) }
        if let predicate { records = try records.filter { try predicate.evaluate($0) } }
        if !sortBy.isEmpty { RecordOrder(sortBy).sort(&records) }
        return Array(records.prefix(limit ?? .max))
    }
}

extension Repository {
    /// For each of `records`, its related records through `link`: for ids a record holds,
    /// in their order there, each distinct target read once; for an inverse, in id order,
    /// from the foreign key's index (or, before it is built, one read of every target).
    /// Inlinable, so that it is specialized for both record types where it is called: run
    /// unspecialized, each record read looked up generic metadata at run time.
    @inlinable
    func related<Target>(of records: [R], through link: Link<R, Target>) throws -> [[Target]] {
        try checkRelationshipsDeclared()
        let targets = Repository<Target>(context: context)
        let snapshot = try context.snapshotWhenUnstaged()
        switch link.side {
        case .via:
            var read: [Target.ID: Target?] = [:]
            return try records.map { record in
                try link.heldIDs(record).compactMap { id in
                    if let known = read[id] { return known }
                    let target = try targets.record(keyBytes: id.keyBytes, snapshot: snapshot)
                    read[id] = target
                    return target
                }
            }
        case .inverse:
            guard let index = try link.usableReferrerIndex(in: context) else {
                return try link.referrers(ofAll: records.map { $0.id }, in: context)
            }
            let ranges = records.map { index.range(of: $0.id.keyBytes) }
            var related = Array(repeating: [Target](), count: records.count)
            // Records in key order (a page read in id order) are served by one walk of the
            // index; where their entries lie apart, the walk stops and another starts.
            var done = 0
            while done < ranges.count { done += try targets.walkReferrers(ranges[done...], into: &related, snapshot: snapshot) }
            return related
        }
    }

    /// Reads the records whose ids are the values of the index entries in each of `ranges`
    /// (the referrers of a page of records) into the same place of `related`, in one walk
    /// from the first range to the last of those that follow it in ascending order.
    /// Returns how many of the ranges it finished (at least one): it stops early, between
    /// two ranges, once it has passed more entries outside them than it read inside (the
    /// records lie apart, and a walk from the next one costs less).
    @inlinable
    func walkReferrers(_ ranges: ArraySlice<KeyRange>, into related: inout [[R]], snapshot: Snapshot?) throws -> Int {
        let start = ranges.startIndex
        var last = start
        while last + 1 < ranges.endIndex, let upper = ranges[last].upper, let lower = ranges[last + 1].lower,
              compareKeys(upper, lower) <= 0 { last += 1 }
        var position = start
        var (passed, gaveUp) = (0, false)
        var found = FoundReferrers()
        try context.forEachLent(from: ranges[start].lower, to: ranges[last].upper) { entry, id in
            entry.withUnsafeBytes { entry in
                while position <= last, let upper = ranges[position].upper, upper.withUnsafeBytes({ compareBytes(entry, $0) >= 0 }) {
                    position += 1
                }
                guard position <= last else { return false }
                guard let lower = ranges[position].lower, lower.withUnsafeBytes({ compareBytes(entry, $0) >= 0 }) else {
                    // Between two ranges: an entry of a record not asked for.
                    passed += 1
                    gaveUp = passed > found.count + 8
                    return !gaveUp
                }
                id.withUnsafeBytes { found.append($0, to: position - start) }
                return true
            }
        }
        try read(found, into: &related, from: start, snapshot: snapshot)
        // Giving up, the walk stood before `position`'s range, none of which it had read.
        return (gaveUp ? position : last + 1) - start
    }

    /// Reads the records `found` names into their places of `related`, counted from
    /// `base` (each place's in the order found). From a snapshot they are read in key order through one
    /// `OrderedReader`: ids of neighbouring records share a leaf page, looked up there
    /// without a descent from the root per record.
    @inlinable
    func read(_ found: FoundReferrers, into related: inout [[R]], from base: Int, snapshot: Snapshot?) throws {
        var key = prefix
        guard let snapshot else {
            for index in 0..<found.count {
                found.withID(index) { id in key.replaceSubrange(prefix.count..., with: id) }
                if let record = try record(key: key, snapshot: nil) { related[base + found.place(index)].append(record) }
            }
            return
        }
        var records = [R?](repeating: nil, count: found.count)
        var reader = snapshot.orderedReader()
        for index in found.keyOrder() {
            found.withID(index) { id in key.replaceSubrange(prefix.count..., with: id) }
            records[index] = try reader.withValue(forKey: key.span.bytes) { value in try value.withUnsafeBytes { try decode($0, key: key) } }
        }
        for index in 0..<found.count {
            if let record = records[index].take() { related[base + found.place(index)].append(record) }
        }
    }

    /// The record whose id key bytes are `id`, or nil: read where it lies when the context
    /// staged nothing (`snapshot`), else as the context reads it.
    @inlinable
    func record(keyBytes id: [UInt8], snapshot: Snapshot?) throws -> R? {
        try record(key: prefix + id, snapshot: snapshot)
    }

    /// The record under `key` (a record key of this entity), or nil.
    @inlinable
    func record(key: [UInt8], snapshot: Snapshot?) throws -> R? {
        if let snapshot {
            return try snapshot.withValue(forKey: key) { value in try value.withUnsafeBytes { try decode($0, key: key) } }
        }
        return try context.get(key).map { try decode($0, key: key) }
    }

}

/// The record ids an index walk found, each with the place (a page's record) it belongs
/// to, in the order found: their bytes in one buffer, not an array each.
@usableFromInline
struct FoundReferrers {
    @usableFromInline var bytes: [UInt8] = []
    /// Per id: where its bytes end in `bytes` (they start where the previous one's end) and
    /// its place.
    @usableFromInline var ids: [(end: Int, place: Int)] = []

    @inlinable init() {}

    @inlinable var count: Int { ids.count }

    @inlinable mutating func append(_ id: UnsafeRawBufferPointer, to place: Int) {
        bytes.append(contentsOf: id)
        ids.append((bytes.count, place))
    }

    @inlinable func place(_ index: Int) -> Int { ids[index].place }

    @inlinable func withID<T>(_ index: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let start = index == 0 ? 0 : ids[index - 1].end
        return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[start..<ids[index].end])) }
    }

    /// The indexes of the ids in ascending key order (equal ids in the order found). Sorted
    /// by their first sixteen bytes as two integers (a comparison that captures nothing),
    /// then the rare runs that tie there by all their bytes.
    @inlinable func keyOrder() -> [Int] {
        bytes.withUnsafeBytes { bytes in
            func id(_ index: Int) -> UnsafeRawBufferPointer {
                UnsafeRawBufferPointer(rebasing: bytes[(index == 0 ? 0 : ids[index - 1].end)..<ids[index].end])
            }
            var order = ids.indices.map { index in (head: Self.word(id(index), 0), tail: Self.word(id(index), 8), index: index) }
            order.sort { lhs, rhs in
                lhs.head != rhs.head ? lhs.head < rhs.head : lhs.tail != rhs.tail ? lhs.tail < rhs.tail : lhs.index < rhs.index
            }
            var start = 0
            while start < order.count {
                var end = start + 1
                while end < order.count && order[end].head == order[start].head && order[end].tail == order[start].tail { end += 1 }
                if end - start > 1 {
                    order[start..<end].sort { lhs, rhs in
                        let compared = compareBytes(id(lhs.index), id(rhs.index))
                        return compared != 0 ? compared < 0 : lhs.index < rhs.index
                    }
                }
                start = end
            }
            return order.map(\.index)
        }
    }

    /// Bytes `offset ..< offset + 8` of `id` as a big-endian integer, zeros past its end:
    /// integers that order as the bytes do, until they tie.
    @inlinable static func word(_ id: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        var word: UInt64 = 0
        for index in offset..<(offset + 8) { word = word << 8 | UInt64(index < id.count ? id[index] : 0) }
        return word
    }
}
