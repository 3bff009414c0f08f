// Aggregates over a repository's records: the smallest and largest value of a field (read
// from an index end when one holds the field in order), sums, averages, and how many
// records hold each value of a field (from the index entries alone when an index holds it).
// Values compare in Strata's order (IndexableValue.swift); nil and NaN values are
// ignored, as SQL ignores NULL.
import StrataContexts
import StrataEngine
import Foundation

extension Repository {
    /// The smallest value of `keyPath` among the records `predicate` holds for (all when
    /// nil), or nil when there is none. Read from the start of an index on the key path
    /// when the plan allows (`explain(predicate, sortBy: [SortDescriptor(keyPath)])` says
    /// "sorted by reading"), else from every match. NaN values are ignored.
    public func min<V: IndexableValue & Comparable>(_ keyPath: KeyPath<R, V> & Sendable, where predicate: Predicate<R>? = nil) throws -> V? {
        try extreme(keyPath, SortDescriptor(keyPath), predicate, largest: false) { Self.isNaN($0) ? nil : $0 }
    }

    /// The largest value of `keyPath` among the records `predicate` holds for, or nil; read
    /// from the end of an index as `min` reads from its start. NaN values are ignored.
    public func max<V: IndexableValue & Comparable>(_ keyPath: KeyPath<R, V> & Sendable, where predicate: Predicate<R>? = nil) throws -> V? {
        try extreme(keyPath, SortDescriptor(keyPath, order: .reverse), predicate, largest: true) { Self.isNaN($0) ? nil : $0 }
    }

    /// The smallest value of an optional `keyPath`, nil values ignored.
    public func min<V: IndexableValue & Comparable>(_ keyPath: KeyPath<R, V?> & Sendable, where predicate: Predicate<R>? = nil) throws -> V? {
        try extreme(keyPath, SortDescriptor(keyPath), predicate, largest: false) { $0.flatMap { Self.isNaN($0) ? nil : $0 } }
    }

    /// The largest value of an optional `keyPath`, nil values ignored.
    public func max<V: IndexableValue & Comparable>(_ keyPath: KeyPath<R, V?> & Sendable, where predicate: Predicate<R>? = nil) throws -> V? {
        try extreme(keyPath, SortDescriptor(keyPath, order: .reverse), predicate, largest: true) { $0.flatMap { Self.isNaN($0) ? nil : $0 } }
    }

    /// The sum of `keyPath` over the records `predicate` holds for (zero when none).
    /// Throws `RecordError.overflow` when the sum does not fit in `V`.
    public func sum<V: FixedWidthInteger>(_ keyPath: KeyPath<R, V> & Sendable, where predicate: Predicate<R>? = nil) throws -> V {
        var total = V.zero
        try forEachMatch(predicate) { record in
            let (sum, overflow) = total.addingReportingOverflow(record[keyPath: keyPath])
            guard !overflow else { throw RecordError.overflow(entity: shape.entityName, field: RecordIndex<R>.lastName(keyPath), type: "\(V.self)") }
            total = sum
        }
        return total
    }

    /// The sum of a floating-point `keyPath` over the records `predicate` holds for.
    public func sum<V: BinaryFloatingPoint>(_ keyPath: KeyPath<R, V> & Sendable, where predicate: Predicate<R>? = nil) throws -> V {
        var total = V.zero
        try forEachMatch(predicate) { total += $0[keyPath: keyPath] }
        return total
    }

    /// The mean of an integer `keyPath` over the records `predicate` holds for, or nil
    /// when there is none.
    public func average<V: BinaryInteger>(_ keyPath: KeyPath<R, V> & Sendable, where predicate: Predicate<R>? = nil) throws -> Double? {
        var (total, count) = (0.0, 0)
        try forEachMatch(predicate) { record in
            total += Double(record[keyPath: keyPath])
            count += 1
        }
        return count == 0 ? nil : total / Double(count)
    }

    /// The mean of a floating-point `keyPath` over the records `predicate` holds for, or
    /// nil when there is none.
    public func average<V: BinaryFloatingPoint>(_ keyPath: KeyPath<R, V> & Sendable, where predicate: Predicate<R>? = nil) throws -> Double? {
        var (total, count) = (0.0, 0)
        try forEachMatch(predicate) { record in
            total += Double(record[keyPath: keyPath])
            count += 1
        }
        return count == 0 ? nil : total / Double(count)
    }

    /// How many records hold each value of `keyPath` among those `predicate` holds for,
    /// in Strata's order of the values (IndexableValue.swift). With no predicate and an
    /// index that holds the key path alone, only its entries are counted and one record
    /// per value is read; otherwise every match is read.
    public func counts<V: IndexableValue>(by keyPath: KeyPath<R, V> & Sendable, where predicate: Predicate<R>? = nil) throws -> [(value: V, count: Int)] {
        if predicate == nil, let index = try indexes.usable().first(where: { $0.components.count == 1 && shape.facts(keyPath).field == $0.components[0].field }) {
            return try countsFromEntries(index, keyPath)
        }
        var groups: [[UInt8]: (value: V, count: Int)] = [:]
        try forEachMatch(predicate) { record in
            let value = record[keyPath: keyPath]
            groups[value.indexBytes, default: (value, 0)].count += 1
        }
        return groups.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map(\.value)
    }

    // MARK: Internals

    /// The first value `unwrap` keeps, in the order of `descriptor` (reading an index end
    /// when the plan can), or the extreme of every match's when the sort stays in memory.
    private func extreme<V, W: IndexableValue & Comparable>(_ keyPath: KeyPath<R, V>, _ descriptor: SortDescriptor<R>,
                                                             _ predicate: Predicate<R>?, largest: Bool,
                                                             _ unwrap: (V) -> W?) throws -> W? {
        let plan = try queryPlan(predicate, sortBy: [descriptor])
        if plan.isSortedByRead {
            var cursor = try cursor(predicate, sortBy: [descriptor])
            while let record = try cursor.next() {
                if let value = unwrap(record[keyPath: keyPath]) { return value }
            }
            return nil
        }
        var best: W?
        try forEachMatch(predicate) { record in
            guard let value = unwrap(record[keyPath: keyPath]) else { return }
            if let current = best, !(largest ? Self.precedes(current, value) : Self.precedes(value, current)) { return }
            best = value
        }
        return best
    }

    /// Whether `a` comes before `b` in Strata's order (index bytes) for the types it
    /// defines, or by `<` for others.
    private static func precedes<W: IndexableValue & Comparable>(_ a: W, _ b: W) -> Bool {
        W.self is any StrataOrdered.Type ? a.indexBytes.lexicographicallyPrecedes(b.indexBytes) : a < b
    }

    private static func isNaN(_ value: Any) -> Bool {
        if let value = value as? Double { return value.isNaN }
        if let value = value as? Float { return value.isNaN }
        if let value = value as? Date { return value.timeIntervalSinceReferenceDate.isNaN }
        return false
    }

    /// Calls `body` with every record `predicate` holds for (all when nil), in the plan's
    /// order.
    func forEachMatch(_ predicate: Predicate<R>?, _ body: (R) throws -> Void) throws {
        let plan = try queryPlan(predicate, sortBy: [])
        let filter = plan.isExact ? nil : predicate
        try forEachCandidate(plan, expected: nil) { key, bytes in
            let record = try decode(bytes, key: key)
            if let filter, try !filter.evaluate(record) { return true }
            try body(record)
            return true
        }
    }

    /// Entries of one value `countsFromEntries` walks before it counts the rest of them
    /// (`Context.countKeys`, which counts a leaf of the tree from its cells' flags) and
    /// seeks past them: a value held by few records costs its entries' steps, one held by
    /// many a seek and a count.
    package static var entriesWalkedPerValue: Int { 16 }

    /// `counts(by:)` from the entries of `index` (on the key path alone): entries grouped
    /// by their value bytes, and one record of each group read for the value.
    private func countsFromEntries<V>(_ index: PlannedIndex, _ keyPath: KeyPath<R, V>) throws -> [(value: V, count: Int)] {
        var groups: [(bytes: [UInt8], firstID: [UInt8], count: Int)] = []
        let end = keyAfterPrefix(index.keyPrefix)
        var start: [UInt8]? = index.keyPrefix
        while let from = start {
            start = nil
            // The prefix of a value's entries once they prove many (a non-unique index's value
            // bytes end on their own, FORMAT.md "Keys", so no other value's entries share it).
            var manyOf: [UInt8]?
            try context.forEach(from: from, to: end) { key, id in
                let valueEnd = key.count - (index.isUnique ? 0 : id.count)
                let value = Array(key[index.keyPrefix.count..<valueEnd])
                guard groups.last?.bytes == value else {
                    groups.append((value, id, 1))
                    return true
                }
                groups[groups.count - 1].count += 1
                guard groups[groups.count - 1].count == Self.entriesWalkedPerValue else { return true }
                manyOf = Array(key[..<valueEnd])
                return false
            }
            // The value's entries counted, not walked, and the walk goes on after them.
            if let manyOf {
                groups[groups.count - 1].count = try context.countKeys(prefix: manyOf)
                start = keyAfterPrefix(manyOf)
            }
        }
        return try groups.map { group in
            guard let record = try get(keyBytes: group.firstID) else {
                throw RecordError.invalidQuery("index \(index.name) of \(shape.entityName) names a record that does not exist; run checkIndexes()")
            }
            return (record[keyPath: keyPath], group.count)
        }
    }

    /// The record whose id key bytes are `id`, or nil.
    func get(keyBytes id: [UInt8]) throws -> R? {
        let key = recordPrefix + id
        return try context.get(key).map { try decode($0, key: key) }
    }
}
