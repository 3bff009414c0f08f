// A lazy, ordered result: records decoded one at a time as they are asked for, in the
// order `fetch` would return them. Reads in id order and sorts pushed down to an index
// walk the keys as they go; a sort done in memory, or an index read put back in id order,
// has to see every match first and gathers them when the cursor is made.
import StrataContexts
import StrataEngine
import Foundation

/// The records a query matches, read one at a time by `next()`. Not a `Sequence`: a read
/// can fail (a damaged page, a finished context), and a sequence's iterator cannot say so.
/// The cursor reads through its context and must not outlive it.
public struct RecordCursor<R: Record> {
    private enum Source {
        /// Candidate keys still to walk: record keys, or (`throughIndex`) index entries
        /// whose values are record ids.
        case walk(ContextCursor, throughIndex: Bool)
        case gathered([R], next: Int)
    }

    private let repository: Repository<R>
    private let predicate: Predicate<R>?
    private let isExact: Bool
    private var source: Source
    /// For a backwards read of a non-unique index: the entries of one value still to hand
    /// out (read in descending id order, handed out from the end, so in id order, as
    /// `fetch` returns ties), and the first entry of the next value.
    private var regrouping: (group: [(key: [UInt8], value: [UInt8])], next: (key: [UInt8], value: [UInt8])?)?

    init(repository: Repository<R>, predicate: Predicate<R>?, plan: QueryPlan, walk: ContextCursor?, throughIndex: Bool,
         regroup: Bool, gathered: [R]) {
        self.repository = repository
        self.predicate = predicate
        isExact = plan.isExact
        source = walk.map { .walk($0, throughIndex: throughIndex) } ?? .gathered(gathered, next: 0)
        regrouping = regroup ? ([], nil) : nil
    }

    /// The next record, or nil after the last. Throws what a fetch would throw.
    public mutating func next() throws -> R? {
        switch source {
        case let .gathered(records, next):
            guard next < records.count else { return nil }
            source = .gathered(records, next: next + 1)
            return records[next]
        case .walk(var cursor, let throughIndex):
            defer { source = .walk(cursor, throughIndex: throughIndex) }
            while let (key, value) = try nextEntry(&cursor) {
                guard let (recordKey, bytes) = try repository.candidate(key: key, value: value, throughIndex: throughIndex) else { continue }
                let record = try repository.decodeRecord(bytes, key: recordKey)
                if !isExact, let predicate, try !predicate.evaluate(record) { continue }
                return record
            }
            return nil
        }
    }

    /// The next key and value of the walk, regrouped when `regrouping` says so.
    private mutating func nextEntry(_ cursor: inout ContextCursor) throws -> (key: [UInt8], value: [UInt8])? {
        guard var regrouping else { return try cursor.next() }
        defer { self.regrouping = regrouping }
        if let entry = regrouping.group.popLast() { return entry }
        guard let first = try regrouping.next ?? cursor.next() else { return nil }
        regrouping.next = nil
        // An entry's key is its value's bytes, then the id its value holds.
        let value = first.key.dropLast(first.value.count)
        regrouping.group = [first]
        while let entry = try cursor.next() {
            guard entry.key.dropLast(entry.value.count) == value else {
                regrouping.next = entry
                break
            }
            regrouping.group.append(entry)
        }
        return regrouping.group.popLast()
    }

    /// Up to `count` more records (fewer at the end): a page.
    public mutating func next(_ count: Int) throws -> [R] {
        var page: [R] = []
        while page.count < count, let record = try next() { page.append(record) }
        return page
    }
}

extension Repository {
    /// The records `fetch(predicate, sortBy: sortBy)` would return, as a cursor that
    /// decodes each one when `next()` reaches it. Reads in id order and sorts read from an
    /// index or the ids (`explain` says "sorted by reading") are lazy: stopping early reads
    /// no further. Other sorts gather the matches first.
    public func cursor(_ predicate: Predicate<R>? = nil, sortBy: [SortDescriptor<R>] = []) throws -> RecordCursor<R> {
        let plan = try queryPlan(predicate, sortBy: sortBy)
        let range: KeyRange?
        var throughIndex = false
        var regroup = false
        switch plan.access {
        case let .range(lower, upper) where sortBy.isEmpty || plan.sortedByID != nil:
            range = KeyRange(from: lower.map { recordPrefix + $0 }, to: upper.map { recordPrefix + $0 }, prefix: recordPrefix)
        case .scan where sortBy.isEmpty || plan.sortedByID != nil: range = KeyRange(prefix: recordPrefix)
        case let .index(index, lower, upper) where plan.sortedBy != nil:
            // Backwards through a non-unique index, the entries of each value are
            // regrouped into id order, as `fetch` returns ties.
            range = KeyRange(from: lower, to: upper)
            throughIndex = true
            regroup = plan.sortedBy?.reverse == true && !index.isUnique
        default: range = nil
        }
        guard let range else {
            return RecordCursor(repository: self, predicate: predicate, plan: plan, walk: nil, throughIndex: false, regroup: false,
                                gathered: try fetch(predicate, sortBy: sortBy))
        }
        try context.checkOpen()
        let walk = try ContextCursor(context, range: range, reverse: plan.sortedBy?.reverse ?? plan.sortedByID ?? false)
        return RecordCursor(repository: self, predicate: predicate, plan: plan, walk: walk, throughIndex: throughIndex,
                            regroup: regroup, gathered: [])
    }
}
