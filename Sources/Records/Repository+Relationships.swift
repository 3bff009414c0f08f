// Reading through relationships: a record's related records, a page of records with their
// related records read in one pass (no query per record), and records filtered by what
// their related records hold.
import StrataContexts
import StrataEngine
import Foundation

extension Record {
    /// The record `relationship` relates this one to, as `context` sees it, or nil. Throws
    /// `RecordError.invalidRelationship` when the relationship is not declared whole.
    public func related<Target>(_ relationship: ToOne<Self, Target>, in context: Context) throws -> Target? {
        try RelatedRecords(relationship.link, context: context).of([self])[0].first
    }

    /// The record `relationship` relates this one to in `unit`, or nil.
    public func related<Target>(_ relationship: ToOne<Self, Target>, in unit: UnitOfWork) throws -> Target? {
        try related(relationship, in: unit.context)
    }

    /// The records `relationship` relates this one to, as `context` sees them, sorted by
    /// `sortBy` (for an inverse: id order when empty; for ids the record holds: their order
    /// there), at most `limit`.
    public func related<Target>(_ relationship: ToMany<Self, Target>, in context: Context, sortBy: [SortDescriptor<Target>] = [],
                                limit: Int? = nil) throws -> [Target] {
        var records = try RelatedRecords(relationship.link, context: context).of([self])[0]
        if !sortBy.isEmpty { RecordOrder(sortBy).sort(&records) }
        return Array(records.prefix(limit ?? .max))
    }

    /// The records `relationship` relates this one to in `unit`.
    public func related<Target>(_ relationship: ToMany<Self, Target>, in unit: UnitOfWork, sortBy: [SortDescriptor<Target>] = [],
                                limit: Int? = nil) throws -> [Target] {
        try related(relationship, in: unit.context, sortBy: sortBy, limit: limit)
    }
}

extension Repository {
    /// The records `fetch(predicate, sortBy:, limit:)` returns, each with the records
    /// `relationship` relates it to, read in one pass over the page: every related record
    /// is read once, through the foreign key's index, however many records share it.
    public func fetch<Target>(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = [], limit: Int? = nil,
                              including relationship: ToMany<R, Target>) throws -> [(record: R, related: [Target])] {
        let records = try fetch(predicate, sortBy: sortBy, limit: limit)
        return zip(records, try RelatedRecords(relationship.link, context: context).of(records)).map { ($0, $1) }
    }

    /// The records `fetch(predicate, sortBy:, limit:)` returns, each with the record
    /// `relationship` relates it to (nil: none), read in one pass over the page.
    public func fetch<Target>(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = [], limit: Int? = nil,
                              including relationship: ToOne<R, Target>) throws -> [(record: R, related: Target?)] {
        let records = try fetch(predicate, sortBy: sortBy, limit: limit)
        return zip(records, try RelatedRecords(relationship.link, context: context).of(records)).map { ($0, $1.first) }
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

/// The related records of a page of records through one relationship, each read once.
struct RelatedRecords<Source: Record, Target: Record> {
    let link: Link<Source, Target>
    let context: Context

    init(_ link: Link<Source, Target>, context: Context) throws {
        _ = try RecordTypeCache.links(of: Source.self)
        self.link = link
        self.context = context
    }

    /// For each of `records`, its related records: for ids a record holds, in their order
    /// there; for an inverse, in id order.
    func of(_ records: [Source]) throws -> [[Target]] {
        let targets = Repository<Target>(context: context)
        switch link.side {
        case .via:
            // Each distinct target once, however many records hold it.
            var read: [Target.ID: Target?] = [:]
            return try records.map { record in
                try link.heldIDs(record).compactMap { id in
                    if let known = read[id] { return known }
                    let target = try targets.get(id)
                    read[id] = target
                    return target
                }
            }
        case .inverse:
            return try link.referrers(ofAll: records.map(\.id), in: context)
        }
    }
}
